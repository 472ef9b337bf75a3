#!/usr/bin/env bash
# A real coding agent's workload under gvisor-hardened, plain runsc and runc, on the stack
# GVH_STACK selects (current by default, or compat), as root:
#
#   hack/agent-bench.sh [--publish] [--no-wait] [DRIVER OPTIONS...]
#   GVH_STACK=compat hack/agent-bench.sh --publish
#
# In one sandbox per run, in a writable workspace bind: `python3 -m venv`, `pip install` of 11
# wheels from a local package index over HTTPS (through the egress allowlist and proxy under
# gvisor-hardened), `git clone` and `git fetch` from a local git server over HTTPS, a pytest run
# of 300 tests, writing 1000 small files, `cp -r` of the venv and `ls -la`: each step timed
# inside the sandbox (tests/examples/agent_bench, hack/bench/agent/workload.sh). Variants are
# interleaved round by round with the order rotated; see hack/bench/README.md for the method.
#
# Prepared once and cached outside the checkout, under /var/cache/gvisor-hardened/:
# - agent-rootfs-bookworm-v1/: a Debian bookworm rootfs from `debootstrap --variant=minbase
#   --include=python3,python3-pip,python3-venv,git,ca-certificates` (the mirror named in
#   /etc/apt/sources.list*), with a user `agent` (1000), as an OCI archive for `ctr images import`;
# - agent-wheels-v1/: the wheels the index serves (`pip wheel` of two generated packages,
#   pytest and requests with their dependencies from PyPI; hack/bench/agent/upstream.py).
# Everything else (test CA, index, git repository, network namespaces) is made per run.
#
# Writes target/agent-bench/agent-<stack>.{md,json}; --publish copies them to hack/bench/.
# Before measuring it waits for the 1-minute load average to drop below 1.5 (hack/bench/quiet.sh;
# --no-wait skips that). DRIVER OPTIONS: --rounds N (3), --warmup N (1), --only KEYS; see the
# top of tests/examples/agent_bench/main.rs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$HACK_DIR/bench/quiet.sh"

CACHE=/var/cache/gvisor-hardened
ROOTFS_DIR="$CACHE/agent-rootfs-bookworm-v1"
WHEELS_DIR="$CACHE/agent-wheels-v1"
IMAGE_REF=localhost/gvh-agent:bookworm
INCLUDE=python3,python3-pip,python3-venv,git,ca-certificates

publish=0
wait=1
driver_args=()
for a in "$@"; do
  case "$a" in
    --publish) publish=1 ;;
    --no-wait) wait=0 ;;
    *) driver_args+=("$a") ;;
  esac
done

# The Debian mirror apt uses here: the first URI of a bookworm (not -security, -updates) source,
# in either format (one-line `deb URI SUITE ...`, or deb822 `URIs:` / `Suites:` stanzas).
debian_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
         { uri = ""; ok = 0
           for (i = 1; i <= NF; i++) {
             if ($i ~ /^URIs:/) { split($i, u, " "); uri = u[2] }
             if ($i ~ /^Suites:/ && $i ~ /(^|[ ])bookworm([ ]|$)/) ok = 1
           }
           if (ok && uri != "") { print uri; exit } }' "$f"
  done
}

ensure_agent_image() {
  if [ -f "$ROOTFS_DIR/image.tar" ]; then
    return
  fi
  install_missing debootstrap
  local mirror tmp
  mirror="$(debian_mirror | head -n 1)"
  [ -n "$mirror" ] || die "no bookworm mirror found in /etc/apt/sources.list*"
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.agent-rootfs.XXXXXX")"
  log "debootstrap bookworm from $mirror into $tmp (a few minutes, once)"
  debootstrap --variant=minbase --include="$INCLUDE" bookworm "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
    || { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log: $tmp/debootstrap.log)"; }
  # The agent's user, its home with the mount points of the coding-agent preset's tmpfs
  # (the root is read-only under the policy), and the bench's two bind targets.
  chroot "$tmp/root" useradd --create-home --uid 1000 --user-group --shell /bin/bash agent
  install -d -o 1000 -g 1000 "$tmp/root/home/agent/.cache" "$tmp/root/home/agent/.config" \
    "$tmp/root/home/agent/.local" "$tmp/root/home/agent/.local/state" "$tmp/root/home/agent/go"
  install -d "$tmp/root/workspace" "$tmp/root/bench"
  chroot "$tmp/root" apt-get clean
  rm -rf "$tmp/root/var/lib/apt/lists/"* "$tmp/root/var/log/"*.log
  tar --numeric-owner --xattrs -C "$tmp/root" -cf "$tmp/rootfs.tar" .
  python3 "$HACK_DIR/bench/agent/oci-archive.py" "$tmp/rootfs.tar" "$IMAGE_REF" "$tmp/image.tar" >/dev/null
  rm -rf "$tmp/root" "$tmp/rootfs.tar"
  echo "debootstrap --variant=minbase --include=$INCLUDE bookworm ROOT $mirror; user agent 1000" >"$tmp/RECIPE"
  mv "$tmp" "$ROOTFS_DIR"
  log "cached $ROOTFS_DIR/image.tar ($(du -h "$ROOTFS_DIR/image.tar" | cut -f1))"
}

ensure_agent_wheels() {
  if [ -f "$WHEELS_DIR/.complete" ]; then
    return
  fi
  python3 -m pip --version >/dev/null 2>&1 || install_missing python3-pip
  local tmp
  mkdir -p "$CACHE"
  tmp="$(mktemp -d "$CACHE/.agent-wheels.XXXXXX")"
  log "building the index's wheels (pip wheel, pip download from PyPI; once)"
  python3 "$HACK_DIR/bench/agent/upstream.py" wheels "$tmp"
  touch "$tmp/.complete"
  mv "$tmp" "$WHEELS_DIR"
}

require_root
ensure_packages
ensure_rust
if [ "${GVH_STACK:-current}" = current ]; then
  ensure_stack
fi
install_missing util-linux openssl git
ensure_agent_image
ensure_agent_wheels
cd "$REPO_ROOT"
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)

log "building the shim and the agent bench driver (release)"
cargo build --release -q -p containerd-shim-gvisor-hardened -p runsc-hardened
cargo build --release -q -p gvisor-hardened-tests --example agent_bench

if [ "$wait" = 1 ]; then
  wait_for_quiet
fi
log "machine load before: $(uptime)"
"$target/release/examples/agent_bench" \
  --shim "$target/release/containerd-shim-gvisor-hardened-v1" \
  --image "$ROOTFS_DIR/image.tar" --reference "$IMAGE_REF" --wheels "$WHEELS_DIR" \
  --out "$target/agent-bench" "${driver_args[@]}"
log "machine load after: $(uptime)"

if [ "$publish" = 1 ]; then
  stack="${GVH_STACK:-current}"
  cp "$target/agent-bench/agent-$stack.md" "$target/agent-bench/agent-$stack.json" "$HACK_DIR/bench/"
  log "published hack/bench/agent-$stack.{md,json} (update docs/performance.md)"
fi
