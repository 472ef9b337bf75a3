#!/usr/bin/env bash
# Runs a coding agent's image on one project directory under gVisor with the coding-agent
# preset: the "sandbox it" docker-run recipe, with the policy doing what its dozen flags did
# (read-only root, no capabilities, no new privileges, size-limited tmpfs for /tmp and the
# agent's cache/config/state, 16Gi / 8 CPUs / 256 processes, loopback only) and what they could
# not (.git/hooks and .git/config read-only inside the writable project, .env files masked).
#
#   hack/agent-sandbox.sh IMAGE PROJECT_DIR [COMMAND [ARG...]]
#
# The runtime must be registered with Docker first (once, as root):
#   policy-injector default-policy --preset coding-agent > /etc/gvisor-hardened/agent.toml
#   # edit writable_sources in it to cover PROJECT_DIR, then add to /etc/docker/daemon.json:
#   "runtimes": {"gvisor-hardened-agent": {"path": "/usr/local/bin/runsc-hardened",
#                "runtimeArgs": ["--policy=/etc/gvisor-hardened/agent.toml"]}}
#   # and `kill -HUP $(pidof dockerd)`.
#
# Environment: DOCKER (default /usr/bin/docker; DOCKER_HOST is honoured), GVH_RUNTIME (default
# gvisor-hardened-agent), GVH_AGENT_HOME (the image's home for the agent, default /home/agent),
# GVH_USER (default: the project directory's owner, so files the agent writes stay yours).
set -euo pipefail

usage() { echo "usage: $0 IMAGE PROJECT_DIR [COMMAND [ARG...]]" >&2; exit 2; }
[ $# -ge 2 ] || usage
image="$1"
project="$(cd "$2" && pwd -P)" || { echo "error: no such directory: $2" >&2; exit 2; }
shift 2

docker="${DOCKER:-/usr/bin/docker}"
runtime="${GVH_RUNTIME:-gvisor-hardened-agent}"
home="${GVH_AGENT_HOME:-/home/agent}"
user="${GVH_USER:-$(stat -c %u:%g "$project")}"

if ! "$docker" info --format '{{json .Runtimes}}' | grep -q "\"$runtime\""; then
  echo "error: Docker has no runtime \"$runtime\"; see the top of $0 to register it" >&2
  exit 1
fi

# The harness of the recipe saves state per project directory, so each project gets its own
# path inside the workspace.
dest="$home/workspace/$(echo "$project" | tr / -)"
flags=(
  --rm --runtime "$runtime" --network none
  --user "$user"
  --mount "type=bind,src=$project,dst=$dest"
  --workdir "$dest"
)
# A terminal only when there is one (an agent's TUI); scripts and tests pipe.
if [ -t 0 ] && [ -t 1 ]; then
  flags+=(-it)
else
  flags+=(-i)
fi
exec "$docker" run "${flags[@]}" "$image" "$@"
