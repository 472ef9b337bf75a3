#!/usr/bin/env bash
# The integration tests (tests/tests/integration/, the `integration` test binary behind
# gvisor-hardened-tests's `root` feature), each module in a process of its own (see
# run_integration_modules in lib.sh): a line per module and the totals at the end; exits
# non-zero if any module failed. Run as root on a machine hack/test.sh has prepared.
#
#   hack/integration.sh                              every module
#   hack/integration.sh shim_smoke bounded_output    those modules
#   hack/integration.sh attacks::spec_smuggling      a module's tests whose names contain a word
#   GVH_STACK=compat hack/integration.sh shim_smoke  on the compatibility stack
#   RUST_TEST_NOCAPTURE=1 hack/integration.sh churn  the tests' own output as it comes
#
# The stack's binaries are found through GVH_DEPS (`hack/deps.sh --print` output) when it is
# set, else written there first (a warm hack/deps.sh takes a second). The product binaries are
# built before the tests, as hack/test.sh builds them.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
require_root
ensure_rust
if [ -z "${GVH_DEPS:-}" ]; then
  ensure_stack
  trap 'rm -f "$GVH_DEPS"' EXIT
fi
cd "$REPO_ROOT"
log "build the product binaries"
cargo build --workspace --bins "${PRODUCT_FEATURES[@]}"
run_integration_modules -- "$@"
