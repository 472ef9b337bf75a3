#!/usr/bin/env bash
# Builds the in-sandbox egress forwarder as a fully static binary.
#
#   hack/build-forwarder.sh [OUT]    # default: target/forwarder/gvisor-hardened-forwarder
#
# The forwarder runs inside sandboxes whose rootfs may have no libc, so it must be static. No
# musl target is installed here; glibc's static libc works for this std-only program (it never
# resolves names, the one thing static glibc cannot do). It is built with plain rustc, as
# tests/build.rs does, so the flags reach this binary only and no cargo lock is taken.
# The installer copies OUT to /usr/local/lib/gvisor-hardened/gvisor-hardened-forwarder, the
# policy's default `[network.egress] forwarder`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ensure_rust
OUT="${1:-$REPO_ROOT/target/forwarder/gvisor-hardened-forwarder}"
build_forwarder "$OUT"
file "$OUT" 2>/dev/null || true
