#!/usr/bin/env bash
# Coverage-guided fuzzing of the policy parser and harden(), on the stable toolchain.
#
#   hack/fuzz.sh [SECONDS] [TARGET...]     # default: 60 s for each of policy_parse, harden_spec,
#                                          # egress_http_head, egress_client_hello, git_config
#
# The targets (fuzz/fuzz_targets/) link libFuzzer through the libfuzzer-sys crate; rustc's
# SanitizerCoverage pass (-C passes=sancov-module, stable) provides the coverage feedback, so
# neither nightly nor cargo-fuzz is needed. Each target starts from the project's own inputs
# (policy files, the captured ctr specs in policy-injector/tests/fixtures) plus whatever earlier
# runs found (fuzz/corpus/, not committed). Fails if any target crashes; the crashing input is
# kept under fuzz/artifacts/<target>/ and printed with the command that replays it.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ensure_rust
command -v c++ >/dev/null 2>&1 || die "a C++ compiler is needed to build libFuzzer (Debian: g++)"

SECONDS_EACH="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(policy_parse harden_spec egress_http_head egress_client_hello git_config)
[[ "$SECONDS_EACH" =~ ^[0-9]+$ ]] || die "SECONDS must be a number, got $SECONDS_EACH"

FUZZ_DIR="$REPO_ROOT/fuzz"
HOST="$(rustc -vV | sed -n 's/^host: //p')"
# --target keeps these flags off build scripts and proc macros (which would then need the
# sanitizer runtime to load); -Cdebug-assertions/overflow-checks come from the release profile.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cforce-frame-pointers"
export CARGO_TARGET_DIR="$FUZZ_DIR/target"

log "building fuzz targets (${TARGETS[*]})"
(cd "$FUZZ_DIR" && cargo build --release --locked --target "$HOST" $(printf -- '--bin %s ' "${TARGETS[@]}"))
BIN_DIR="$CARGO_TARGET_DIR/$HOST/release"

# Seeds: copied into the run's corpus each time so new fixtures reach old corpora.
seed() {
  local target=$1 corpus=$2
  case "$target" in
    policy_parse)
      cp "$REPO_ROOT/policy-injector/src/policy/default-policy.toml" "$corpus/seed-default-policy.toml"
      for f in "$REPO_ROOT"/deploy/kustomize/runtimeclasses/policies/*.toml; do
        cp "$f" "$corpus/seed-$(basename "$f")"
      done
      ;;
    harden_spec)
      for f in "$REPO_ROOT"/policy-injector/tests/fixtures/*.json; do
        cp "$f" "$corpus/seed-$(basename "$f")"
      done
      ;;
    egress_http_head)
      printf 'CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n' >"$corpus/seed-connect"
      printf 'GET http://files.example.test:8080/a?b=c HTTP/1.1\r\nHost: files.example.test:8080\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n' >"$corpus/seed-get"
      ;;
    egress_client_hello)
      # A TLS 1.2 record with a ClientHello naming api.example.test.
      printf '\x16\x03\x01\x00\x48\x01\x00\x00\x44\x03\x03%s\x00\x00\x02\x13\x01\x01\x00\x00\x19\x00\x00\x00\x15\x00\x13\x00\x00\x10api.example.test' \
        "$(head -c 32 /dev/zero | tr '\0' 'r')" >"$corpus/seed-hello"
      ;;
    git_config)
      # seed NUL sandbox NUL host: a remote added, an fsmonitor planted, the host edited.
      printf '[core]\n\tbare = false\n\0[core]\n\tbare = false\n\tfsmonitor = ./x\n[remote "o"]\n\turl = https://git.example.test/r\n\tfetch = +refs/heads/*:refs/remotes/o/*\n[branch "main"]\n\tremote = o\n\0# mine\n[core]\n\tbare = false\n[user]\n\tname = Dev\n' >"$corpus/seed-carry"
      printf '[core "x"]\n\tk = "a \\" b" ; c\n[remote.up]\n\turl = ext::sh\n\tpushurl\n[include]\n\tpath = ../i\n' >"$corpus/seed-quotes"
      ;;
    *) die "unknown target $target" ;;
  esac
}

failed=()
summary=()
for target in "${TARGETS[@]}"; do
  corpus="$FUZZ_DIR/corpus/$target"
  artifacts="$FUZZ_DIR/artifacts/$target"
  mkdir -p "$corpus" "$artifacts"
  seed "$target" "$corpus"
  log "fuzzing $target for ${SECONDS_EACH}s (corpus $corpus)"
  logfile="$artifacts/last-run.log"
  set +e
  # -rss_limit_mb: the specs are small; a leak or blow-up should fail, not swap.
  "$BIN_DIR/$target" "$corpus" \
    -max_total_time="$SECONDS_EACH" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" 2>&1 | tee "$logfile" | grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^(==|SUMMARY|Done|stat::)|panicked'
  # The fuzzer's status, not grep's or tee's (set +e is in force for the pipeline).
  rc=${PIPESTATUS[0]}
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logfile" | tail -1)
  summary+=("$target: ${execs:-?} executions in ${SECONDS_EACH}s, exit $rc, corpus $(ls "$corpus" | wc -l) inputs")
  if [ "$rc" -ne 0 ]; then
    failed+=("$target")
    for a in "$artifacts"/crash-* "$artifacts"/oom-* "$artifacts"/timeout-*; do
      [ -e "$a" ] || continue
      echo "  input: $a   replay: $BIN_DIR/$target $a" >&2
    done
  fi
done

log "fuzz summary"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "crashed: ${failed[*]}"
  echo "fuzz: $(( ${#TARGETS[@]} - ${#failed[@]} )) passed, ${#failed[@]} failed"
  exit 1
fi
echo "fuzz: ${#TARGETS[@]} passed, 0 failed"
