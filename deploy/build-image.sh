#!/usr/bin/env bash
# Builds the installer image from this checkout, with no registry and no image builder: the
# release binaries, then an OCI image archive assembled here with GNU tar and sha256sum (one
# layer, every entry owned by root with mtime 0, sorted: the same inputs give the same digests).
#
#   deploy/build-image.sh                     build; print the archive's path, then the reference
#   deploy/build-image.sh --import-to SOCKET  build, `ctr -a SOCKET -n k8s.io images import` it;
#                                             the last line printed is the image reference
#   deploy/build-image.sh --print-ref         only print the reference (builds nothing)
#
# The reference is what `kubectl kustomize deploy/kustomize/default` renders for the DaemonSet
# (`gvisor-hardened-installer:<newTag>` from deploy/kustomize/installer-image), spelled the way
# containerd's CRI resolves it: docker.io/library/gvisor-hardened-installer:<tag>. The kubelet
# then finds it in the node's containerd and, with the DaemonSet's `IfNotPresent`, never pulls.
#
# The image (paths the DaemonSet and the installer's defaults expect, deploy/installer/src/cli.rs):
#   /opt/gvisor-hardened/bin/gvisor-hardened-installer      entrypoint; default argument --help
#   /opt/gvisor-hardened/bin/containerd-shim-gvisor-hardened-v1   --shim-source
#   /opt/gvisor-hardened/bin/gvisor-hardened-forwarder      --forwarder-source (static)
#   /opt/gvisor-hardened/bin/runsc-hardened                 the OCI runtime binary, for Docker/Podman nodes
#   /opt/gvisor-hardened/bin/policy-injector                the operator CLI (`cli` feature); the
#                                                           metrics DaemonSet runs its
#                                                           `audit metrics` exporter
#   /opt/gvisor-hardened/policies/*.toml                    --policy-source: the RuntimeClasses'
#                                                           policies (the DaemonSet mounts its ConfigMap instead)
#   /usr/bin/nsenter + the shared libraries of everything dynamic (this machine's glibc):
#       the installer runs host commands through `nsenter -t 1 -m --`.
#
# Cached by content under $GVH_CACHE (default /var/cache/gvisor-hardened/installer-image): the
# archive's name is a hash of every file that goes in, so a rebuild with nothing changed is
# cargo's no-op check plus hashing.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# build_forwarder (and lib.sh's own log/die, replaced below by ones that name this script).
source "$REPO_ROOT/hack/lib.sh"
CACHE="${GVH_CACHE:-/var/cache/gvisor-hardened}/installer-image"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
PREFIX=opt/gvisor-hardened

die() { printf 'build-image: error: %s\n' "$*" >&2; exit 1; }
log() { printf 'build-image: %s\n' "$*" >&2; }

usage() {
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit "${1:-0}"
}

# name:tag from the installer-image component, normalised as containerd's CRI does (a name
# without a registry is docker.io/library/NAME). A digest pin cannot be imported under its
# reference (the digest is of a registry's manifest, not of this build): refused.
image_ref() {
  local comp="$REPO_ROOT/deploy/kustomize/installer-image/kustomization.yaml" name tag
  grep -q '^ *digest:' "$comp" && die "$comp pins a digest: build-image.sh serves tag pins only"
  name="$(sed -n 's/^ *newName: *//p' "$comp")"
  tag="$(sed -n 's/^ *newTag: *//p' "$comp")"
  name="${name:-gvisor-hardened-installer}"
  [ -n "$tag" ] || die "$comp sets no newTag"
  case "$name" in
    */*) case "${name%%/*}" in
           *.* | *:* | localhost) ;;
           *) name="docker.io/$name" ;;
         esac ;;
    *) name="docker.io/library/$name" ;;
  esac
  printf '%s:%s\n' "$name" "$tag"
}

import_to=""
case "${1:-}" in
  --print-ref) [ $# -eq 1 ] || usage 2; image_ref; exit 0 ;;
  --import-to) [ $# -eq 2 ] || usage 2; import_to=$2 ;;
  -h | --help) usage 0 ;;
  "") ;;
  *) usage 2 ;;
esac
REF="$(image_ref)"

# One build at a time per cache: two callers at once (parallel tests, a test beside
# kube-node.sh) would write the same forwarder and archive paths. Imports need no lock.
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

# 1. The binaries. The forwarder must be static (it runs inside sandboxes whose rootfs may have
# no libc): hack/lib.sh builds it with plain rustc; it is rebuilt only when its sources change.
# cargo runs in a clean environment: called from a `cargo test` (the image test, the cluster
# tests), the variables cargo sets for tests made this build recompile ring and everything
# above it each time it alternated with a run from a shell (measured: a minute each).
log "cargo build --release (shim, runsc-hardened, installer, policy-injector)"
cargo_env=(env -i "PATH=$PATH" "HOME=$HOME")
for v in CARGO_HOME RUSTUP_HOME CARGO_TARGET_DIR TMPDIR; do
  [ -z "${!v:-}" ] || cargo_env+=("$v=${!v}")
done
(cd "$REPO_ROOT" && "${cargo_env[@]}" cargo build --release -q \
  -p containerd-shim-gvisor-hardened -p runsc-hardened -p gvisor-hardened-installer --bins)
# A build of its own: in the one above, cargo would unify the `cli` feature into the
# policy-injector library the shim and the installer link, and build them differently from
# `cargo build --release -p containerd-shim-gvisor-hardened` (the image test compares the shim).
(cd "$REPO_ROOT" && "${cargo_env[@]}" cargo build --release -q \
  -p policy-injector --features cli --bin policy-injector)
fwd_key="$(cat "$REPO_ROOT"/shim/forwarder/src/*.rs "$REPO_ROOT/hack/lib.sh" | sha256sum | cut -c1-16)"
fwd="$CACHE/forwarder-$fwd_key"
if [ ! -x "$fwd" ]; then
  log "building the static forwarder"
  mkdir -p "$CACHE"
  build_forwarder "$fwd"
  find "$CACHE" -maxdepth 1 -name 'forwarder-*' ! -name "forwarder-$fwd_key" -delete
fi

# 2. The root file system, in a scratch directory.
work="$(mktemp -d /tmp/gvh-image.XXXXXX)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/$PREFIX/bin" "$root/$PREFIX/policies" "$root/usr/bin"
for b in containerd-shim-gvisor-hardened-v1 runsc-hardened gvisor-hardened-installer policy-injector; do
  install -m 0755 "$TARGET_DIR/release/$b" "$root/$PREFIX/bin/$b"
done
install -m 0755 "$fwd" "$root/$PREFIX/bin/gvisor-hardened-forwarder"
install -m 0644 "$REPO_ROOT"/deploy/kustomize/runtimeclasses/policies/*.toml "$root/$PREFIX/policies/"
install -m 0755 "$(command -v nsenter)" "$root/usr/bin/nsenter"
# Every shared library a binary in the image loads, at the path the loader resolved it to.
for b in "$root/$PREFIX/bin/gvisor-hardened-installer" "$root/$PREFIX/bin/policy-injector" \
  "$root/usr/bin/nsenter"; do
  ldd "$b" | grep -o '/[^ ]*' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    install -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
done
mkdir -p "$root/tmp" && chmod 1777 "$root/tmp"

# 3. The archive, cached by the hash of what goes in (paths, modes, bytes) and of this script.
key="$( (cd "$root" && find . -print0 | LC_ALL=C sort -z \
          | xargs -0 stat -c '%n %a %F' && find . -type f -print0 | LC_ALL=C sort -z \
          | xargs -0 sha256sum; cat "$REPO_ROOT/deploy/build-image.sh"; echo "$REF") | sha256sum | cut -c1-32)"
archive="$CACHE/installer-image-$key.tar"
if [ -f "$archive" ]; then
  log "unchanged: $archive"
else
  log "assembling $archive"
  tarball() { # DIR OUT: a reproducible tar of DIR's contents
    (cd "$1" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort \
      | tar --create --file "$2" --no-recursion --verbatim-files-from --files-from - \
          --owner=0 --group=0 --numeric-owner --mtime=@0 --format=posix \
          --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime)
  }
  blob() { # FILE -> prints sha256 hex, moves FILE into the blob store
    local d
    d="$(sha256sum "$1" | cut -d' ' -f1)"
    mv "$1" "$work/oci/blobs/sha256/$d"
    echo "$d"
  }
  mkdir -p "$work/oci/blobs/sha256"
  tarball "$root" "$work/layer.tar"
  layer_size="$(stat -c %s "$work/layer.tar")"
  layer="$(blob "$work/layer.tar")"
  arch="$(dpkg --print-architecture 2>/dev/null || echo amd64)"
  printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/%s/bin/gvisor-hardened-installer"],"Cmd":["--help"],"Env":["PATH=/%s/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"deploy/build-image.sh"}]}' \
    "$arch" "$PREFIX" "$PREFIX" "$layer" >"$work/config.json"
  config_size="$(stat -c %s "$work/config.json")"
  config="$(blob "$work/config.json")"
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$config_size" "$layer" "$layer_size" >"$work/manifest.json"
  manifest_size="$(stat -c %s "$work/manifest.json")"
  manifest="$(blob "$work/manifest.json")"
  # `ctr images import` names the image after io.containerd.image.name.
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$manifest_size" "$arch" "$REF" "${REF##*:}" >"$work/oci/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
  mkdir -p "$CACHE"
  tarball "$work/oci" "$work/image.tar"
  mv "$work/image.tar" "$archive"
  # Keep the newest few archives only.
  ls -1t "$CACHE"/installer-image-*.tar | tail -n +4 | xargs -r rm -f
fi

flock -u 9

if [ -n "$import_to" ]; then
  ctr_bin="${CTR:-$("$REPO_ROOT/hack/deps.sh" --print --only ctr | sed -n 's/^ctr=//p')}"
  [ -x "$ctr_bin" ] || die "no ctr (hack/deps.sh --only ctr)"
  log "importing into $import_to (namespace k8s.io)"
  # --local: ctr reads the archive and writes content and image itself, as every ctr before 2.0
  # did. Through 2.x's transfer service (the default) the import twice said "saved" for the name
  # and the name was then not listed (2026-12-03, about one run in four; cause not found).
  local_flag=()
  "$ctr_bin" images import --help 2>&1 | grep -q -- '--local' && local_flag=(--local)
  "$ctr_bin" -a "$import_to" -n k8s.io images import "${local_flag[@]}" "$archive" >&2
  listed="$("$ctr_bin" -a "$import_to" -n k8s.io images ls -q)"
  # Should it happen again: say what was listed, so the occurrence can be read.
  grep -qxF "$REF" <<<"$listed" \
    || die "the import did not create $REF; listed: ${listed:-nothing}; archive $(ls -l "$archive" 2>&1)"
else
  echo "$archive"
fi
echo "$REF"
