#!/usr/bin/env python3
"""Experiment: how a runsc sandbox dies at its memory / pids limit and what the cgroups show."""
import ctypes, json, os, sys, time, subprocess, select
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_CHILD_SUBREAPER = 36
assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0

cid, mem, pids, script = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
root = "/tmp/exp/root"
bundle = "/tmp/exp/bundle"
cfg = json.load(open(bundle + "/config.json"))
cfg["process"]["args"] = ["sh", "-c", script]
cfg["linux"]["cgroupsPath"] = "/default/" + cid
res = {}
if mem: res["memory"] = {"limit": mem}
if pids: res["pids"] = {"limit": pids}
cfg["linux"]["resources"] = res
json.dump(cfg, open(bundle + "/config.json", "w"))
T0 = time.monotonic()
def t(): return "%.3f" % (time.monotonic() - T0)
exits = {}
def reap():
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0: return
        exits[pid] = (t(), st)
        print(t(), "reaped", pid, "exited" if os.WIFEXITED(st) else "signaled",
              os.WEXITSTATUS(st) if os.WIFEXITED(st) else os.WTERMSIG(st), flush=True)

def runsc(*a, **kw):
    p = subprocess.Popen(["runsc", "--root=" + root, "--network=none", "--platform=ptrace"] + list(a), **kw)
    while p.pid not in exits:
        reap(); time.sleep(0.002)
    return exits[p.pid]

out = open("/tmp/exp/%s.out" % cid, "ab")
pidfile = "/tmp/exp/%s.pid" % cid
print(t(), "create ->", runsc("create", "--bundle=" + bundle, "--pid-file=" + pidfile, cid, stdout=out, stderr=out))
spid = int(open(pidfile).read())
print(t(), "sandbox pid", spid, "comm", open("/proc/%d/comm" % spid).read().strip())
# children of ours now
kids = subprocess.run(["ps", "-o", "pid,ppid,user,comm", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout
print(kids)
cg = {c: "/sys/fs/cgroup/%s/default/%s" % (c, cid) for c in ["memory", "pids", "cpu", "cpuacct", "cpuset", "blkio", "devices", "freezer"]}
cg2 = "/sys/fs/cgroup/unified/default/" + cid
print("v1 dirs:", {c: os.path.isdir(d) for c, d in cg.items()}, "unified:", os.path.isdir(cg2))
print("memory.limit", open(cg["memory"] + "/memory.limit_in_bytes").read().strip(), "pids.max", open(cg["pids"] + "/pids.max").read().strip())
print("memory tasks:", open(cg["memory"] + "/cgroup.procs").read().split())
fds = {}
for name in ["memory/memory.oom_control", "memory/memory.failcnt", "memory/memory.max_usage_in_bytes", "pids/pids.events", "pids/pids.current"]:
    c, f = name.split("/")
    fds[name] = os.open(cg[c] + "/" + f, os.O_RDONLY)
dirfd = os.open(cg["memory"], os.O_RDONLY | os.O_DIRECTORY)
# OOM eventfd registration (cgroup v1)
efd = os.eventfd(0, os.EFD_NONBLOCK)
ocfd = fds["memory/memory.oom_control"]
with open(cg["memory"] + "/cgroup.event_control", "w") as ec:
    ec.write("%d %d" % (efd, ocfd))
def snap(tag):
    vals = {}
    for n, fd in fds.items():
        try:
            vals[n] = os.pread(fd, 4096, 0).decode().replace("\n", " ").strip()
        except OSError as e:
            vals[n] = "ERR %s" % e.strerror
    try:
        ev = os.eventfd_read(efd)
    except BlockingIOError:
        ev = None
    except OSError as e:
        ev = "ERR " + e.strerror
    print(t(), tag, "dirs mem/pids:", os.path.isdir(cg["memory"]), os.path.isdir(cg["pids"]), "eventfd:", ev, vals, flush=True)
snap("before start")
print(t(), "start ->", runsc("start", cid, stdout=out, stderr=out))
deadline = time.monotonic() + 60
last = 0
while spid not in exits and time.monotonic() < deadline:
    reap()
    if time.monotonic() - last > 1:
        snap("running"); last = time.monotonic()
    time.sleep(0.005)
snap("after sandbox exit")
gone_at = None
for i in range(400):
    reap()
    if not os.path.isdir(cg["memory"]) and gone_at is None:
        gone_at = t(); print(t(), "memory cgroup dir gone"); snap("after dir gone")
    if not os.path.isdir(cg["pids"]) and not os.path.isdir(cg["memory"]):
        break
    time.sleep(0.005)
snap("end poll")
print(t(), "state:", subprocess.run(["runsc", "--root=" + root, "state", cid], capture_output=True, text=True))
print(t(), "delete ->", runsc("delete", "--force", cid))
reap()
print("dirs after delete:", {c: os.path.isdir(d) for c, d in cg.items()}, os.path.isdir(cg2))
print("exits:", exits)
print("output tail:", open("/tmp/exp/%s.out" % cid, "rb").read()[-600:])
