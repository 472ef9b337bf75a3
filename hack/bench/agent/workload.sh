#!/bin/bash
# A coding agent's day in one sandbox, each step timed by bash's EPOCHREALTIME (no fork, no
# extra process): prints `step NAME START END` per step that succeeded, `fail NAME CODE` and the
# tail of its output per step that did not (the next steps still run), and `info ...` lines.
# Run by tests/examples/agent_bench with /workspace a writable bind of a fresh host directory and
# /bench (read-only) holding this script and the test CA. The upstreams are https://pypi.test
# (a PEP 503 index) and https://git.test (git smart HTTP): through the egress proxy
# (HTTPS_PROXY, set by the runtime) under gvisor-hardened, straight over a network namespace of
# the bench's own (/etc/hosts bound in) under plain runsc and runc.
set -uo pipefail

if [ "$(id -u)" = 0 ]; then
  # runc and plain runsc start as root (ctr 1.6 has no --user): drop to the agent's uid, as the
  # hardened policy does with its [user] 1000:1000.
  exec setpriv --reuid=1000 --regid=1000 --init-groups env HOME=/home/agent "$0" "$@"
fi

ws=/workspace
log=/tmp/agent-step.log
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_CERT=/bench/ca.pem
export PIP_INDEX_URL=https://pypi.test/simple/ GIT_SSL_CAINFO=/bench/ca.pem
export GIT_CONFIG_GLOBAL=/tmp/gitconfig GIT_CONFIG_NOSYSTEM=1

t() {
  local name=$1 start rc
  shift
  start=$EPOCHREALTIME
  "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" = 0 ]; then
    echo "step $name $start $EPOCHREALTIME"
  else
    echo "fail $name $rc"
    tail -n 5 "$log" | sed 's/^/  | /'
  fi
}

write_files() {
  mkdir "$ws/files" || return
  local i
  for ((i = 0; i < 1000; i++)); do
    printf 'file %d of the agent bench\n' "$i" >"$ws/files/f$i.txt" || return
  done
}

run_pytest() {
  cd "$ws/project" && "$ws/venv/bin/python" -m pytest -q tests
}

t python_start_x5 bash -c 'for i in 1 2 3 4 5; do python3 -c pass || exit; done'
t venv python3 -m venv "$ws/venv"
t pip_install "$ws/venv/bin/pip" install gvhdemo-app pytest requests
t git_clone git clone -q --branch main --single-branch https://git.test/git/project.git "$ws/project"
t git_fetch git -C "$ws/project" fetch -q origin feature
t pytest run_pytest
echo "info pytest $(tail -n 1 "$log")"
t write_1000_files write_files
t cp_r_venv cp -r "$ws/venv" "$ws/venv-copy"
t ls_la ls -la "$ws/files"
echo "info ls_la_lines $(wc -l <"$log")"
t ls_la_again ls -la "$ws/files"
t ls_names ls "$ws/files"
t spawn_true /bin/true
echo "info venv_files $(find "$ws/venv" | wc -l)"
