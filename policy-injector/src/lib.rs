//! The hardening policy and the pure OCI spec rewriter.
