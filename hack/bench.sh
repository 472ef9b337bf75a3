#!/usr/bin/env bash
# Benchmarks: our shim against containerd's Go shim driving runsc (the runsc-baseline wrapper)
# and against plain runc, on one private containerd (never the system one).
#
#   hack/bench.sh [--publish] [--no-criterion] [--no-wait] [DRIVER OPTIONS...]
#   GVH_STACK=compat hack/bench.sh ...   # Debian's containerd 1.6 + runsc 20221219 (default:
#                                        # the current stack, containerd 2.x + a current runsc)
#
# The stack is picked by GVH_STACK (tests/src/stack.rs); the baseline wrapper gives the stack's
# runsc the platform and flags our shim passes (tests/baseline/runsc-baseline). Before
# measuring it waits for the 1-minute load average to drop below 1.5 (hack/bench/quiet.sh;
# --no-wait skips that).
#
# Measures start-to-exit latency of `ctr run --rm IMAGE ID true` (runtimes interleaved), the
# tool-call latency of `ctr task exec ID true` into a running sandbox, a syscall-heavy workload
# (create and `find` a few thousand files) per platform, shim
# and per-sandbox memory and start latency at 1/10/30 concurrent sandboxes, churn at
# concurrency 1 and 4, `docker run` and `podman run` through runsc-hardened against plain
# runsc on the same engine (interleaved) with the guard's memory, a container writing 1 GiB to
# stdout with and without the output bound (interleaved), egress through our forwarder and proxy
# against the tinyproxy + socat recipe (interleaved, same runsc and upstream), the policy
# criterion benches, and the output interposer's criterion bench (1 GiB through pipes with and
# without it).
# Prints the tables and writes target/bench/{results.json,summary.md,latency.svg,egress.*} and
# target/bench-output-limit.md. --publish copies them to hack/bench/ (what the README shows) as
# results-<stack>.json, summary-<stack>.md, latency-<stack>.svg; a run with --only egress
# publishes egress.md and egress.json only.
# DRIVER OPTIONS go to tests/examples/bench (e.g. --runs 40, --levels 1,10,
# --only latency); see the top of tests/examples/bench/main.rs.
#
# The driver times each `ctr run` itself rather than through hyperfine: the runs must be
# interleaved across runtimes and each needs a fresh container id.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$HACK_DIR/bench/quiet.sh"

publish=0
criterion=1
wait=1
driver_args=()
for a in "$@"; do
  case "$a" in
    --publish) publish=1 ;;
    --no-criterion) criterion=0 ;;
    --no-wait) wait=0 ;;
    *) driver_args+=("$a") ;;
  esac
done

# Throughput of each output_limit case from criterion's median, and its ratio to `direct`
# (the fifo handed to runsc, no copy), as a Markdown table.
output_limit_summary() {
  local dir=$1 direct_ns ns case
  direct_ns=$(jq .median.point_estimate "$dir/direct/new/estimates.json")
  echo "| output, 1 GiB through pipes | median | MiB/s | vs direct |"
  echo "|---|---|---|---|"
  for case in direct interposed_unbounded interposed_within_bound interposed_past_bound; do
    ns=$(jq .median.point_estimate "$dir/$case/new/estimates.json")
    awk -v c="$case" -v ns="$ns" -v d="$direct_ns" 'BEGIN {
      printf "| %s | %.2f s | %.0f | %.2f |\n", c, ns / 1e9, 1024 / (ns / 1e9), d / ns }'
  done
}

require_root
ensure_packages
ensure_engines
ensure_bench_packages
ensure_rust
stack="${GVH_STACK:-current}"
if [ "$stack" = current ]; then
  ensure_stack
fi
cd "$REPO_ROOT"
target=$(cargo metadata --format-version 1 --no-deps | jq -r .target_directory)

log "building the shim, runsc-hardened and the bench driver (release)"
cargo build --release -q -p containerd-shim-gvisor-hardened -p runsc-hardened
# The engines' test directories sign their audit logs with a key from `policy-injector audit keygen`.
cargo build --release -q -p policy-injector --features cli --bin policy-injector
cargo build --release -q -p gvisor-hardened-tests --example bench

if [ "$criterion" = 1 ]; then
  log "criterion: policy loading and harden() (policy-injector/benches/harden.rs)"
  cargo bench -q -p policy-injector --bench harden -- --noplot
  driver_args+=(--criterion "$target/criterion")
  log "criterion: the output interposer, 1 GiB through pipes (shim/core/benches/output_limit.rs)"
  cargo bench -q -p gvisor-hardened-core --bench output_limit -- --noplot
  output_limit_summary "$target/criterion/output_1GiB" > "$target/bench-output-limit.md"
  cat "$target/bench-output-limit.md"
fi

if [ "$wait" = 1 ]; then
  wait_for_quiet
fi
log "stack: $stack; machine load before: $(uptime)"
"$target/release/examples/bench" \
  --shim "$target/release/containerd-shim-gvisor-hardened-v1" \
  --out "$target/bench" "${driver_args[@]}"
log "machine load after: $(uptime)"

if [ "$publish" = 1 ]; then
  mkdir -p "$HACK_DIR/bench"
  if [ -f "$target/bench/egress.md" ]; then
    cp "$target/bench/egress.md" "$target/bench/egress.json" "$HACK_DIR/bench/"
  fi
  if [[ " ${driver_args[*]} " == *" --only egress "* ]]; then
    log "published egress.md and egress.json to hack/bench/ (the other sections were not run)"
    exit 0
  fi
  cp "$target/bench/results.json" "$HACK_DIR/bench/results-$stack.json"
  cp "$target/bench/summary.md" "$HACK_DIR/bench/summary-$stack.md"
  if [ -f "$target/bench/latency.svg" ]; then
    cp "$target/bench/latency.svg" "$HACK_DIR/bench/latency-$stack.svg"
  fi
  if [ -f "$target/bench-output-limit.md" ]; then
    cp "$target/bench-output-limit.md" "$HACK_DIR/bench/output-limit.md"
  fi
  log "published to hack/bench/ (update docs/performance.md from summary.md)"
fi
