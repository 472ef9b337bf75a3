#!/usr/bin/env python3
"""Where a runsc sandbox's start goes, and what a booted one costs, for issue 21's warm pool.

    python3 hack/experiments/sandbox-start.py [--runsc PATH] [--runs N] [--platform P]
        [--policy-injector PATH] [--only restore|subcontainer|idle] [--idle-seconds S]

As root. Builds a busybox bundle in a temporary directory (read-only root, `sleep 600`, no
network; hardened by `policy-injector harden` with the embedded default policy when
--policy-injector is given, which adds the policy's seccomp profile, user, rlimits and mounts).

"subcontainer": a pod's later container, what a pool cannot boot ahead. With a sandbox running,
N times each, interleaved: `runsc create` and `runsc start` of a subcontainer (CRI's
annotations) with the shim's flags (`--directfs=false --oci-seccomp`, the spec's seccomp
profile), without the seccomp profile, and with directfs on; plus the sandbox's own create and
start for comparison.

"restore": boot versus restore of an idle sandbox, is `runsc restore` a faster way to fill a
pool? Interleaved, N times each:

- boot: `runsc create` + `runsc start`, then `runsc exec ... true` (the first command a claimed
  sandbox would run);
- restore: `runsc restore --detach` from a checkpoint of the same idle sandbox, then the same
  exec;
- restore --background: the same with the image loaded lazily (an uncompressed checkpoint).

Prints the medians and p95s (ms) of "ready" (until the runtime call returned) and "first
exec", the checkpoint's time and size, and the sandbox's resident memory (PSS of the sentry and
the gofer) after a boot and after a restore.

"idle": what a warm pool costs while it waits. For 1, 5 and 10 booted idle sandboxes (each has
run one `runsc exec ... true`, as a readiness check would): PSS per sandbox (sentry, gofer and
the platform's stub processes; PSS splits shared pages among the sandboxes) and the CPU time
they use in --idle-seconds (utime + stime of those processes, per sandbox and per minute).

Everything lives under the temporary directory and is deleted at the end, sandboxes included.
Findings: `hack/bench/README.md` ("Where a pod's start goes, through CRI"); idle:
`shim/README.md` ("A warm pool").
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# The shim's global flags that change how a container starts (the rest, e.g. --host-uds=none,
# only refuse things); --oci-seccomp is added when the spec has a profile.
SHIM_FLAGS = ["--network=none", "--net-raw=false", "--directfs=false"]


def sh(args):
    # No pipes: the sandbox inherits the stdio of `create`/`restore`, and a pipe it holds would
    # never reach EOF. Errors go to a file read back on failure.
    with tempfile.TemporaryFile() as err:
        r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        if r.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(args)}: {err.read().decode(errors='replace').strip()}")


class Runsc:
    def __init__(self, binary, root, platform, flags):
        self.base = [binary, "--root", root, f"--platform={platform}"] + flags

    def __call__(self, *args):
        return sh(self.base + list(args))

    def delete(self, cid):
        subprocess.run(self.base + ["delete", "--force", cid], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def rootfs(work):
    root = os.path.join(work, "rootfs")
    os.makedirs(os.path.join(root, "bin"))
    for d in ("proc", "tmp", "dev", "sys", "etc"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(shutil.which("busybox"), os.path.join(root, "bin", "busybox"))
    for name in ("sh", "sleep", "true"):
        os.symlink("busybox", os.path.join(root, "bin", name))
    return root


def bundle(work, name, root, annotations, injector, seccomp=True):
    """A bundle directory `name` whose config.json runs `sleep 600` on `root`, hardened by
    the embedded default policy when `injector` is given; without `seccomp` the profile the
    policy added is taken out again."""
    b = os.path.join(work, name)
    os.makedirs(b)
    # The policy runs containers from the image in their bundle only: a copy (busybox, ~1 MB).
    shutil.copytree(root, os.path.join(b, "rootfs"), symlinks=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {"args": ["/bin/sleep", "600"], "cwd": "/", "env": ["PATH=/bin"],
                    "user": {"uid": 65534, "gid": 65534}, "noNewPrivileges": True},
        "root": {"path": "rootfs", "readonly": True},
        "hostname": "pool",
        "annotations": annotations,
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                    "options": ["size=16m", "nosuid", "nodev"]}],
        "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")]},
    }
    path = os.path.join(b, "config.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    if injector:
        sh([injector, "harden", "--in-place", path])
        if not seccomp:
            with open(path) as f:
                spec = json.load(f)
            spec["linux"].pop("seccomp", None)
            with open(path, "w") as f:
                json.dump(spec, f)
    with open(path) as f:
        has_profile = "seccomp" in json.load(f).get("linux", {})
    return b, has_profile


def pss_kib(pid):
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


def sandbox_pss(cid, root):
    return sum(pss_kib(p) for p in sandbox_pids(cid, root))


def ms(t0):
    return (time.monotonic() - t0) * 1000


def summary(xs):
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return f"{statistics.median(xs):7.1f} (p95 {p95:7.1f})"


def restore_section(args, work, state, root, live):
    b, profile = bundle(work, "restore-bundle", root, {}, args.policy_injector)
    flags = SHIM_FLAGS + (["--oci-seccomp"] if profile else [])
    runsc = Runsc(args.runsc, state, args.platform, flags)
    results = {k: {"ready": [], "exec": []} for k in ("boot", "restore", "restore --background")}
    pss = {}
    # The image: an idle sandbox booted once, checkpointed (which stops it).
    runsc("create", "--bundle", b, "base")
    live.append((runsc, "base"))
    runsc("start", "base")
    runsc("exec", "base", "/bin/true")
    img = os.path.join(work, "image")
    t0 = time.monotonic()
    runsc("checkpoint", "--image-path", img, "base")
    checkpoint_ms = ms(t0)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(img) for f in fs)
    runsc.delete("base")
    live.remove((runsc, "base"))
    for i in range(args.runs):
        for kind in results:
            cid = f"{kind.split()[0]}-{i}" + ("-bg" if "background" in kind else "")
            live.append((runsc, cid))
            t0 = time.monotonic()
            if kind == "boot":
                runsc("create", "--bundle", b, cid)
                runsc("start", cid)
            else:
                extra = ["--background"] if "background" in kind else []
                runsc("restore", "--image-path", img, "--bundle", b, "--detach", *extra, cid)
            results[kind]["ready"].append(ms(t0))
            runsc("exec", cid, "/bin/true")
            results[kind]["exec"].append(ms(t0))
            if i == 0:
                pss[kind] = sandbox_pss(cid, state)
            runsc.delete(cid)
            live.remove((runsc, cid))
    print(f"\nrestore: checkpoint of the idle sandbox {checkpoint_ms:.0f} ms, image {size / 2**20:.1f} MiB")
    print(f"{'how':<22} {'ready ms':>22} {'first exec done ms':>24} {'PSS MiB':>8}")
    for kind, r in results.items():
        print(f"{kind:<22} {summary(r['ready']):>22} {summary(r['exec']):>24} {pss.get(kind, 0) / 1024:8.1f}")


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (which may hold spaces): the
    state first, then the parent pid, ...; utime and stime are [11] and [12]."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def sandbox_pids(cid, root):
    """The processes whose argv names this sandbox's id and state root (sentry, gofer) and all
    their descendants (the platform's stub processes, whose argv is gone)."""
    named, parent = [], {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            parent[pid] = stat_fields(pid)[1]
        except OSError:
            continue
        if cid.encode() in argv and root.encode() in b" ".join(argv):
            named.append(pid)
    pids, grew = set(named), True
    while grew:
        more = {p for p, pp in parent.items() if pp in pids} - pids
        pids |= more
        grew = bool(more)
    return sorted(pids)


def cpu_ms(pids):
    """utime + stime of `pids` (all their threads), in ms."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            rest = stat_fields(pid)
        except OSError:
            continue
        total += int(rest[11]) + int(rest[12])
    return total * 1000 / tick


def idle_section(args, work, state, root, live):
    b, profile = bundle(work, "idle-bundle", root, {}, args.policy_injector)
    flags = SHIM_FLAGS + (["--oci-seccomp"] if profile else [])
    runsc = Runsc(args.runsc, state, args.platform, flags)
    print(f"\nidle: {args.idle_seconds} s window; per sandbox")
    print(f"{'sandboxes':>9} {'PSS MiB':>9} {'CPU ms in window':>17} {'CPU ms per minute':>18}")
    for n in (1, 5, 10):
        cids = [f"idle-{n}-{i}" for i in range(n)]
        for cid in cids:
            live.append((runsc, cid))
            runsc("create", "--bundle", b, cid)
            runsc("start", cid)
            runsc("exec", cid, "/bin/true")
        pids = [p for cid in cids for p in sandbox_pids(cid, state)]
        pss = sum(pss_kib(p) for p in pids) / n
        before = cpu_ms(pids)
        time.sleep(args.idle_seconds)  # the measurement window itself, not a wait for an event
        used = (cpu_ms(pids) - before) / n
        print(f"{n:>9} {pss / 1024:9.1f} {used:17.1f} {used * 60 / args.idle_seconds:18.1f}")
        for cid in cids:
            runsc.delete(cid)
            live.remove((runsc, cid))


def subcontainer_section(args, work, state, root, live):
    variants = {
        "as the shim runs it": ([], True),
        "no seccomp profile": ([], False),
        "directfs on": (["--directfs=true"], True),
    }
    results = {}
    for i in range(args.runs):
        for name, (extra, seccomp) in variants.items():
            sid = f"pod-{i}-{len(results.get(name, {}).get('sandbox', []))}-{abs(hash(name)) % 1000}"
            sb, profile = bundle(work, f"{sid}-sandbox", root,
                                 {"io.kubernetes.cri.container-type": "sandbox",
                                  "io.kubernetes.cri.sandbox-id": sid},
                                 args.policy_injector, seccomp)
            cb, _ = bundle(work, f"{sid}-app", root,
                           {"io.kubernetes.cri.container-type": "container",
                            "io.kubernetes.cri.sandbox-id": sid},
                           args.policy_injector, seccomp)
            flags = [f for f in SHIM_FLAGS if not (extra and f.startswith("--directfs"))] + extra
            flags += ["--oci-seccomp"] if profile else []
            runsc = Runsc(args.runsc, state, args.platform, flags)
            r = results.setdefault(name, {k: [] for k in ("sandbox create", "sandbox start", "sub create", "sub start")})
            def timed(step, *call):
                t0 = time.monotonic()
                runsc(*call)
                r[step].append(ms(t0))

            app = f"{sid}-app"
            live.append((runsc, sid))
            timed("sandbox create", "create", "--bundle", sb, sid)
            timed("sandbox start", "start", sid)
            live.append((runsc, app))
            timed("sub create", "create", "--bundle", cb, app)
            timed("sub start", "start", app)
            for cid in (app, sid):
                runsc.delete(cid)
                live.remove((runsc, cid))
            shutil.rmtree(sb)
            shutil.rmtree(cb)
    print("\nsubcontainer: medians (p95) in ms")
    steps = ("sandbox create", "sandbox start", "sub create", "sub start")
    print(f"{'variant':<22}" + "".join(f"{s:>24}" for s in steps))
    for name, r in results.items():
        print(f"{name:<22}" + "".join(f"{summary(r[s]):>24}" for s in steps))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runsc", default=shutil.which("runsc"))
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--platform", default="systrap")
    ap.add_argument("--policy-injector")
    ap.add_argument("--only", choices=["restore", "subcontainer", "idle"])
    ap.add_argument("--idle-seconds", type=float, default=60)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gvh-start-")
    state = os.path.join(work, "state")
    os.makedirs(state)
    root = rootfs(work)
    live = []
    print(f"runsc {args.runsc}, platform {args.platform}, {args.runs} runs each, interleaved; "
          f"spec {'hardened by ' + args.policy_injector if args.policy_injector else 'as written'}")
    try:
        if args.only in (None, "subcontainer"):
            subcontainer_section(args, work, state, root, live)
        if args.only in (None, "restore"):
            restore_section(args, work, state, root, live)
        if args.only in (None, "idle"):
            idle_section(args, work, state, root, live)
    finally:
        for runsc, cid in reversed(live):
            runsc.delete(cid)
        # runsc leaves a bind mount of its empty network namespace in the state root.
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split()[4] for line in f if line.split()[4].startswith(work)]
        for m in reversed(mounts):
            subprocess.run(["umount", m], check=False)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
