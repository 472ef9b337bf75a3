#!/usr/bin/env bash
# The main job: a hardened gVisor sandbox on the embedded default policy, what it can and cannot
# do from the inside, and the audit record of what was enforced; then the hash-chained audit log
# verified, and tampered copies of it failing verification. Run as root on Debian/Ubuntu;
# installs what is missing, builds, runs against a private containerd it starts and stops.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
require_root
ensure_packages
ensure_rust
# containerd 2.x and a current runsc (hack/deps.sh); GVH_STACK=compat runs it on Debian's
# containerd 1.6 and runsc 20221219 instead. Nothing of Kubernetes is built for it.
ensure_stack "${CONTAINER_STACK_NAMES[@]}"
trap 'rm -f "$GVH_DEPS"' EXIT
cd "$REPO_ROOT"
log "building the shim and policy-injector (release)"
cargo build --release -p containerd-shim-gvisor-hardened -p policy-injector --features policy-injector/cli
export GVH_SHIM_BINARY="$REPO_ROOT/target/release/containerd-shim-gvisor-hardened-v1"
log "running the demo"
cargo run --release -q -p gvisor-hardened-tests --example demo
