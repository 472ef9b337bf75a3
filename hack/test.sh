#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit tests, and the integration and end-to-end tests
# against a private containerd and real runsc. Run as root on Debian/Ubuntu; installs what is
# missing first.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
require_root
ensure_disk
ensure_packages
ensure_engines
ensure_rust
ensure_stack
trap 'rm -f "$GVH_DEPS"' EXIT
# Before the tests: the audit-record schema test validates with Python's jsonschema; the
# workspace tests use the owner's git hook tools.
ensure_python_tools
ensure_hook_tools
cd "$REPO_ROOT"

log "cargo fmt --check"
cargo fmt --all -- --check
# policy-injector's operator binary (and its tests) sits behind the `cli` feature, which keeps
# clap and anyhow out of the library; the sandbox core's unit tests that need root and the host
# (real runsc sandboxes, cgroups, mounts) sit behind `host-tests` (turned on through the shim's
# feature of that name), so the crates' tests run anywhere without it. Here, as root on a
# prepared machine, both on.
# The integration tests are one binary behind gvisor-hardened-tests's `root` feature: linted and
# built with the rest, but run by run_integration_modules (lib.sh), a process per module, never
# by the workspace's `cargo test`, which would run all modules in one process.
features=("${PRODUCT_FEATURES[@]}" --features gvisor-hardened-tests/root)
log "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
log "build"
cargo build --workspace --bins "${features[@]}"
log "the front ends' fake-world tests as uid 65534, without runsc"
"$REPO_ROOT/hack/rootless-tests.sh"
# Two stacks (tests/src/stack.rs): everything on the current one (containerd 2.x, a current
# runsc), then the core path on Debian's (containerd 1.6, runsc 20221219), the compatibility
# stack: a ctr lifecycle, a CRI pod, egress, the Docker path and the attack table's spec-level
# category.
log "tests on the current stack (unit, integration, end to end, the attack catalogue)"
redteam="$(mktemp /tmp/gvh-redteam.XXXXXX)"
trap 'rm -f "$redteam" "$GVH_DEPS"' EXIT
# Each step's status is collected and the stack's verdict given after all of them: a failure in
# the unit tests must not hide the integration tests' results, nor one module another's.
status=0
log "the workspace's own tests (unit, doc, the crates' test targets; not the integration binary)"
GVH_STACK=current cargo test --workspace --no-fail-fast "${PRODUCT_FEATURES[@]}" || status=1
log "the integration tests, a process per module"
# (No features of the other crates: they change nothing the integration binary runs, and
# `-p gvisor-hardened-tests` accepts only its own and its dependencies'.)
GVH_STACK=current GVH_REDTEAM_OUT="$redteam" run_integration_modules || status=1
log "red-team table (current stack)"
"$REPO_ROOT/hack/redteam.sh" --results "$redteam" || status=1
[ "$status" = 0 ] || die "tests on the current stack failed (see above)"
log "the core path on the compatibility stack (containerd 1.6, runsc 20221219)"
compat_redteam="$(mktemp /tmp/gvh-redteam-compat.XXXXXX)"
trap 'rm -f "$redteam" "$compat_redteam" "$GVH_DEPS"' EXIT
GVH_STACK=compat run_integration_modules -- \
  shim_smoke shim_task_api cri_hardened warm_pool egress_shim docker_engine || status=1
GVH_STACK=compat GVH_REDTEAM_OUT="$compat_redteam" \
  run_integration_modules -- attacks::spec_smuggling || status=1
log "red-team table, spec-level category (compatibility stack)"
"$REPO_ROOT/hack/redteam.sh" --results "$compat_redteam" || status=1
[ "$status" = 0 ] || die "tests on the compatibility stack failed (see above)"
log "fuzzing, bounded (policy parser and harden)"
"$REPO_ROOT/hack/fuzz.sh" 60
log "Kubernetes manifests (kustomize render, kubernetes-validate 1.30-1.37, own checks)"
"$REPO_ROOT/hack/check-manifests.sh"
log "all tests passed"
