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
ensure_stack
trap 'rm -f "$GVH_DEPS"' EXIT
# Before the tests: the audit-record schema test validates with Python's jsonschema.
ensure_python_tools
cd "$REPO_ROOT"

log "cargo fmt --check"
cargo fmt --all -- --check
# policy-injector's operator binary (and its tests) sits behind the `cli` feature, which keeps
# clap and anyhow out of the library; the sandbox core's unit tests that need root and the host
# (real runsc sandboxes, cgroups, mounts) sit behind `host-tests` (turned on through the shim's
# feature of that name), so the crates' tests run anywhere without it. Here, as root on a prepared machine, both on.
features=(--features policy-injector/cli --features containerd-shim-gvisor-hardened/host-tests)
log "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets "${features[@]}" -- -D warnings
log "build"
cargo build --workspace --bins "${features[@]}"
log "the front ends' fake-world tests as uid 65534, without runsc"
"$REPO_ROOT/hack/rootless-tests.sh" "${features[@]}"
# Two stacks (tests/src/stack.rs): everything on the current one (containerd 2.x, a current
# runsc), then the core path on Debian's (containerd 1.6, runsc 20221219), the compatibility
# stack: a ctr lifecycle, a CRI pod, egress, the Docker path and the attack table's spec-level
# category.
log "tests on the current stack (unit, integration, end to end, the attack catalogue)"
redteam="$(mktemp /tmp/gvh-redteam.XXXXXX)"
trap 'rm -f "$redteam" "$GVH_DEPS"' EXIT
GVH_STACK=current GVH_REDTEAM_OUT="$redteam" cargo test --workspace --no-fail-fast "${features[@]}"
log "red-team table (current stack)"
"$REPO_ROOT/hack/redteam.sh" --results "$redteam"
log "the core path on the compatibility stack (containerd 1.6, runsc 20221219)"
compat_redteam="$(mktemp /tmp/gvh-redteam-compat.XXXXXX)"
trap 'rm -f "$redteam" "$compat_redteam" "$GVH_DEPS"' EXIT
GVH_STACK=compat cargo test -p gvisor-hardened-tests --no-fail-fast "${features[@]}" \
  --test shim_smoke --test shim_task_api --test cri_hardened --test egress_shim \
  --test docker_engine
GVH_STACK=compat GVH_REDTEAM_OUT="$compat_redteam" \
  cargo test -p gvisor-hardened-tests "${features[@]}" --test attacks -- spec_smuggling
log "red-team table, spec-level category (compatibility stack)"
"$REPO_ROOT/hack/redteam.sh" --results "$compat_redteam"
log "fuzzing, bounded (policy parser and harden)"
"$REPO_ROOT/hack/fuzz.sh" 60
log "Kubernetes manifests (kustomize render, kubernetes-validate 1.30-1.37, own checks)"
"$REPO_ROOT/hack/check-manifests.sh"
log "all tests passed"
