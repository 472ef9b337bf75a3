#!/usr/bin/env bash
# The two front ends' lifecycle tests on the core's fake world, and the core's workspace tests
# (the exit walk on real trees), run as an unprivileged user (uid/gid 65534, no supplementary
# groups) with runsc out of reach: /usr/bin/runsc covered in a private mount namespace and
# nothing else on PATH. They must pass there; that is what "runs without root and without
# runsc" means. Prints each binary's count and wall time.
# Usage: hack/rootless-tests.sh   (as root: it needs setpriv and unshare; built with the
# workspace's PRODUCT_FEATURES, as hack/test.sh builds, so nothing is compiled twice)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
require_root
cd "$REPO_ROOT"

mapfile -t binaries < <(cargo test -q -p runsc-hardened -p containerd-shim-gvisor-hardened \
  -p gvisor-hardened-core --lib \
  --no-run --message-format=json "${PRODUCT_FEATURES[@]}" 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"] + " " + m["executable"])
')
[ "${#binaries[@]}" = 3 ] || die "expected the front ends' and the core's test binaries, got: ${binaries[*]:-none}"

# The test binaries live under target/, which uid 65534 may not be able to reach; copies can.
dir="$(mktemp -d /tmp/gvh-rootless.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
chmod 0755 "$dir"
# The tests' scratch: theirs, not root's.
install -d -m 0700 -o 65534 -g 65534 "$dir/tmp"
for entry in "${binaries[@]}"; do
  name="${entry%% *}"
  install -m 0755 "${entry#* }" "$dir/$name"
done

for entry in "${binaries[@]}"; do
  name="${entry%% *}"
  # Of the core, the workspace's tests: the rest of its host tests need root by design.
  filter=()
  [ "$name" = gvisor_hardened_core ] && filter=(workspace::)
  log "$name: unit tests as uid 65534, runsc hidden ${filter[*]}"
  start=$(date +%s.%N)
  # A fresh mount namespace; /dev/null over the runsc binary makes any attempt to run it fail.
  unshare --mount --propagation private sh -c '
    [ ! -e /usr/bin/runsc ] || mount --bind /dev/null /usr/bin/runsc
    dir=$1 bin=$2
    shift 2
    cd "$dir"
    exec setpriv --reuid 65534 --regid 65534 --clear-groups \
      env -i PATH=/usr/bin:/bin HOME=/nonexistent TMPDIR="$dir/tmp" "$dir/$bin" -q "$@"
  ' rootless "$dir" "$name" "${filter[@]}" | tee "$dir/$name.out"
  end=$(date +%s.%N)
  grep -q '^test result: ok' "$dir/$name.out" || die "$name: the unprivileged run did not pass"
  passed=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$dir/$name.out")
  printf '%s: %s passed as uid 65534 without runsc in %.2f s (wall)\n' "$name" "$passed" \
    "$(echo "$end - $start" | bc)"
done
