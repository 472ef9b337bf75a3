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
pss_kib() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup"; }

# Poll a condition with a deadline (seconds) instead of sleeping a fixed time.
wait_for() {
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}
sleep_running() { "$runsc_bin" --root "$state" ps "$1" 2>/dev/null | grep -q 'sleep'; }

results=()
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
    s=$(pss_kib "$sandbox_pid"); g=$(pss_kib "$gofer_pid")
    # With the ptrace platform the sentry runs the guest in stub processes (children of the
    # sandbox): their pages are part of the sandbox's cost too.
    stubs=0
    for c in $(descendants "$sandbox_pid"); do stubs=$((stubs + $(pss_kib "$c"))); done
    tot=$((s + stubs + g))
    echo "run $i: runsc-sandbox PSS ${s} KiB, stubs PSS ${stubs} KiB, runsc-gofer PSS ${g} KiB, total ${tot} KiB"
    results+=("$tot")
    "$runsc_bin" --root "$state" delete --force "$id" >/dev/null
done

sorted=$(printf '%s\n' "${results[@]}" | sort -n)
n=${#results[@]}
min=$(echo "$sorted" | head -n1); max=$(echo "$sorted" | tail -n1)
median=$(echo "$sorted" | sed -n "$(( (n + 1) / 2 ))p")
echo "runsc $("$runsc_bin" --version | head -n1 | awk '{print $3}'), $n runs: sandbox+gofer PSS min ${min} KiB, median ${median} KiB, max ${max} KiB"
echo "median in MiB: $(( (median + 1023) / 1024 ))"
