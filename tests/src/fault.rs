//! Tools of the fault-injection tests: policies with a private audit log, the shim and sandbox
//! processes behind a task, a runsc wrapper that holds `runsc create` at a gate, and the audit
//! log's lines.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::containerd::Containerd;
use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::inspect;
use crate::poll::poll_until;
use crate::run::Runtime;

/// A policy file for one test. Everything it does not set keeps the embedded default, except
/// the audit log, which goes to a file of the test's own (the default path is host-global).
#[derive(Debug, Clone)]
pub struct TestPolicy {
    pub path: PathBuf,
    pub audit_path: PathBuf,
}

/// Builds a [`TestPolicy`].
#[derive(Debug, Clone)]
pub struct TestPolicyBuilder {
    dir: PathBuf,
    name: String,
    audit_path: Option<PathBuf>,
    runsc_path: Option<PathBuf>,
    extra: String,
}

impl TestPolicy {
    /// A policy named `name` in `c`'s directory; its audit log defaults to `<name>-audit.jsonl`
    /// beside it.
    pub fn builder(c: &Containerd, name: &str) -> TestPolicyBuilder {
        TestPolicyBuilder {
            dir: c.dir().to_path_buf(),
            name: name.to_string(),
            audit_path: None,
            runsc_path: None,
            extra: String::new(),
        }
    }

    /// The hardened runtime with this policy as its `ConfigPath`.
    pub fn runtime(&self) -> Runtime {
        Runtime::hardened_with_policy(&self.path)
    }

    /// Every line of the audit log, parsed; a line that is not JSON is returned as a string
    /// value holding the raw text (so a torn line shows up in assertions instead of vanishing).
    pub fn audit_lines(&self) -> Vec<Value> {
        audit_lines(&self.audit_path)
    }

    /// The `event` field of each audit line about container `id`, in order.
    pub fn audit_events(&self, id: &str) -> Vec<String> {
        self.audit_lines()
            .iter()
            .filter(|l| l["container_id"] == id)
            .map(|l| l["event"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

impl TestPolicyBuilder {
    /// Where the shim appends its audit lines.
    pub fn audit_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.audit_path = Some(path.into());
        self
    }

    /// The runsc binary the shim runs (`[runsc] path`), e.g. a [`RunscGate`] wrapper.
    pub fn runsc_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.runsc_path = Some(path.into());
        self
    }

    /// More TOML, appended as is. It must not repeat the `[audit]` or `[runsc]` tables.
    pub fn extra(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }

    pub fn write(self) -> Result<TestPolicy> {
        let path = self.dir.join(format!("{}.toml", self.name));
        let audit_path = self
            .audit_path
            .unwrap_or_else(|| self.dir.join(format!("{}-audit.jsonl", self.name)));
        let mut text = format!(
            "version = 1\n\n[audit]\npath = {}\n\n",
            toml_string(&audit_path)
        );
        if let Some(runsc) = &self.runsc_path {
            text.push_str(&format!("[runsc]\npath = {}\n\n", toml_string(runsc)));
        }
        text.push_str(&self.extra);
        fs::write(&path, text).map_err(|e| HarnessError::io("writing", &path, e))?;
        Ok(TestPolicy { path, audit_path })
    }
}

/// A TOML basic string (paths here are plain ASCII; quotes and backslashes are escaped anyway).
fn toml_string(p: &Path) -> String {
    let s = p.to_string_lossy();
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The lines of the JSONL audit log at `path` (empty if it does not exist).
pub fn audit_lines(path: &Path) -> Vec<Value> {
    fs::read(path)
        .map(|bytes| {
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_str(l).unwrap_or_else(|_| Value::String(l.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a pid file (`shim.pid`, `init.pid`) the shim or runsc wrote in a bundle.
pub fn read_pid(path: &Path) -> Result<i32> {
    let text = fs::read_to_string(path).map_err(|e| HarnessError::io("reading", path, e))?;
    text.trim().parse().map_err(|_| {
        HarnessError::io(
            "parsing pid in",
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, text.clone()),
        )
    })
}

/// The pid of the shim server serving task `id` (the `shim.pid` its `start` action wrote).
pub fn shim_pid(c: &Containerd, id: &str) -> Result<i32> {
    read_pid(&c.bundle_dir(id).join("shim.pid"))
}

/// The pid of the runsc sandbox process of task `id` (runsc's `--pid-file`, `init.pid`).
pub fn sandbox_pid(c: &Containerd, id: &str) -> Result<i32> {
    read_pid(&c.bundle_dir(id).join("init.pid"))
}

/// The pids of the runsc gofer and sandbox of container `id`: host processes whose command
/// line names runsc's `--root` for the namespace and the id.
pub fn runsc_processes(root: &Path, id: &str) -> Vec<inspect::ProcInfo> {
    let root = root.to_string_lossy();
    inspect::processes()
        .into_iter()
        .filter(|p| p.cmdline.contains(root.as_ref()) && p.cmdline.contains(id))
        .collect()
}

/// SIGKILL, as `kill -9` sends it.
pub fn kill9(pid: i32) {
    // SAFETY: kill(2); a stale pid only yields ESRCH.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// Waits until `pid` is gone (or a zombie).
pub fn wait_gone(pid: i32, timeout: Duration) -> Result<()> {
    poll_until(&format!("pid {pid} to exit"), timeout, || {
        (!inspect::is_alive(pid)).then_some(())
    })
}

/// Where a [`RunscGate`] holds its runsc subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatePoint {
    /// Before the real runsc runs (for `create`: nothing of the sandbox exists yet).
    Before,
    /// After the real runsc returned, before the wrapper returns to the shim (for `create`: the
    /// sandbox and its state exist, but the shim has not learnt its pid).
    After,
}

/// A runsc wrapper for the policy's `[runsc] path` that passes every call through to the real
/// runsc, except one subcommand (`create`, `start`...), which it holds at a gate until the test
/// releases it. It makes timing faults deterministic: when [`wait_reached`](Self::wait_reached)
/// returns, the shim is inside that runsc call.
#[derive(Debug)]
pub struct RunscGate {
    dir: PathBuf,
    script: PathBuf,
}

impl RunscGate {
    /// Writes the wrapper, holding `subcommand` at `point`, and its gate (a fifo) into a fresh
    /// directory under `c`'s.
    pub fn new(c: &Containerd, subcommand: &str, point: GatePoint) -> Result<RunscGate> {
        let dir = c.dir().join(format!("gate-{}", random_hex(4)));
        fs::create_dir(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
        let fifo = dir.join("release");
        let c_fifo = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("no NUL");
        // SAFETY: mkfifo(3) on a NUL-terminated path.
        if unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) } != 0 {
            return Err(HarnessError::io(
                "mkfifo",
                &fifo,
                std::io::Error::last_os_error(),
            ));
        }
        let runsc = crate::stack::bin("runsc")?;
        let (before, after) = match point {
            GatePoint::Before => ("gate", ""),
            GatePoint::After => ("", "gate"),
        };
        // The wrapper opens the fifo read-write (which never blocks on Linux) before it says
        // it has reached the gate, so from then on the test's non-blocking open for writing
        // finds a reader: `reached` existing means `release` works, with no window between the
        // two (CI once saw `release` fail when the wrapper said `reached` first and opened the
        // fifo after). `read` then blocks until the test writes: no polling, no sleep.
        // Only the first call of the subcommand is held (the test releases one).
        let script = format!(
            r#"#!/bin/sh
# runsc wrapper of a fault test: holds `runsc {subcommand}` at a gate.
gate() {{ exec 3<> '{dir}/release'; : > '{dir}/reached'; read -r _ <&3; exec 3<&-; }}
case " $* " in
*" {subcommand} "*)
  if mkdir '{dir}/taken' 2>/dev/null; then
    {before}
    '{runsc}' "$@"
    rc=$?
    echo "$rc" > '{dir}/status'
    {after}
    exit $rc
  fi
  ;;
esac
exec '{runsc}' "$@"
"#,
            dir = dir.display(),
            runsc = runsc.display(),
        );
        let path = dir.join("runsc-gate");
        fs::write(&path, script).map_err(|e| HarnessError::io("writing", &path, e))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
            .map_err(|e| HarnessError::io("chmod", &path, e))?;
        Ok(RunscGate { dir, script: path })
    }

    /// The wrapper, for the policy's `[runsc] path`.
    pub fn path(&self) -> &Path {
        &self.script
    }

    /// Waits until the held runsc call reached the gate.
    pub fn wait_reached(&self, timeout: Duration) -> Result<()> {
        let reached = self.dir.join("reached");
        poll_until("the held runsc call to reach the gate", timeout, || {
            reached.exists().then_some(())
        })
    }

    /// Lets the held runsc call go on. Returns false if nobody was waiting at the gate.
    pub fn release(&self) -> bool {
        let fifo = self.dir.join("release");
        // Non-blocking: with no reader, open(2) fails with ENXIO instead of hanging the test.
        match fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
        {
            Ok(mut f) => f.write_all(b"go\n").is_ok(),
            Err(_) => false,
        }
    }

    /// The exit status of the real runsc call the wrapper held, once it finished.
    pub fn status(&self) -> Option<i32> {
        fs::read_to_string(self.dir.join("status"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Processes still running the wrapper (a held call).
    pub fn waiting(&self) -> Vec<inspect::ProcInfo> {
        inspect::processes_mentioning(&self.script.to_string_lossy())
    }
}

/// The STATUS column of `ctr task ls` for task `id` (`RUNNING`, `STOPPED`, ...), or `None`
/// when containerd lists no such task.
pub fn task_status(c: &Containerd, id: &str) -> Result<Option<String>> {
    let out = c.ctr().args(["task", "ls"]).checked()?;
    Ok(out.stdout.lines().skip(1).find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.first() == Some(&id)).then(|| cols.last().unwrap_or(&"").to_string())
    }))
}

/// Polls `ctr task ls` until task `id` has `status` (`None`: is not listed any more).
pub fn wait_task_status(
    c: &Containerd,
    id: &str,
    status: Option<&str>,
    timeout: Duration,
) -> Result<()> {
    poll_until(
        &format!("task {id} to be {}", status.unwrap_or("gone")),
        timeout,
        || {
            let now = task_status(c, id).ok()?;
            (now.as_deref() == status).then_some(())
        },
    )
}

/// Waits up to `timeout` for task `id` to be STOPPED, then deletes the task and its container.
pub fn remove_stopped(c: &Containerd, id: &str, timeout: Duration) -> Result<()> {
    wait_task_status(c, id, Some("STOPPED"), timeout)?;
    c.ctr().args(["task", "rm", id]).checked()?;
    c.ctr().args(["container", "rm", id]).checked()?;
    Ok(())
}

/// SIGKILLs task `id` (which may have exited on its own already, so a failed kill is not an
/// error), then [`remove_stopped`].
pub fn kill_and_remove(c: &Containerd, id: &str, timeout: Duration) -> Result<()> {
    let _ = c.ctr().args(["task", "kill", "-s", "SIGKILL", id]).output();
    remove_stopped(c, id, timeout)
}

/// The JSON object at the end of a `ctr events` line (`TIME TOPIC NAMESPACE {json}`), if any.
pub fn event_payload(line: &str) -> Option<Value> {
    let start = line.find('{')?;
    serde_json::from_str(&line[start..]).ok()
}

/// Removes the stdio fifos `ctr` made for container `id` in the containerd's fifo dir. ctr
/// removes them itself when it deletes the task; a test whose ctr failed first does it here.
pub fn remove_ctr_fifos(c: &Containerd, id: &str) {
    let Ok(dirs) = fs::read_dir(c.fifo_dir()) else {
        return;
    };
    for d in dirs.flatten() {
        let Ok(files) = fs::read_dir(d.path()) else {
            continue;
        };
        for f in files.flatten() {
            if f.file_name().to_string_lossy().starts_with(id) {
                let _ = fs::remove_file(f.path());
            }
        }
        // The per-run directory goes once empty (ctr removes it the same way).
        let _ = fs::remove_dir(d.path());
    }
}

/// A tmpfs mounted for one test (a read-only or tiny filesystem under an audit log), unmounted
/// on drop.
#[derive(Debug)]
pub struct TmpfsMount {
    path: PathBuf,
}

impl TmpfsMount {
    /// Mounts a tmpfs with `options` (e.g. `size=64k`, `ro`) on `path`, creating the directory.
    pub fn new(path: &Path, options: &str) -> Result<TmpfsMount> {
        fs::create_dir_all(path).map_err(|e| HarnessError::io("creating", path, e))?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "gvh-fault"])
            .arg(path)
            .output()
            .map_err(|source| HarnessError::Spawn {
                program: "mount".into(),
                source,
            })?;
        if !out.status.success() {
            return Err(HarnessError::io(
                "mounting a tmpfs on",
                path,
                std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
            ));
        }
        Ok(TmpfsMount {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the filesystem: writes `filler` until the kernel answers ENOSPC. Returns the
    /// bytes written.
    pub fn fill(&self, filler: &str) -> Result<u64> {
        let path = self.path.join(filler);
        let mut f = fs::File::create(&path).map_err(|e| HarnessError::io("creating", &path, e))?;
        let chunk = [0u8; 4096];
        let mut total = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => return Err(HarnessError::io("filling", &path, e)),
            }
        }
        Ok(total)
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        if let Ok(c) = std::ffi::CString::new(self.path.to_string_lossy().as_bytes()) {
            // SAFETY: umount2(2) on a NUL-terminated path; lazy, so an open file cannot keep it.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}
