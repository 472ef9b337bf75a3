#!/usr/bin/env bash
# Runs a coding agent's image on one project directory under gVisor with the coding-agent
# preset: the "sandbox it" docker-run recipe, with the policy doing what its dozen flags did
# (read-only root, no capabilities, no new privileges, size-limited tmpfs for /tmp and the
# agent's cache/config/state, 16Gi / 8 CPUs / 256 processes, loopback only) and what they could
# not: every git repository in the project gets private control files inside the sandbox (git
# works normally there; only its commits, branches, fetched objects, index, HEAD and safe config
# keys reach the project), repositories or hooks the agent planted are quarantined when it
# exits, and .env files are masked. After the run this prints what the exit check did.
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
# GVH_USER (default: the project directory's owner, so files the agent writes stay yours),
# GVH_AUDIT_LOG (the policy's audit log, default /var/log/gvisor-hardened/audit.jsonl).
set -euo pipefail
source "$(dirname "$0")/lib.sh" # for --help

usage() { echo "usage: $0 IMAGE PROJECT_DIR [COMMAND [ARG...]]" >&2; exit 2; }
[ $# -ge 2 ] || usage
image="$1"
project="$(cd "$2" && pwd -P)" || { echo "error: no such directory: $2" >&2; exit 2; }
shift 2

docker="${DOCKER:-/usr/bin/docker}"
runtime="${GVH_RUNTIME:-gvisor-hardened-agent}"
home="${GVH_AGENT_HOME:-/home/agent}"
owner="$(stat -c %u "$project")"
user="${GVH_USER:-$owner:$(stat -c %g "$project")}"
audit="${GVH_AUDIT_LOG:-/var/log/gvisor-hardened/audit.jsonl}"

# Said before the container starts, not found out inside: the policy never runs the agent as
# root (uid 0 becomes the policy's user), so a root-owned project would be read-only to it, and
# git refuses a repository owned by another user ("dubious ownership").
if [ "${user%%:*}" = 0 ]; then
  echo "error: $project is owned by root, and the agent never runs as root (the policy maps uid 0 to its own user): it could not write the project, and git inside would refuse it as \"dubious ownership\". chown the project to your user, or set GVH_USER=UID:GID to the user that owns it." >&2
  exit 1
fi
if [ "${user%%:*}" != "$owner" ]; then
  echo "warning: $project is owned by uid $owner, the agent runs as ${user%%:*}: it may not be able to write it, and git inside will refuse the repository (\"dubious ownership\")." >&2
fi
if ! "$docker" info --format '{{json .Runtimes}}' | grep -q "\"$runtime\""; then
  echo "error: Docker has no runtime \"$runtime\"; see the top of $0 to register it" >&2
  exit 1
fi

# The harness of the recipe saves state per project directory, so each project gets its own
# path inside the workspace.
dest="$home/workspace/$(echo "$project" | tr / -)"
cidfile="$(mktemp -u "${TMPDIR:-/tmp}/agent-sandbox.XXXXXX")"
trap 'rm -f "$cidfile"' EXIT
# HOME explicitly: for a uid missing from the image's passwd the engine would set HOME=/.
flags=(
  --rm --runtime "$runtime" --network none
  --user "$user" --env "HOME=$home"
  --mount "type=bind,src=$project,dst=$dest"
  --workdir "$dest"
  --cidfile "$cidfile"
)
# A terminal only when there is one (an agent's TUI); scripts and tests pipe.
if [ -t 0 ] && [ -t 1 ]; then
  flags+=(-it)
else
  flags+=(-i)
fi
rc=0
"$docker" run "${flags[@]}" "$image" "$@" || rc=$?

# What the exit check did to the project ([mounts.workspace]), from the container's exit record.
id="$(cat "$cidfile" 2>/dev/null || true)"
if [ -n "$id" ] && [ -r "$audit" ] && command -v jq >/dev/null; then
  jq -r --arg id "$id" '
    select(.container_id == $id and .event == "exit" and .workspace != null) | .workspace |
    ([.carried[]? | "carried back into \(.gitdir): \((.files // []) + (.config // []) | join(", "))" ]
     + [.carried[]?.not_carried[]? | "kept in the sandbox: \(.)"]
     + [.neutralised[]? | .moved[]? | "quarantined: \(.path) -> \(.to // .disarmed // "(report only)") (\(.reason))"]
     + [.neutralised[]? | .config_removed[]? | "removed from a new repository'"'"'s config: \(.)"]
     + [.git_links[]? | "\(if .removed then "removed" else "found (report only)" end) \(.kind) \(.path)\(if .target then " -> \(.target)" else "" end) (\(.reason))"]
     + [.quarantined[]? | "quarantined: \(.path) -> \(.to // .disarmed // "(report only)") (\(.reason))"]
     + [.hook_inputs_changed[]? | "changed, and run or read by your hook \(.hooks | join(", ")): \(.path) (\(.change)); review it before your next commit"]
     + [.errors[]? | "error: \(.)"])[]' "$audit" | sed 's/^/agent-sandbox: /' >&2
fi
exit "$rc"
