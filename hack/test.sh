#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, and the integration and end-to-end tests
# against a private containerd and real runsc. Run as root on Debian/Ubuntu; installs what is
# missing first.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
require_root
ensure_packages
ensure_engines
ensure_rust
# Before the tests: the audit-record schema test validates with Python's jsonschema.
ensure_python_tools
cd "$REPO_ROOT"

log "cargo fmt --check"
cargo fmt --all -- --check
# policy-injector's operator binary (and its tests) sits behind the `cli` feature, which keeps
# clap and anyhow out of the library; the shim's unit tests that need root and the host (real
# runsc sandboxes, cgroups, mounts) sit behind `host-tests`, so `cargo test -p
# containerd-shim-gvisor-hardened` runs anywhere. Here, as root on a prepared machine, both on.
features=(--features policy-injector/cli --features containerd-shim-gvisor-hardened/host-tests)
log "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
log "build"
cargo build --workspace --bins "${features[@]}"
log "tests (unit, integration, end to end, the attack catalogue)"
redteam="$(mktemp /tmp/gvh-redteam.XXXXXX)"
trap 'rm -f "$redteam"' EXIT
GVH_REDTEAM_OUT="$redteam" cargo test --workspace --no-fail-fast "${features[@]}"
log "red-team table"
"$REPO_ROOT/hack/redteam.sh" --results "$redteam"
log "fuzzing, bounded (policy parser and harden)"
"$REPO_ROOT/hack/fuzz.sh" 60
log "Kubernetes manifests (kustomize render, kubernetes-validate 1.30-1.37, own checks)"
"$REPO_ROOT/hack/check-manifests.sh"
log "all tests passed"
