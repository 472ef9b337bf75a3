#!/usr/bin/env bash
# Measure what one idle gVisor sandbox costs on the node: the proportional set size (PSS) of the
# runsc-sandbox (sentry) and runsc-gofer processes of a single container running `sleep`, read
# from /proc/<pid>/smaps_rollup once `runsc ps` shows the sleep process inside the sandbox.
# PSS (not RSS) is used because the runsc binary's text pages are shared between sandboxes:
# PSS charges each sandbox its share, which is what N pods on one node add up to.
#
# Usage: hack/measure-overhead.sh [RUNS]   (default 5; needs root, runsc, busybox-static)
# Output: one line per run and a summary (min / median / max of sandbox+gofer PSS in KiB).
set -euo pipefail
source "$(dirname "$0")/lib.sh" # for --help

runs=${1:-5}
runsc_bin=${RUNSC:-runsc}
busybox_bin=${BUSYBOX:-/usr/bin/busybox}

[ "$(id -u)" = 0 ] || { echo "error: must run as root (runsc needs it)" >&2; exit 1; }
command -v "$runsc_bin" >/dev/null || { echo "error: runsc not found" >&2; exit 1; }
[ -x "$busybox_bin" ] || { echo "error: static busybox not found at $busybox_bin" >&2; exit 1; }

work=$(mktemp -d /tmp/gvh-overhead.XXXXXX)
state="$work/state"
ids=()
cleanup() {
    for id in "${ids[@]:-}"; do
        [ -n "$id" ] && "$runsc_bin" --root "$state" delete --force "$id" >/dev/null 2>&1 || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# A minimal bundle: static busybox as /bin/sh and /bin/sleep, read-only root.
bundle="$work/bundle"
mkdir -p "$bundle/rootfs/bin" "$state"
cp "$busybox_bin" "$bundle/rootfs/bin/busybox"
ln -s busybox "$bundle/rootfs/bin/sleep"
ln -s busybox "$bundle/rootfs/bin/sh"
(cd "$bundle" && "$runsc_bin" spec -- /bin/sleep 3600)
# runsc spec writes a terminal=true spec; a detached sandbox has no terminal.
sed -i 's/"terminal": true/"terminal": false/' "$bundle/config.json"

descendants() {
    local kids
    kids=$(cat /proc/"$1"/task/*/children 2>/dev/null || true)
    for k in $kids; do echo "$k"; descendants "$k"; done
}
# union_kib PID...: distinct physical pages resident in any of the processes (from
# /proc/<pid>/pagemap, root only), each counted once: what the sandbox costs when it is the only
# one on the node, independent of other runsc processes that share the binary's pages.
union_kib() {
    python3 - "$@" <<'PY'
import struct, sys
pfns = set()
for pid in sys.argv[1:]:
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pm:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if line.rstrip().endswith("[vsyscall]"):
                continue
            pm.seek(lo // 4096 * 8)
            data = pm.read((hi - lo) // 4096 * 8)
            for (e,) in struct.iter_unpack("<Q", data):
                if e >> 63 and e & ((1 << 55) - 1):
                    pfns.add(e & ((1 << 55) - 1))
print(len(pfns) * 4)
PY
}
hz=$(getconf CLK_TCK)
idle_secs=${IDLE_SECS:-5}
# utime+stime (fields 14, 15 of /proc/<pid>/stat) summed over the given pids, in clock ticks.
cpu_ticks() {
    local sum=0 p
    for p in "$@"; do
        sum=$((sum + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}')))
    done
    echo "$sum"
}
# rollup FIELD PID...: sum of a smaps_rollup field (Private = Private_Clean + Private_Dirty), KiB.
rollup() {
    local field=$1 sum=0 p v; shift
    for p in "$@"; do
        if [ "$field" = Private ]; then
            v=$(awk '/^Private_(Clean|Dirty):/ {s += $2} END {print s}' "/proc/$p/smaps_rollup")
        else
            v=$(awk -v f="$field:" '$1 == f {print $2}' "/proc/$p/smaps_rollup")
        fi
        sum=$((sum + v))
    done
    echo "$sum"
}

# Poll a condition with a deadline (seconds) instead of sleeping a fixed time.
wait_for() {
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
sleep_running() { "$runsc_bin" --root "$state" ps "$1" 2>/dev/null | grep -q 'sleep'; }

results=(); pss_all=(); priv_all=(); union_all=()
for i in $(seq 1 "$runs"); do
    id="gvh-overhead-$$-$i"
    ids+=("$id")
    "$runsc_bin" --root "$state" --network=none run --detach --bundle "$bundle" "$id" \
        </dev/null >/dev/null 2>"$work/run-$i.err"
    wait_for 20 sleep_running "$id" || { echo "error: sleep never showed up in $id" >&2; cat "$work/run-$i.err" >&2; exit 1; }
    sandbox_pid=$("$runsc_bin" --root "$state" state "$id" | sed -n 's/.*"pid": \([0-9]*\).*/\1/p')
    # The gofer's command line does not name the container; runs are sequential and use their own
    # --root, so the one runsc-gofer with this --root is ours.
    gofer_pid=$(pgrep -f -- "^runsc-gofer --root=$state " | head -n1 || true)
    [ -n "$sandbox_pid" ] && [ -n "$gofer_pid" ] || { echo "error: pids not found (sandbox=$sandbox_pid gofer=$gofer_pid)" >&2; exit 1; }
    # Each of RSS, PSS and private (Private_Clean + Private_Dirty) summed over the sentry, its
    # ptrace stubs and the gofer. Private is what each further sandbox adds; RSS is what the
    # first sandbox on a node costs (shared runsc text included); PSS lies between and depends
    # on how many other runsc processes share the binary at that moment.
    procs="$sandbox_pid $gofer_pid $(descendants "$sandbox_pid")"
    rss=$(rollup Rss $procs); pss=$(rollup Pss $procs); priv=$(rollup Private $procs)
    union=$(union_kib $procs)
    t0=$(cpu_ticks $procs)
    sleep "$idle_secs"   # a measurement window, not a wait for a condition
    t1=$(cpu_ticks $procs)
    idle_m=$(( (t1 - t0) * 1000 / hz / idle_secs ))
    others=$(( $(pgrep -c -f '^runsc-(sandbox|gofer) ' || true) - 2 ))
    echo "run $i: RSS ${rss} KiB, PSS ${pss} KiB, private ${priv} KiB, union ${union} KiB (sentry+stubs+gofer); CPU start-up $((t0 * 1000 / hz)) ms, idle ${idle_m} millicores; other runsc processes on the machine: ${others}"
    tot=$rss
    pss_all+=("$pss"); priv_all+=("$priv"); union_all+=("$union")
    results+=("$tot")
    "$runsc_bin" --root "$state" delete --force "$id" >/dev/null
done

summary() {
    local name=$1; shift
    local sorted n
    sorted=$(printf '%s\n' "$@" | sort -n); n=$#
    echo "$name KiB: min $(echo "$sorted" | head -n1), median $(echo "$sorted" | sed -n "$(( (n + 1) / 2 ))p"), max $(echo "$sorted" | tail -n1)"
}
echo "runsc $("$runsc_bin" --version | head -n1 | awk '{print $3}'), ${#results[@]} runs, idle sleep container, sentry+stubs+gofer:"
summary RSS "${results[@]}"
summary PSS "${pss_all[@]}"
summary private "${priv_all[@]}"
summary union "${union_all[@]}"
