#!/usr/bin/env bash
# The red-team table: runs the attack catalogue (tests/tests/integration/attacks.rs: hostile
# workloads in hardened sandboxes through a private containerd, the shim and runsc, and a
# representative subset through a private Docker daemon and runsc-hardened) and prints one row
# per attack (category, attack, expected, observed, result) and per category's whole-host check,
# then "N passed, N failed". Exits non-zero if anything failed. Run as root.
#
#   hack/redteam.sh                     build the shim, run the catalogue, print the table
#   hack/redteam.sh --results FILE      print the table of a run that already wrote FILE:
#                                       GVH_REDTEAM_OUT=FILE run_integration_modules (lib.sh)
#                                       runs the catalogue as part of a larger run, without
#                                       running it twice
#   GVH_ATTACKS=fork,dns hack/redteam.sh    only the attacks whose names contain a word
set -euo pipefail
source "$(dirname "$0")/lib.sh"

results=""
if [ "${1:-}" = "--results" ]; then
  results="${2:?--results needs a file}"
  [ -f "$results" ] || die "no results file $results"
  run_status=0
else
  require_root
  ensure_rust
  cd "$REPO_ROOT"
  log "build the shim and runsc-hardened"
  cargo build -q -p containerd-shim-gvisor-hardened -p runsc-hardened
  results="$(mktemp /tmp/gvh-redteam.XXXXXX)"
  runlog="$(mktemp /tmp/gvh-redteam-log.XXXXXX)"
  trap 'rm -f "$results" "$runlog"' EXIT
  log "run the attack catalogue (the integration binary's module attacks, a process of its own)"
  run_status=0
  GVH_REDTEAM_OUT="$results" run_integration_modules -- attacks >"$runlog" 2>&1 || run_status=$?
fi

# Rows in catalogue order (categories ran in parallel and appended as they finished).
awk -F'\t' -v status="$run_status" '
  BEGIN {
    order["filesystem"] = 1; order["privileges"] = 2; order["resources"] = 3
    order["network"] = 4; order["secrets"] = 5; order["spec-smuggling"] = 6
    order["docker-engine"] = 7; order["egress"] = 8; order["runsc-flags"] = 9
  }
  $1 == "GVH-REDTEAM" {
    # A "|" inside a cell would end it in Markdown.
    for (f = 2; f <= NF; f++) gsub(/\|/, "\\|", $f)
    n++
    key[n] = sprintf("%d %05d", order[$2] ? order[$2] : 9, n)
    row[key[n]] = sprintf("| %s | %s | %s | %s | %s (%ss) |", $2, $3, $6, $7, $4, $5)
    if ($4 == "PASS") passed++; else failed++
  }
  END {
    print "| category | attack | expected | observed | result |"
    print "|---|---|---|---|---|"
    # Sort keys: catalogue category first, then the order the rows arrived in.
    for (i = 1; i <= n; i++) sorted[i] = key[i]
    for (i = 2; i <= n; i++) {
      v = sorted[i]; j = i - 1
      while (j > 0 && sorted[j] > v) { sorted[j + 1] = sorted[j]; j-- }
      sorted[j + 1] = v
    }
    for (i = 1; i <= n; i++) print row[sorted[i]]
    # A test that failed without a FAIL row (a panic before its rows, no rows at all) is a
    # failure of its own.
    if (status != 0 && failed == 0) failed = 1
    if (n == 0 && failed == 0) failed = 1
    printf "\n%d passed, %d failed\n", passed, failed
    exit (failed > 0)
  }
' "$results" && table_ok=0 || table_ok=$?

if [ "$run_status" != 0 ] && [ -n "${runlog:-}" ]; then
  log "the attack run failed (status $run_status); the end of its output (result lines above):"
  grep -v '^GVH-REDTEAM' "$runlog" | grep -v '^ *[0-9]*: \|^ *at ' | tail -n 30 >&2
fi
exit "$table_ok"
