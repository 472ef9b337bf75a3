#!/usr/bin/env bash
# Builds the "current stack" (containerd 2.x, runsc, nerdctl, crictl) and the one-node
# Kubernetes cluster's binaries (hack/kube-node.sh) from Go modules at the versions pinned in
# hack/versions.env, and prints where every binary of both stacks is.
#
#   hack/deps.sh [--print] [--only NAME]...
#
# Prints one `name=/absolute/path` line per binary on stdout and nothing else there (progress and
# errors go to stderr), for callers to read with `while IFS== read -r name path`. The names:
#   containerd ctr containerd-shim-runc-v2 runsc containerd-shim-runsc-v1 nerdctl crictl critest
#                                                                    (built here)
#   containerd-1.6 ctr-1.6 containerd-shim-runc-v2-1.6 runsc-20221219 (Debian bookworm's packages)
#   kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd
#   cni-bridge cni-host-local cni-loopback                           (built here, for kube-node.sh)
#   agent-sandbox-controller                                         (built here, for kube_agents)
# Whatever is missing is built (or, for Debian's, installed) first; with nothing missing it
# builds nothing and prints the same lines. `--print` is the default and is kept as the name the
# acceptance checks use. `--only NAME` (repeatable) builds and prints just those names, so a test
# that needs runsc alone does not wait for a cold containerd build.
#
# Cache layout, outside the checkout so that fresh clones and CI runs on the same machine share it:
#   /var/cache/gvisor-hardened/<component>-<version>/bin/<binary>   the binaries
#   /var/cache/gvisor-hardened/agent-sandbox-<version>/crds/*.yaml   agent-sandbox's CRDs
#   /var/cache/gvisor-hardened/<component>-<version>/build-info     go version, wall time of the build
#   /var/cache/gvisor-hardened/<component>-<version>/modules.txt    `go version -m`: deps, tags, flags
#   /var/cache/gvisor-hardened/<component>-<version>/build.log      the go commands' output
#   /var/cache/gvisor-hardened/<component>-<version>/module/        the go.mod/go.sum it resolved
#   /var/cache/gvisor-hardened/go/{pkg/mod,cache}                   GOMODCACHE and GOCACHE
# A component directory exists only once its build is complete: each build happens in a temporary
# directory beside it and is renamed into place, so an interrupted build leaves nothing that a
# later run would take for done. GVISOR_HARDENED_CACHE overrides the root (tests, other disks).
# `rm -rf` of the root is a full reset (module cache files are made writable for that).
set -euo pipefail

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The machine's Go unless versions.env names a toolchain: `local` keeps the go command from
# fetching a newer one on its own when a module asks for it, so any such need shows up as an error.
GOTOOLCHAIN=local
# shellcheck source=hack/versions.env
source "$HACK_DIR/versions.env"
export GOTOOLCHAIN

CACHE_ROOT="${GVISOR_HARDENED_CACHE:-/var/cache/gvisor-hardened}"

# One Go environment for every build, independent of the caller's: the module and build caches
# are what make a rebuild after a version bump fast. -modcacherw lets `rm -rf` clear them.
export GOPATH="$CACHE_ROOT/go"
export GOMODCACHE="$CACHE_ROOT/go/pkg/mod"
export GOCACHE="$CACHE_ROOT/go/cache"
export GOFLAGS=-modcacherw
# The go command keeps telemetry counters (and its env file) in the user's config directory,
# /root/.config/go: a build running beside the attack table's host check changed files under
# /root that the check watches. Keep them with the caches.
export XDG_CONFIG_HOME="$CACHE_ROOT/go/config"
# Every binary is static: they run inside other mount namespaces and next to Debian's libc-linked
# binaries, and nothing below needs cgo (containerd's only cgo user is the btrfs snapshotter).
export CGO_ENABLED=0
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"

# Every name this script prints, in the order it prints them.
ALL_NAMES=(containerd ctr containerd-shim-runc-v2 runsc containerd-shim-runsc-v1 nerdctl crictl critest
           containerd-1.6 ctr-1.6 containerd-shim-runc-v2-1.6 runsc-20221219
           kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd
           cni-bridge cni-host-local cni-loopback agent-sandbox-controller)

usage() {
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit "${1:-0}"
}

# The component that provides a printed name: one build (or one Debian check) per component.
component_of() {
  case "$1" in
    containerd | ctr | containerd-shim-runc-v2) echo containerd ;;
    runsc | nerdctl | crictl) echo "$1" ;;
    containerd-shim-runsc-v1) echo runsc ;;
    critest) echo crictl ;;
    containerd-1.6 | ctr-1.6 | containerd-shim-runc-v2-1.6 | runsc-20221219) echo debian ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kubectl) echo kubernetes ;;
    etcd) echo etcd ;;
    cni-bridge | cni-host-local | cni-loopback) echo cni ;;
    agent-sandbox-controller) echo agent-sandbox ;;
    *) return 1 ;;
  esac
}

version_of() {
  case "$1" in
    containerd) echo "$CONTAINERD_VERSION" ;;
    runsc) echo "$GVISOR_VERSION" ;;
    nerdctl) echo "$NERDCTL_VERSION" ;;
    crictl) echo "$CRICTL_VERSION" ;;
    kubernetes) echo "$KUBERNETES_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    cni) echo "$CNI_PLUGINS_VERSION" ;;
    agent-sandbox) echo "$AGENT_SANDBOX_VERSION" ;;
  esac
}

binaries_of() {
  case "$1" in
    containerd) echo containerd ctr containerd-shim-runc-v2 ;;
    runsc) echo runsc containerd-shim-runsc-v1 ;;
    crictl) echo crictl critest ;;
    kubernetes) echo kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl ;;
    cni) echo bridge host-local loopback ;;
    agent-sandbox) echo agent-sandbox-controller ;;
    *) echo "$1" ;;
  esac
}

component_dir() { echo "$CACHE_ROOT/$1-$(version_of "$1")"; }

path_of() {
  local comp
  comp="$(component_of "$1")"
  case "$1" in
    runsc-20221219) echo /usr/bin/runsc ;;
    *-1.6) echo "/usr/bin/${1%-1.6}" ;;
    cni-*) echo "$(component_dir "$comp")/bin/${1#cni-}" ;;
    *) echo "$(component_dir "$comp")/bin/$1" ;;
  esac
}

# Runs a build step with its output appended to the build log. On failure it shows the log's
# tail (the go command's last lines say what went wrong) and keeps a copy of the whole log, since
# the temporary build directory it lives in is removed on exit.
BUILD_LOG=
FAILED_LOG=
step() {
  if ! "$@" >>"$BUILD_LOG" 2>&1; then
    tail -n 30 "$BUILD_LOG" >&2
    cp "$BUILD_LOG" "$FAILED_LOG"
    die "failed: $* (full log: $FAILED_LOG)"
  fi
}

# A throwaway main module that requires just one module at its pinned version, then `go build`
# of the named packages from it. This is gVisor's documented way (`go get .../runsc@go`, then
# `go build`), and the one way that works for all four: `go install pkg@version` is refused for
# nerdctl (it looks up the module's version list for deprecations, which the proxy answers 403).
# With no replace directives in these go.mod files, the build list is the module's own.
# The module's own go.sum lines come from versions.env (see there why), so the download is checked
# against the pinned hashes.
# Args: scratch dir, module@version, zip hash, go.mod hash, packages to `go get` from that module.
scratch_module() {
  local dir=$1 mod=${2%@*} version=${2#*@} sum=$3 gomod_sum=$4 pkgs=() pkg
  shift 4
  if [ -z "$sum" ] || [ -z "$gomod_sum" ]; then
    die "hack/versions.env lacks the hashes of $mod $version"
  fi
  for pkg in "$@"; do pkgs+=("$pkg@$version"); done
  mkdir -p "$dir"
  step "$GO" -C "$dir" mod init gvisor-hardened.local/deps
  printf '%s %s %s\n%s %s/go.mod %s\n' "$mod" "$version" "$sum" "$mod" "$version" "$gomod_sum" \
    >"$dir/go.sum"
  step "$GO" -C "$dir" get "${pkgs[@]}"
}

# go build -o OUT PKG in the scratch module, static, without paths or VCS stamps of this machine.
# Args: scratch dir, output, package, tags, extra -ldflags.
go_build() {
  local dir=$1 out=$2 pkg=$3 tags=$4 ldflags=$5
  step "$GO" -C "$dir" build -trimpath -buildvcs=false -tags "$tags" \
    -ldflags "-s -w $ldflags" -o "$out" "$pkg"
}

# Each build_* puts its binaries into $1/bin and its resolved go.mod/go.sum into $1/module.

build_containerd() {
  local out=$1 m=github.com/containerd/containerd/v2 v=$CONTAINERD_VERSION
  scratch_module "$out/module" "$m@$v" "$CONTAINERD_SUM" "$CONTAINERD_GOMOD_SUM" \
    "$m/cmd/containerd" "$m/cmd/ctr" "$m/cmd/containerd-shim-runc-v2"
  # Tags as containerd's Makefile sets them: urfave_cli_no_docs drops the man-page generator;
  # no_btrfs says outright what CGO_ENABLED=0 implies (no btrfs headers here, no btrfs disks);
  # the shim also gets no_grpc (it speaks ttrpc only). The version is what the Makefile stamps.
  local x="-X $m/version.Version=$v"
  go_build "$out/module" "$out/bin/containerd" "$m/cmd/containerd" "urfave_cli_no_docs no_btrfs" "$x"
  go_build "$out/module" "$out/bin/ctr" "$m/cmd/ctr" "urfave_cli_no_docs no_btrfs" "$x"
  go_build "$out/module" "$out/bin/containerd-shim-runc-v2" "$m/cmd/containerd-shim-runc-v2" \
    "urfave_cli_no_docs no_btrfs no_grpc" "$x"
}

build_runsc() {
  local out=$1 m=gvisor.dev/gvisor v=$GVISOR_VERSION
  scratch_module "$out/module" "$m@$v" "$GVISOR_SUM" "$GVISOR_GOMOD_SUM" "$m/runsc" "$m/shim"
  # A go-branch build has no release name; stamp the pinned pseudo-version so that
  # `runsc --version` says exactly which commit runs.
  go_build "$out/module" "$out/bin/runsc" "$m/runsc" "" "-X $m/runsc/version.version=$v"
  # gVisor's own containerd shim, from the same commit: the CRI validation suite's baseline
  # for what plain runsc passes (hack/critest.sh). It lowers its own OOM score to -999, which
  # needs CAP_SYS_RESOURCE, which root on these machines lacks: it then fails every start
  # ("failed to set OOM Score on shim: ... permission denied"). So it is built from a vendored
  # copy with that one constant at 0, which leaves the score as containerd's own shims leave it.
  # (`go mod vendor` copies what the scratch module's own packages import: a main package of
  # its own that runs the shim's CLI, as the module's shim/main.go does.)
  mkdir -p "$out/module/shim"
  printf 'package main\n\nimport "%s/shim/v1/cli"\n\nfunc main() { cli.Main() }\n' "$m" \
    >"$out/module/shim/main.go"
  step "$GO" -C "$out/module" mod vendor
  local manager="$out/module/vendor/$m/pkg/shim/v1/manager.go"
  grep -q 'oomScoreMax = -999' "$manager" || die "$m $v: the shim's oomScoreMax is not where it was"
  sed -i 's/oomScoreMax = -999/oomScoreMax = 0/' "$manager"
  step "$GO" -C "$out/module" build -mod=vendor -trimpath -buildvcs=false -ldflags "-s -w" \
    -o "$out/bin/containerd-shim-runsc-v1" ./shim
  rm -rf "$out/module/vendor" "$out/module/shim"
}

build_nerdctl() {
  local out=$1 m=github.com/containerd/nerdctl/v2 v=$NERDCTL_VERSION
  scratch_module "$out/module" "$m@$v" "$NERDCTL_SUM" "$NERDCTL_GOMOD_SUM" "$m/cmd/nerdctl"
  go_build "$out/module" "$out/bin/nerdctl" "$m/cmd/nerdctl" "" "-X $m/pkg/version.Version=$v"
}

build_crictl() {
  local out=$1 m=sigs.k8s.io/cri-tools v=$CRICTL_VERSION
  scratch_module "$out/module" "$m@$v" "$CRICTL_SUM" "$CRICTL_GOMOD_SUM" "$m/cmd/crictl"
  # cri-tools' Makefile stamps the version without its leading v.
  go_build "$out/module" "$out/bin/crictl" "$m/cmd/crictl" "" "-X $m/pkg/version.Version=${v#v}"
  # critest, the CRI validation suite, is the module's test binary of cmd/critest (as its
  # Makefile builds it): its test dependencies join the build list first.
  step "$GO" -C "$out/module" get -t "$m/cmd/critest@$v"
  step "$GO" -C "$out/module" test -c -trimpath -buildvcs=false \
    -ldflags "-s -w -X $m/pkg/version.Version=${v#v}" -o "$out/bin/critest" "$m/cmd/critest"
}

# The five Kubernetes binaries in one `go build`: they share most of their packages, which one
# invocation compiles once (five builds would each link, and schedule, the same work again).
# k8s.io/kubernetes's go.mod replaces its staging modules (k8s.io/api, client-go, kubelet, ...)
# with directories of its own repository, which a module zip cannot follow; the scratch module
# replaces each of them, as that go.mod lists them, with its published release at
# KUBERNETES_STAGING_VERSION before `go get`.
build_kubernetes() {
  local out=$1 m=k8s.io/kubernetes v=$KUBERNETES_VERSION dir=$1/module staging gomod
  if [ -z "$KUBERNETES_SUM" ] || [ -z "$KUBERNETES_GOMOD_SUM" ]; then
    die "hack/versions.env lacks the hashes of $m $v"
  fi
  mkdir -p "$dir"
  step "$GO" -C "$dir" mod init gvisor-hardened.local/deps
  printf '%s %s %s\n%s %s/go.mod %s\n' "$m" "$v" "$KUBERNETES_SUM" "$m" "$v" "$KUBERNETES_GOMOD_SUM" \
    >"$dir/go.sum"
  gomod="$("$GO" -C "$dir" mod download -json "$m@$v" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')"
  [ -f "$gomod" ] || die "no go.mod of $m $v in the module cache"
  staging="$(sed -n 's#^\t\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod")"
  [ -n "$staging" ] || die "$m $v: no staging replacements in its go.mod"
  local s args=()
  for s in $staging; do args+=("-replace=$s=$s@$KUBERNETES_STAGING_VERSION"); done
  step "$GO" -C "$dir" mod edit "${args[@]}"
  local cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl) pkgs=() c
  for c in "${cmds[@]}"; do pkgs+=("$m/cmd/$c"); done
  step "$GO" -C "$dir" get "${pkgs[@]/%/@$v}"
  # What Kubernetes' own build stamps (hack/lib/version.sh): kubectl version and the API
  # server's /version then name the release.
  local minor=${v#v1.}
  minor=${minor%%.*}
  local x=k8s.io/component-base/version
  step "$GO" -C "$dir" build -trimpath -buildvcs=false \
    -ldflags "-s -w -X $x.gitVersion=$v -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean" \
    -o "$out/bin/" "${pkgs[@]}"
}

build_etcd() {
  local out=$1 m=go.etcd.io/etcd/server/v3 v=$ETCD_VERSION
  scratch_module "$out/module" "$m@$v" "$ETCD_SUM" "$ETCD_GOMOD_SUM" "$m"
  go_build "$out/module" "$out/bin/etcd" "$m" "" ""
}

build_cni() {
  local out=$1 m=github.com/containernetworking/plugins v=$CNI_PLUGINS_VERSION
  local pkgs=("$m/plugins/main/bridge" "$m/plugins/ipam/host-local" "$m/plugins/main/loopback")
  scratch_module "$out/module" "$m@$v" "$CNI_PLUGINS_SUM" "$CNI_PLUGINS_GOMOD_SUM" "${pkgs[@]}"
  step "$GO" -C "$out/module" build -trimpath -buildvcs=false -ldflags "-s -w" -o "$out/bin/" "${pkgs[@]}"
}

build_agent-sandbox() {
  local out=$1 m=sigs.k8s.io/agent-sandbox v=$AGENT_SANDBOX_VERSION
  scratch_module "$out/module" "$m@$v" "$AGENT_SANDBOX_SUM" "$AGENT_SANDBOX_GOMOD_SUM" \
    "$m/cmd/agent-sandbox-controller"
  # What its Makefile stamps: `agent-sandbox-controller --version` then names the release.
  go_build "$out/module" "$out/bin/agent-sandbox-controller" "$m/cmd/agent-sandbox-controller" "" \
    "-X $m/internal/version.gitVersion=$v"
  # Its CRDs, next to it (bin/../crds/): the controller is useless without them, and the module
  # cache they come from may be cleared.
  local src
  src="$("$GO" -C "$out/module" list -m -f '{{.Dir}}' "$m")"
  mkdir -p "$out/crds"
  cp "$src"/k8s/crds/*.yaml "$out/crds/"
  chmod 644 "$out/crds/"*.yaml
}

# A component directory counts as done only with every binary in it executable (and, for
# agent-sandbox, its CRDs there).
is_complete() {
  local dir=$1 b
  [ -d "$dir" ] || return 1
  for b in $(binaries_of "$2"); do [ -x "$dir/bin/$b" ] || return 1; done
  [ "$2" != agent-sandbox ] || [ -s "$dir/crds/agents.x-k8s.io_sandboxes.yaml" ]
}

TMP_DIR=
cleanup() { if [ -n "$TMP_DIR" ]; then rm -rf "$TMP_DIR"; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ensure_built() {
  local comp=$1 dir version start secs
  dir="$(component_dir "$comp")"
  version="$(version_of "$comp")"
  is_complete "$dir" "$comp" && return 0
  if [ -e "$dir" ]; then
    # Not our rename's doing (that only ever moves complete builds): someone removed a binary.
    log "$comp $version: cache entry incomplete, rebuilding"
    mv "$dir" "$CACHE_ROOT/.tmp/stale-$comp-$version-$$"
    rm -rf "$CACHE_ROOT/.tmp/stale-$comp-$version-$$"
  fi
  [ -x "$GO" ] || die "no Go toolchain to build $comp with (looked for go in PATH and /usr/local/go/bin/go)"
  TMP_DIR="$(mktemp -d "$CACHE_ROOT/.tmp/$comp-$version.XXXXXX")"
  mkdir -p "$TMP_DIR/bin"
  BUILD_LOG="$TMP_DIR/build.log"
  FAILED_LOG="$CACHE_ROOT/$comp-$version.failed.log"
  log "building $comp $version (a cold build takes minutes)"
  start=$(date +%s)
  "build_$comp" "$TMP_DIR"
  secs=$(($(date +%s) - start))
  {
    echo "component=$comp"
    echo "version=$version"
    echo "go=$("$GO" env GOVERSION)"
    echo "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "wall_seconds=$secs"
  } >"$TMP_DIR/build-info"
  # What went into each binary (module versions, tags, ldflags), as the go command recorded it.
  (cd "$TMP_DIR/bin" && "$GO" version -m ./*) >"$TMP_DIR/modules.txt"
  rm -f "$FAILED_LOG"
  chmod 755 "$TMP_DIR" # mktemp's 0700 would hide the binaries from other users
  mv -T "$TMP_DIR" "$dir"
  TMP_DIR=
  log "built $comp $version in ${secs}s"
}

# Debian's compatibility stack: installed from the distribution if missing, and checked to be the
# upstream versions its printed names promise.
ensure_debian() {
  local pkg want have
  install_missing containerd runsc >&2
  for pkg in containerd runsc; do
    if [ "$pkg" = containerd ]; then want=$DEBIAN_CONTAINERD_VERSION; else want=$DEBIAN_RUNSC_VERSION; fi
    have="$(dpkg-query -W -f='${Version}' "$pkg")"
    case "$have" in
      *"$want"*) ;;
      *) die "Debian's $pkg is $have, but deps.sh prints it as version $want (hack/versions.env)" ;;
    esac
  done
}

main() {
  local wanted=() arg name comp
  while [ $# -gt 0 ]; do
    arg=$1
    shift
    case "$arg" in
      --print) ;;
      --only)
        [ $# -gt 0 ] || usage 2
        component_of "$1" >/dev/null || die "--only: unknown name '$1' (one of: ${ALL_NAMES[*]})"
        wanted+=("$1")
        shift
        ;;
      *) usage 2 ;;
    esac
  done
  [ ${#wanted[@]} -gt 0 ] || wanted=("${ALL_NAMES[@]}")

  mkdir -p "$CACHE_ROOT/.tmp"
  # One deps.sh at a time per cache: parallel test scripts would otherwise build the same
  # component twice. Holding the lock also makes leftovers of interrupted runs safe to delete.
  exec 9>"$CACHE_ROOT/.lock"
  if ! flock -n 9; then
    log "waiting for another hack/deps.sh to finish"
    flock 9
  fi
  rm -rf "${CACHE_ROOT:?}/.tmp/"*

  # Each component once, in printing order.
  local done_comps=" "
  for name in "${ALL_NAMES[@]}"; do
    [[ " ${wanted[*]} " == *" $name "* ]] || continue
    comp="$(component_of "$name")"
    [[ "$done_comps" == *" $comp "* ]] && continue
    done_comps+="$comp "
    if [ "$comp" = debian ]; then ensure_debian; else ensure_built "$comp"; fi
  done

  for name in "${ALL_NAMES[@]}"; do
    [[ " ${wanted[*]} " == *" $name "* ]] || continue
    printf '%s=%s\n' "$name" "$(path_of "$name")"
  done
}

main "$@"
