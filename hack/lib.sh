# Shared helpers for the hack/ scripts. Source it; do not run it.
# Everything here is idempotent: a second run installs nothing and changes nothing.

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"

# Every hack/ script answers -h or --help with its usage (its header comment) and does nothing
# else. Scripts source this file before they act, and a sourced file sees the script's
# arguments as its own, so the check sits here once.
print_usage_if_asked() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      --) return ;;
      -h | --help)
        awk 'NR == 1 && /^#!/ { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"
        exit 0
        ;;
    esac
  done
}
print_usage_if_asked "$@"

# Debian packages the build, the tests, the demo and the benches need.
APT_PACKAGES=(
  containerd runc runsc busybox-static protobuf-compiler
  containernetworking-plugins iproute2 jq hyperfine python3-pip gcc g++ libc6-dev
  ca-certificates curl openssl git iptables python3-venv
)

# The workspace's features as hack/test.sh builds and tests it: policy-injector's operator CLI,
# and the sandbox core's root-only unit tests (through the shim's `host-tests`). The integration
# binary's `root` feature is added where it is built.
PRODUCT_FEATURES=(--features policy-injector/cli --features containerd-shim-gvisor-hardened/host-tests)

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

require_root() {
  [ "$(id -u)" = 0 ] || die "run me as root (the sandbox runtime needs it): sudo $0"
}

# CI builds in a fresh clone once: incremental compilation only writes a second copy of every
# crate's state that nothing will read again.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# The suite needs room: measured on 2026-12-07, a cold run's build output in the clone is
# about 4.5 GiB, the stack's cache (built once per machine) 9.5 GiB, and the tests' images,
# engines' storage and containerd roots come and go in /tmp. Checked before anything starts,
# so a full disk is one clear line instead of a linker's bus error half an hour in.
GVH_MIN_FREE_GIB="${GVH_MIN_FREE_GIB:-10}"

ensure_disk() {
  local dir avail_kib
  for dir in "$REPO_ROOT" /tmp /var; do
    avail_kib="$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')"
    if [ "$avail_kib" -lt $((GVH_MIN_FREE_GIB * 1024 * 1024)) ]; then
      die "only $((avail_kib / 1024)) MiB free under $dir; the test suite needs ${GVH_MIN_FREE_GIB} GiB (set GVH_MIN_FREE_GIB to change)"
    fi
  done
}

# Installs those of the named Debian packages that are missing (`apt-get update` only when
# something is).
install_missing() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# Prometheus (and promtool) for the metrics exporter's test (policy-injector/tests/
# metrics_prometheus.rs), which runs the binary itself with its own config, data directory and
# loopback port. The system service is never started: policy-rc.d denies it while installing,
# and update-rc.d disables its start at boot (its SysV links and its systemd unit).
NO_START_PACKAGES=(prometheus)

ensure_packages() {
  install_missing "${APT_PACKAGES[@]}"
  # Debian's containerd package starts the system daemon; our tests and demo use private
  # instances and never touch it, so leave it as the package left it.
  install_missing_no_start "${NO_START_PACKAGES[@]}"
  update-rc.d prometheus disable >/dev/null 2>&1 || true
}

# Docker and Podman for runsc-hardened's end-to-end tests, the agent sandbox and the benches.
# The tests start private instances (tests/src/docker.rs, podman.rs) and never use a system
# daemon; Debian's packages start none where there is no systemd. Recommends are left out:
# the tests run loopback-only containers and need no bridge, netavark or slirp4netns.
ENGINE_PACKAGES=(docker.io podman)

ensure_engines() {
  install_missing "${ENGINE_PACKAGES[@]}"
}

# The egress bench's baseline, the tinyproxy + socat recipe (tests/examples/bench/egress_recipe.rs).
# Bench only: no test needs them. The bench starts its own tinyproxy on a free loopback port;
# policy-rc.d keeps the package from starting the system daemon where an init would.
BENCH_PACKAGES=(tinyproxy socat)

ensure_bench_packages() {
  install_missing_no_start "${BENCH_PACKAGES[@]}"
}

# install_missing, with the packages' services kept from starting where an init would start
# them (a policy-rc.d that denies, removed again if it was ours).
install_missing_no_start() {
  local rcd=/usr/sbin/policy-rc.d own_rcd=0
  if [ ! -e "$rcd" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$rcd" && chmod 755 "$rcd" && own_rcd=1
  fi
  install_missing "$@"
  if [ "$own_rcd" = 1 ]; then rm -f "$rcd"; fi
}

# A Rust toolchain: the machine's if present, else rustup (needs network to static.rust-lang.org).
ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    log "installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c clippy,rustfmt
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
}

# Go, for hack/deps.sh's builds of the current stack: the machine's (these machines carry Go
# 1.26 at /usr/local/go), at least the version hack/versions.env's modules need. Debian's
# golang-go (1.19) is too old for them and is not a fallback.
ensure_go() {
  if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
    export PATH="/usr/local/go/bin:$PATH"
  fi
  command -v go >/dev/null 2>&1 \
    || die "Go 1.26 or newer is needed to build the current stack (hack/deps.sh); install it at /usr/local/go"
  local v
  v="$(go env GOVERSION)"
  case "$v" in
    go1.2[6-9]* | go1.[3-9][0-9]* | go[2-9]*) ;;
    *) die "Go $v is too old for hack/deps.sh's modules (need 1.26 or newer)" ;;
  esac
}

# The current stack (containerd 2.x, runsc, nerdctl, crictl), built into its cache outside the
# checkout when missing, and the `name=/path` lines of both stacks in the file named by
# GVH_DEPS (exported: the test harness and the demo read it instead of running deps.sh in every
# test process).
# With NAMEs, only those are built and printed (the demo needs no Kubernetes, whose cold build
# alone takes a quarter of an hour); without, everything.
ensure_stack() {
  ensure_go
  export GVH_DEPS="${GVH_DEPS:-/tmp/gvh-deps.$$}"
  log "the current stack (hack/deps.sh; a cold build takes minutes, a warm one a second)"
  local only=() name
  for name in "$@"; do
    only+=(--only "$name")
  done
  "$HACK_DIR/deps.sh" --print "${only[@]}" >"$GVH_DEPS"
}

# The container stacks, both of them, without Kubernetes: what the harness links for ctr runs.
# shellcheck disable=SC2034  # used by the scripts that source this file
CONTAINER_STACK_NAMES=(containerd ctr containerd-shim-runc-v2 runsc
                       containerd-1.6 ctr-1.6 containerd-shim-runc-v2-1.6 runsc-20221219)

# Python packages for the manifest checks and the audit-record schema test (jsonschema), and the
# third-party verifier of run attestations (policy-injector/tests/attest/verify_in_toto.py):
# securesystemslib's DSSE envelope and ed25519 key (its crypto extra brings `cryptography`) and
# in-toto-attestation's Statement v1. Those two are pinned: the test is that a given standard
# implementation accepts our envelopes, so a new release must be taken on purpose.
PYTHON_ATTESTATION_PACKAGES=("securesystemslib[crypto]==1.6.0" "in-toto-attestation==0.9.3")
# The schemas `audit export` is checked against (policy-injector/tests/export/): OCSF's published
# schema as shipped by ocsf-json-schema (schema.ocsf.io's exports of OCSF 1.0-1.8, Apache-2.0)
# and OTLP's generated protobuf classes; pinned, so a new schema release is taken on purpose.
PYTHON_EXPORT_PACKAGES=("ocsf-json-schema==1.2.0" "opentelemetry-proto==1.45.2")

ensure_python_tools() {
  if ! python3 -c 'import kubernetes_validate, jsonschema' 2>/dev/null; then
    log "installing kubernetes-validate and jsonschema (PyPI)"
    python3 -m pip install -q --disable-pip-version-check kubernetes-validate jsonschema 2>/dev/null \
      || python3 -m pip install -q --disable-pip-version-check --break-system-packages kubernetes-validate jsonschema
  fi
  if ! python3 -c 'import importlib.metadata as m, sys
sys.exit(m.version("securesystemslib") != "1.6.0" or m.version("in-toto-attestation") != "0.9.3")' 2>/dev/null; then
    log "installing ${PYTHON_ATTESTATION_PACKAGES[*]} (PyPI)"
    python3 -m pip install -q --disable-pip-version-check "${PYTHON_ATTESTATION_PACKAGES[@]}" 2>/dev/null \
      || python3 -m pip install -q --disable-pip-version-check --break-system-packages "${PYTHON_ATTESTATION_PACKAGES[@]}"
  fi
  if ! python3 -c 'import importlib.metadata as m, sys
sys.exit(m.version("ocsf-json-schema") != "1.2.0" or m.version("opentelemetry-proto") != "1.45.2")' 2>/dev/null; then
    log "installing ${PYTHON_EXPORT_PACKAGES[*]} (PyPI)"
    python3 -m pip install -q --disable-pip-version-check "${PYTHON_EXPORT_PACKAGES[@]}" 2>/dev/null \
      || python3 -m pip install -q --disable-pip-version-check --break-system-packages "${PYTHON_EXPORT_PACKAGES[@]}"
  fi
}

# The git hook tools the workspace tests set up as a project's owner would (husky, lefthook,
# simple-git-hooks from npm, pre-commit from PyPI; hack/hook-tools.sh pins and caches them).
ensure_hook_tools() {
  "$HACK_DIR/hook-tools.sh" --print >/dev/null
}

# The egress forwarder as a static binary at $1 (see hack/build-forwarder.sh). Two rustc
# calls: the framing library, then the binary against it.
build_forwarder() {
  local out=$1 src="$REPO_ROOT/shim/forwarder/src" tmp
  tmp="$(mktemp -d)"
  mkdir -p "$(dirname "$out")"
  local flags=(--edition 2021 -C opt-level=3 -C panic=abort -C strip=symbols
               -C target-feature=+crt-static -C codegen-units=1)
  "${RUSTC:-rustc}" "${flags[@]}" --crate-type rlib --crate-name gvisor_hardened_forwarder \
    -o "$tmp/libgvisor_hardened_forwarder.rlib" "$src/lib.rs"
  "${RUSTC:-rustc}" "${flags[@]}" --crate-type bin --crate-name gvisor_hardened_forwarder_bin \
    --extern gvisor_hardened_forwarder="$tmp/libgvisor_hardened_forwarder.rlib" \
    -o "$out.tmp" "$src/main.rs"
  # Replace by rename: overwriting a running copy in place crashes it (measured under runsc).
  mv -f "$out.tmp" "$out"
  rm -rf "$tmp"
}

# The integration tests (tests/tests/integration/: one test binary, `integration`, behind
# gvisor-hardened-tests's `root` feature), one module per process. Each module was a test binary
# of its own and some still rely on having the process to themselves: environment read once,
# OnceLocks, a temp dir, port or bridge per process, the host snapshot attacks and nerdctl take
# at the start, the Kubernetes node of kube_node and kube_agents. So the binary runs once per
# module with exactly that module's tests named (`--exact`, from `--list`): a name filter alone
# would also pick `egress_shim_x::` with `egress_shim`, or a test of another module that
# mentions the word.
#
#   run_integration_modules [CARGO_ARG...] [-- SELECTOR...]
#
# CARGO_ARGs go to every `cargo test` (features of other packages, --release). A SELECTOR is
# MODULE (all its tests) or MODULE::WORDS (those of its tests whose name after `MODULE::`
# contains WORDS); one process per selector; without any, every module. libtest's switches come
# from its environment variables: RUST_TEST_NOCAPTURE=1, RUST_TEST_THREADS=N. Every selector
# runs even after one failed. Prints a line per selector and the totals; returns non-zero if a
# module failed, did not finish with libtest's summary, or a selector matched no test.
run_integration_modules() {
  local cargo_args=() selectors=()
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then
      shift
      selectors=("$@")
      break
    fi
    cargo_args+=("$1")
    shift
  done
  local cmd=(cargo test -p gvisor-hardened-tests --features gvisor-hardened-tests/root
             "${cargo_args[@]}" --test integration --)
  local listing all=()
  listing="$(cd "$REPO_ROOT" && "${cmd[@]}" --list --format terse)" || {
    log "could not build or list the integration tests"
    return 1
  }
  mapfile -t all < <(printf '%s\n' "$listing" | sed -n 's/: test$//p')
  if [ ${#selectors[@]} = 0 ]; then
    mapfile -t selectors < <(printf '%s\n' "${all[@]}" | awk -F'::' '!seen[$1]++ { print $1 }')
  fi
  local dir sel module words t names st status passed failed ignored
  local total_passed=0 total_failed=0 total_ignored=0 summary=() bad=()
  dir="$(mktemp -d /tmp/gvh-integration.XXXXXX)"
  for sel in "${selectors[@]}"; do
    module="${sel%%::*}" words=""
    [[ "$sel" == *::* ]] && words="${sel#*::}"
    names=()
    for t in "${all[@]}"; do
      [[ "$t" == "$module::"* ]] || continue
      [[ -z "$words" || "${t#"$module::"}" == *"$words"* ]] && names+=("$t")
    done
    if [ ${#names[@]} = 0 ]; then
      summary+=("$(printf '%-32s no test matches' "$sel")")
      bad+=("$sel")
      continue
    fi
    log "integration: $sel (${#names[@]} tests, a process of its own)"
    st="$dir/status"
    # The status through a file: the pipeline's own is tee's, and `set -e` must not end the
    # loop at the first failing module.
    { (cd "$REPO_ROOT" && "${cmd[@]}" --exact "${names[@]}") 2>&1 && echo 0 >"$st" || echo $? >"$st"; } \
      | tee "$dir/out"
    status="$(cat "$st")"
    read -r passed failed ignored < <(awk '
      /^test result: / {
        for (i = 1; i <= NF; i++) {
          if ($(i + 1) ~ /^passed/) p += $i
          if ($(i + 1) ~ /^failed/) f += $i
          if ($(i + 1) ~ /^ignored/) g += $i
        }
        seen = 1
      }
      END { if (seen) print p + 0, f + 0, g + 0; else print "-", "-", "-" }
    ' "$dir/out")
    if [ "$passed" = - ]; then
      summary+=("$(printf '%-32s no summary (exit status %s)' "$sel" "$status")")
      bad+=("$sel")
      continue
    fi
    total_passed=$((total_passed + passed)) total_failed=$((total_failed + failed))
    total_ignored=$((total_ignored + ignored))
    summary+=("$(printf '%-32s %3d passed, %d failed, %d ignored' "$sel" "$passed" "$failed" "$ignored")")
    if [ "$status" != 0 ] || [ "$failed" != 0 ]; then
      bad+=("$sel")
    fi
  done
  rm -rf "$dir"
  log "integration modules"
  printf '%s\n' "${summary[@]}" >&2
  printf 'integration: %d passed, %d failed, %d ignored in %d processes\n' \
    "$total_passed" "$total_failed" "$total_ignored" "${#selectors[@]}" >&2
  if [ ${#bad[@]} -gt 0 ]; then
    printf 'integration: failed: %s\n' "${bad[*]}" >&2
    return 1
  fi
}
