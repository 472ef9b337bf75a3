#!/usr/bin/env python3
"""Process timeline of `ctr run` for each runtime, from kernel trace events: profiling aid.

    python3 hack/bench/timeline.py [--json FILE] -- COMMAND...

Runs COMMAND (normally the bench driver, e.g. `target/release/examples/bench --only latency
--runs 10 ...`) while recording every exec and exit on the machine through a private ftrace
instance (tracefs mounted on a temporary directory, unmounted afterwards). Each new process's
argv is read from /proc right after its exec event (every step of interest lives for
milliseconds). Afterwards every `ctr ... run --rm ...` is one run (and every tool call of the
bench's exec section, `ctr ... task exec ... true`, one "<runtime> exec" run): the processes of that run are
the ones whose argv names its containerd namespace or directory (shims, runsc and its sandbox
and gofer, runc), so other users' containers on the machine are left out.

Pods through CRI have no `ctr` process to follow: the bench's pods section writes markers to
the trace instance's `trace_marker` (its path is handed over in GVH_TRACE_MARKER), one at each
pod's begin and end, one at the end of each CRI call, and two around each tool call into a
ready pod. Each pod is then one "pod <handler>" run: its CRI calls as steps ("CRI
RunPodSandbox", ...) and every process a containerd started, directly or through its
descendants, in the pod's window; each tool call one "ExecSync <handler>" run.

Prints, per runtime, the median start (relative to ctr's exec) and duration of each step, and
the median of the whole run; --json writes every run's raw timeline. Needs root. It adds no
work to the traced processes (no ptrace), only to the kernel's event recording.
"""

import argparse
import json
import os
import re
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time

EVENTS = [
    "sched/sched_process_exec",
    "sched/sched_process_exit",
    "sched/sched_process_fork",
    # Durable writes: what a step spends waiting for the disk.
    "syscalls/sys_enter_fsync",
    "syscalls/sys_exit_fsync",
    "syscalls/sys_enter_fdatasync",
    "syscalls/sys_exit_fdatasync",
]
RUNSC_SUBCOMMANDS = {
    "boot", "checkpoint", "create", "delete", "events", "exec", "flags", "gofer", "help",
    "kill", "list", "pause", "ps", "restore", "resume", "run", "spec", "start", "state",
    "update", "wait",
}
# With options/record-tgid: "comm-tid (tgid) [cpu] flags ts: event: fields"; syscall events
# read "sys_fdatasync(fd: 3)" on entry and "sys_fdatasync -> 0x0" on exit.
LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<tid>\d+)\s+\(\s*(?P<tgid>[\d-]+)\)\s+\[\d+\]\s+\S+\s+(?P<ts>\d+\.\d+):\s+(?P<event>\w+)(?P<sep>:|\(| ->)\s*(?P<rest>.*)$"
)


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


class Tracer:
    def __init__(self):
        self.mnt = tempfile.mkdtemp(prefix="gvh-tracefs-")
        subprocess.run(["mount", "-t", "tracefs", "nodev", self.mnt], check=True)
        self.inst = os.path.join(self.mnt, "instances", f"gvh-timeline-{os.getpid()}")
        os.mkdir(self.inst)
        self.w("trace_clock", "mono")
        self.w("buffer_size_kb", "8192")
        self.w("options/record-tgid", "1")
        for e in EVENTS:
            self.w(f"events/{e}/enable", "1")
        self.execs = {}   # pid -> [(ts, argv)]
        self.exits = {}   # pid -> ts (exit of the thread-group leader)
        self.parent = {}  # pid -> parent's tgid (new processes only, not threads)
        self.syncs = {}   # tgid -> [(start, end)] of fsync/fdatasync
        self.sync_open = {}  # tid -> start
        self.marks = []      # (ts, text) written by the traced command to trace_marker
        self.stop = False
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def w(self, name, value):
        with open(os.path.join(self.inst, name), "w") as f:
            f.write(value)

    def read(self):
        # Non-blocking with select, so close() can stop the reader and remove the instance
        # (an open trace_pipe keeps it busy).
        fd = os.open(os.path.join(self.inst, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
        buf = b""
        try:
            while True:
                ready, _, _ = select.select([fd], [], [], 0.1)
                chunk = b""
                if ready:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        pass
                if not chunk:
                    if self.stop:
                        return
                    continue
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self.handle(line.decode(errors="replace"))
        finally:
            os.close(fd)

    def handle(self, line):
        m = LINE.match(line)
        if not m:
            return
        ts = float(m["ts"])
        ev = m["event"]
        tid = int(m["tid"])
        if ev == "sched_process_exec":
            pid = int(re.search(r"\bpid=(\d+)", m["rest"])[1])
            # Read argv now: the process may be gone by the end of the run.
            self.execs.setdefault(pid, []).append((ts, cmdline(pid)))
        elif ev == "sched_process_exit":
            pid = int(re.search(r"\bpid=(\d+)", m["rest"])[1])
            # Only the thread-group leader's exit ends the process (tid == pid).
            if tid == pid:
                self.exits[pid] = ts
        elif ev == "sched_process_fork":
            child = int(re.search(r"\bchild_pid=(\d+)", m["rest"])[1])
            tgid = int(m["tgid"]) if m["tgid"].isdigit() else tid
            self.parent[child] = tgid
        elif ev == "tracing_mark_write" and m["rest"].startswith("gvh-bench "):
            self.marks.append((ts, m["rest"][len("gvh-bench "):].strip()))
        elif ev.startswith("sys_") and m["sep"] == "(":
            self.sync_open[tid] = ts
        elif ev.startswith("sys_") and m["sep"] == " ->" and tid in self.sync_open:
            start = self.sync_open.pop(tid)
            tgid = int(m["tgid"]) if m["tgid"].isdigit() else tid
            self.syncs.setdefault(tgid, []).append((start, ts))

    def close(self):
        self.w("tracing_on", "0")
        for e in EVENTS:
            self.w(f"events/{e}/enable", "0")
        self.stop = True
        self.thread.join()
        try:
            os.rmdir(self.inst)
        except OSError as e:
            print(f"timeline: removing the trace instance: {e}", file=sys.stderr)
        subprocess.run(["umount", self.mnt], check=False)
        os.rmdir(self.mnt)


def label(argv):
    """A short name for a step: binary plus subcommand."""
    if not argv:
        return "?"
    base = os.path.basename(argv[0])
    if base.startswith("runsc-sandbox") or base.startswith("runsc-gofer"):
        return base
    wrappers = ("runsc-baseline", "runsc-replay-features")
    if base in wrappers or (base in ("sh", "dash") and len(argv) > 1 and os.path.basename(argv[1]) in wrappers):
        base = "runsc(wrapper)"
    if "runsc" in base or base == "runc":
        sub = next((a for a in argv[1:] if a in RUNSC_SUBCOMMANDS), "?")
        return f"{base} {sub}"
    if base.startswith("containerd-shim"):
        tail = argv[-1] if argv[-1] in ("start", "delete") else "server"
        return f"{base} {tail}"
    return base


def processes(execs, exits):
    """Every exec'd image as a process: pid, start, end and argv."""
    procs = []
    for pid, seq in execs.items():
        for i, (ts, argv) in enumerate(seq):
            # A later exec by the same pid ends this image (a wrapper exec'ing runsc).
            end = seq[i + 1][0] if i + 1 < len(seq) else exits.get(pid)
            procs.append({"pid": pid, "start": ts, "end": end, "argv": argv or []})
    return procs


def runs(execs, exits, parent, syncs):
    """Every `ctr run` and the processes that belong to it: those naming its namespace, id or
    containerd directory, and their descendants (`runsc flags` names none of them)."""
    procs = processes(execs, exits)
    out = []
    for p in procs:
        a = p["argv"]
        if not a or os.path.basename(a[0]) != "ctr":
            continue
        is_run = "run" in a and "--rm" in a
        # A tool call of the bench's exec section: `ctr task exec --exec-id X ID true` into a
        # sandbox whose id says which runtime runs it (bx<ours|go|runc>-...).
        is_exec = "task" in a and "exec" in a and "true" in a
        if not (is_run or is_exec):
            continue
        ns = a[a.index("--namespace") + 1]
        addr = a[a.index("--address") + 1]
        cdir = os.path.dirname(addr)
        cid = a[a.index("true") - 1] if "true" in a else a[-1]
        if is_exec:
            kinds = {"bxours-": "hardened", "bxgo-": "go_shim_runsc", "bxrunc-": "runc", "bxexp-": "hardened_experiment"}
            kind = next((v for k, v in kinds.items() if cid.startswith(k)), None)
            if kind is None:
                continue
            runtime = kind + " exec"
        else:
            rt = a[a.index("--runtime") + 1]
            if "gvisor-hardened" in rt:
                # The driver's --experiment-runsc contender has its own policy file.
                runtime = "hardened_experiment" if any("experiment-policy" in x for x in a) else "hardened"
            else:
                runtime = "go_shim_runsc" if any("runsc-baseline" in x for x in a) else "runc"
        if p["end"] is None:
            continue
        window = [q for q in procs if q is not p and p["start"] <= q["start"] <= p["end"]]
        mine_pids = set()
        for q in window:
            text = " ".join(q["argv"])
            if (cid in text or ns in text or cdir in text) and os.path.basename(q["argv"][0] if q["argv"] else "") != "ctr":
                mine_pids.add(q["pid"])
        changed = True
        while changed:
            changed = False
            for q in window:
                if q["pid"] not in mine_pids and parent.get(q["pid"]) in mine_pids:
                    mine_pids.add(q["pid"])
                    changed = True
        mine = [q for q in window if q["pid"] in mine_pids]
        steps = [{
            "step": label(q["argv"]),
            "pid": q["pid"],
            "start_ms": round((q["start"] - p["start"]) * 1000, 2),
            "dur_ms": round((q["end"] - q["start"]) * 1000, 2) if q["end"] else None,
            "sync_ms": round(sum(b - a for a, b in syncs.get(q["pid"], [])
                                 if q["start"] <= a and (q["end"] is None or b <= q["end"])) * 1000, 2),
            "syncs": sum(1 for a, b in syncs.get(q["pid"], [])
                         if q["start"] <= a and (q["end"] is None or b <= q["end"])),
            "sync_intervals_ms": [[round((a - p["start"]) * 1000, 2), round((b - a) * 1000, 2)]
                                  for a, b in syncs.get(q["pid"], [])
                                  if q["start"] <= a and (q["end"] is None or b <= q["end"])],
            "argv": q["argv"],
        } for q in sorted(mine, key=lambda q: q["start"])]
        out.append({"runtime": runtime, "id": cid, "total_ms": round((p["end"] - p["start"]) * 1000, 2), "steps": steps})
    return out


def pod_runs(marks, execs, exits, parent, syncs):
    """Every pod the bench marked: its CRI calls as steps, and the processes any containerd
    started (itself or through its descendants) between the pod's begin and ready marks."""
    procs = processes(execs, exits)
    daemons = {p["pid"] for p in procs if p["argv"] and os.path.basename(p["argv"][0]) == "containerd"}

    def from_containerd(pid):
        seen = set()
        while pid is not None and pid not in seen:
            if pid in daemons:
                return True
            seen.add(pid)
            pid = parent.get(pid)
        return False

    out = []
    begin = None
    for ts, text in sorted(marks):
        kind, _, arg = text.partition(" ")
        if kind in ("pod-begin", "exec-begin"):
            what = "pod" if kind == "pod-begin" else "ExecSync"
            begin = {"ts": ts, "handler": f"{what} {arg}", "calls": [], "last": ts}
        elif kind == "step-end" and begin:
            begin["calls"].append({"step": f"CRI {arg}", "pid": None,
                                   "start_ms": round((begin["last"] - begin["ts"]) * 1000, 2),
                                   "dur_ms": round((ts - begin["last"]) * 1000, 2),
                                   "sync_ms": 0, "syncs": 0, "sync_intervals_ms": [], "argv": []})
            begin["last"] = ts
        elif kind in ("pod-ready", "exec-end") and begin:
            t0 = begin["ts"]
            mine = [q for q in procs if t0 <= q["start"] <= ts and from_containerd(q["pid"])
                    and q["pid"] not in daemons]
            steps = begin["calls"] + [{
                "step": label(q["argv"]),
                "pid": q["pid"],
                "start_ms": round((q["start"] - t0) * 1000, 2),
                "dur_ms": round((q["end"] - q["start"]) * 1000, 2) if q["end"] else None,
                "sync_ms": round(sum(b - a for a, b in syncs.get(q["pid"], [])
                                     if q["start"] <= a and (q["end"] is None or b <= q["end"])) * 1000, 2),
                "syncs": sum(1 for a, b in syncs.get(q["pid"], [])
                             if q["start"] <= a and (q["end"] is None or b <= q["end"])),
                "sync_intervals_ms": [],
                "argv": q["argv"],
            } for q in sorted(mine, key=lambda q: q["start"])]
            steps.sort(key=lambda s: s["start_ms"])
            out.append({"runtime": begin["handler"], "id": None,
                        "total_ms": round((ts - t0) * 1000, 2), "steps": steps})
            begin = None
    return out


def summarize(all_runs):
    by_rt = {}
    for r in all_runs:
        by_rt.setdefault(r["runtime"], []).append(r)
    for rt, rs in sorted(by_rt.items()):
        what = {"pod": "pod ready", "ExecSync": "ExecSync"}.get(rt.split()[0], "ctr run")
        print(f"\n{rt}: {len(rs)} runs, {what} median {statistics.median(r['total_ms'] for r in rs):.1f} ms")
        # Steps by label and occurrence (the 2nd `runsc state` of a run is a step of its own).
        table = {}
        order = []
        for r in rs:
            seen = {}
            for s in r["steps"]:
                k = seen.get(s["step"], 0)
                seen[s["step"]] = k + 1
                key = (s["step"], k)
                if key not in table:
                    table[key] = []
                    order.append(key)
                table[key].append(s)
        rows = []
        for key in order:
            ss = table[key]
            starts = [s["start_ms"] for s in ss]
            durs = [s["dur_ms"] for s in ss if s["dur_ms"] is not None]
            rows.append((statistics.median(starts), key, len(ss), statistics.median(durs) if durs else None,
                         statistics.median(s["syncs"] for s in ss), statistics.median(s["sync_ms"] for s in ss)))
        print(f"  {'step':<44} {'in runs':>7} {'start ms':>9} {'dur ms':>8} {'fsyncs':>6} {'in fsync ms':>11}")
        for start, (name, k), n, dur, nsync, sync_ms in sorted(rows):
            tag = f"{name}" + (f" #{k + 1}" if k else "")
            d = f"{dur:8.1f}" if dur is not None else " (alive)"
            print(f"  {tag:<44} {n:>7} {start:9.1f} {d} {nsync:6.0f} {sync_ms:11.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command")
    tracer = Tracer()
    try:
        env = dict(os.environ, GVH_TRACE_MARKER=os.path.join(tracer.inst, "trace_marker"))
        rc = subprocess.run(cmd, env=env).returncode
        time.sleep(0.3)  # a window for the reader to drain the last events
    finally:
        tracer.close()
    all_runs = runs(tracer.execs, tracer.exits, tracer.parent, tracer.syncs)
    all_runs += pod_runs(tracer.marks, tracer.execs, tracer.exits, tracer.parent, tracer.syncs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_runs, f, indent=1)
    summarize(all_runs)
    sys.exit(rc)


if __name__ == "__main__":
    main()
