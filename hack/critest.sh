#!/usr/bin/env bash
# Kubernetes' CRI validation suite (critest, sigs.k8s.io/cri-tools at hack/versions.env's
# version) against a private containerd 2.x with three handlers: runc, gVisor's own shim
# (containerd-shim-runsc-v1 from the gVisor module our runsc comes from) and gvisor-hardened.
# Offline: the suite's images are stand-ins the harness builds and serves from a registry on
# 127.0.0.1 (tests/src/critest/). Prints each handler's counts and failures, and fails on any
# failure not listed in tests/critest-expected.toml, on a listed one that passed, and on a
# suite that hangs (30 min per handler). hack/test.sh runs it.
#
#   hack/critest.sh                    every spec
#   hack/critest.sh 'FOCUS REGEXP'     only the specs matching it (counts only, no list check)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
require_root
ensure_rust
if [ -z "${GVH_DEPS:-}" ]; then
  ensure_stack containerd ctr containerd-shim-runc-v2 runsc containerd-shim-runsc-v1 critest
  trap 'rm -f "$GVH_DEPS"' EXIT
fi
cd "$REPO_ROOT"
log "build the product binaries"
cargo build --workspace --bins "${PRODUCT_FEATURES[@]}"
if [ $# -gt 0 ]; then
  export GVH_CRITEST_FOCUS="$1"
fi
RUST_TEST_NOCAPTURE=1 run_integration_modules -- critest
