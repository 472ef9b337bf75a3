#!/usr/bin/env bash
# The git hook tools the workspace tests set up in a project as its owner would
# (tests/tests/integration/workspace_git.rs): husky, lefthook and simple-git-hooks from the npm
# registry, pre-commit from PyPI, each at the version below, installed once into a cache
# directory outside the checkout (readable by the tests' unprivileged owner) and printed as
# `name=path` lines, the format of `hack/deps.sh --print`.
#
#   hack/hook-tools.sh --print      install what is missing, print the paths
#
# pre-commit's virtual environment uses Debian's /usr/bin/python3 (python3-venv): the hook
# pre-commit writes names that interpreter, which the owner (uid 1000) can run, where a
# pyenv interpreter under /root could not be.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

HUSKY_VERSION=9.1.7
LEFTHOOK_VERSION=2.2.4
SIMPLE_GIT_HOOKS_VERSION=2.14.0
PRE_COMMIT_VERSION=4.7.0

[ "${1:-}" = --print ] || die "usage: $0 --print"
cache=/var/cache/gvisor-hardened/hook-tools-husky$HUSKY_VERSION-lefthook$LEFTHOOK_VERSION-sgh$SIMPLE_GIT_HOOKS_VERSION-precommit$PRE_COMMIT_VERSION
if [ ! -x "$cache/npm/node_modules/.bin/lefthook" ] || [ ! -x "$cache/pre-commit/bin/pre-commit" ]; then
  require_root
  log "installing the git hook tools into $cache (npm registry, PyPI)"
  # Made in place (a virtual environment names its own path in its scripts); a failed run
  # leaves nothing half made.
  rm -rf "$cache"
  mkdir -p "$cache/npm"
  trap 'rm -rf "$cache"' EXIT
  # --ignore-scripts: lefthook's and simple-git-hooks' postinstall would install hooks into
  # whatever repository the cache sits in; lefthook's binary comes from its platform package.
  npm install --prefix "$cache/npm" --no-audit --no-fund --ignore-scripts --loglevel=error \
    "husky@$HUSKY_VERSION" "lefthook@$LEFTHOOK_VERSION" \
    "simple-git-hooks@$SIMPLE_GIT_HOOKS_VERSION" >/dev/null
  /usr/bin/python3 -m venv "$cache/pre-commit"
  "$cache/pre-commit/bin/pip" install -q --disable-pip-version-check "pre-commit==$PRE_COMMIT_VERSION"
  chmod -R a+rX "$cache"
  trap - EXIT
fi
bin="$cache/npm/node_modules/.bin"
echo "husky=$bin/husky"
# lefthook's own binary (its npm wrapper only finds and runs it).
echo "lefthook=$cache/npm/node_modules/lefthook-linux-x64/bin/lefthook"
echo "simple-git-hooks=$bin/simple-git-hooks"
echo "pre-commit=$cache/pre-commit/bin/pre-commit"
