//! Integration and end-to-end test harness (real containerd, real runsc).
