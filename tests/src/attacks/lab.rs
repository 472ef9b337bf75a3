//! The lab an attack runs in: a private containerd with the hardened shim, the test image, the
//! default policy with its audit log in the lab's directory, and an event watcher.
//!
//! Workloads are held at a gate (`sandbox-probe gate`: wait for a line on stdin) until containerd
//! has announced the task's start, then released. Without the gate a workload that finishes
//! within a few milliseconds of `runsc start` races the shim's own start bookkeeping (see
//! `tests/tests/integration/attacks_shim_bugs.rs`), and the run would test that race instead of
//! the attack.

use std::cell::RefCell;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Failed;
use crate::containerd::{Containerd, ContainerdOptions};
use crate::events::Events;
use crate::ids::unique_id;
use crate::image::TestImage;
use crate::poll::poll_until;
use crate::probe::{ProbeLine, PROBE_IN_IMAGE};
use crate::process::CommandOutput;
use crate::run::{Run, Runtime, HARDENED_RUNTIME};
use crate::shim_binary::shim_binary;

/// How long a task may take to be announced as started.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a whole `ctr run` may take (the slowest attack runs a few seconds).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the shim may take to append a line to the audit log after the event it records.
pub const AUDIT_TIMEOUT: Duration = Duration::from_secs(15);

/// One workload to run: an id prefix, `ctr run` flags, the command, the policy.
#[derive(Debug, Clone)]
pub struct Job {
    prefix: &'static str,
    flags: Vec<String>,
    argv: Vec<String>,
    policy: Option<PathBuf>,
    /// `ctr run`'s first argument: the image, or a directory with `--rootfs`.
    source: Option<String>,
    gate: bool,
    /// A container id chosen by the attack (from [`Lab::id`]) instead of a fresh one.
    id: Option<String>,
}

impl Job {
    /// Runs `argv` (argv[0] an absolute path in the image).
    pub fn cmd<I, S>(prefix: &'static str, argv: I) -> Job
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Job {
            prefix,
            flags: Vec::new(),
            argv: argv.into_iter().map(Into::into).collect(),
            policy: None,
            source: None,
            gate: true,
            id: None,
        }
    }

    /// Runs `sandbox-probe ARGS`.
    pub fn probe(prefix: &'static str, args: &[&str]) -> Job {
        let mut argv = vec![PROBE_IN_IMAGE.to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        Job::cmd(prefix, argv)
    }

    /// Runs `/bin/sh -c SCRIPT`.
    pub fn sh(prefix: &'static str, script: &str) -> Job {
        Job::cmd(prefix, ["/bin/sh", "-c", script])
    }

    /// Runs several probe commands in one sandbox, one output line each (see
    /// [`Ran::probe_lines`]).
    pub fn probes(prefix: &'static str, commands: &[&str]) -> Job {
        let script: String = commands
            .iter()
            .map(|c| format!("{PROBE_IN_IMAGE} {c} || echo \"exit $?\"\n"))
            .collect();
        Job::sh(prefix, &script)
    }

    pub fn flags<I, S>(mut self, flags: I) -> Job
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// Uses the policy file at `path` instead of the lab's default policy.
    pub fn policy(mut self, path: impl Into<PathBuf>) -> Job {
        self.policy = Some(path.into());
        self
    }

    /// `ctr run --rootfs DIR`: the first argument is a host directory, not the image.
    pub fn rootfs(mut self, dir: &str) -> Job {
        self.flags.push("--rootfs".into());
        self.source = Some(dir.to_string());
        self
    }

    /// Uses `id` (taken from [`Lab::id`], so the runner checks it) as the container id.
    pub fn with_id(mut self, id: &str) -> Job {
        self.id = Some(id.to_string());
        self
    }

    /// Runs without the start gate, for runs that are expected never to start.
    pub fn ungated(mut self) -> Job {
        self.gate = false;
        self
    }
}

/// A finished `ctr run`.
#[derive(Debug, Clone)]
pub struct Ran {
    pub id: String,
    pub out: CommandOutput,
    /// containerd announced the task's start (so the workload was released from the gate).
    pub started: bool,
}

impl Ran {
    /// The task's exit code as `ctr run` reports it (128 + signal for a killed task).
    pub fn code(&self) -> i32 {
        self.out.code()
    }

    /// The last probe line printed.
    pub fn line(&self) -> Result<ProbeLine, Failed> {
        ProbeLine::parse_last(&self.out.stdout)
            .map_err(|e| Failed(format!("no probe result ({e}); {}", self.summary())))
    }

    /// Every output line parsed as a probe line, in order (for [`Job::probes`]).
    pub fn probe_lines(&self, expected: usize) -> Result<Vec<ProbeLine>, Failed> {
        let lines: Vec<ProbeLine> = self
            .out
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(ProbeLine::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| Failed(format!("unexpected output ({e}); {}", self.summary())))?;
        if lines.len() != expected {
            return Err(Failed(format!(
                "{} probe lines instead of {expected}; {}",
                lines.len(),
                self.summary()
            )));
        }
        Ok(lines)
    }

    /// A one-line account of the run for failure messages.
    pub fn summary(&self) -> String {
        format!(
            "ctr exit {}, stdout {:?}, stderr {:?}",
            self.code(),
            self.out.stdout.trim(),
            self.out.stderr.trim()
        )
    }
}

/// The lab: see the module documentation.
pub struct Lab {
    pub c: Containerd,
    pub image: TestImage,
    dir: PathBuf,
    policy: PathBuf,
    audit: PathBuf,
    events: Events,
    used: RefCell<Vec<String>>,
}

fn pipe_reader(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

impl Lab {
    pub fn start() -> Result<Lab, Failed> {
        let c = Containerd::start(ContainerdOptions::with_shim(shim_binary()?))?;
        let image = TestImage::ensure()?;
        c.import(&image)?;
        let dir = c.dir().join("attacks");
        fs::create_dir_all(&dir).map_err(|e| Failed(format!("{}: {e}", dir.display())))?;
        let audit = dir.join("audit.jsonl");
        let events = Events::watch(&c)?;
        let mut lab = Lab {
            c,
            image,
            policy: PathBuf::new(),
            audit,
            dir,
            events,
            used: RefCell::new(Vec::new()),
        };
        // The embedded default policy, but with the audit log in the lab (a policy file sets
        // only the keys it changes).
        lab.policy = lab.write_policy("default", "")?;
        Ok(lab)
    }

    /// The lab's own directory (inside the private containerd's directory).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn audit_path(&self) -> &Path {
        &self.audit
    }

    /// Writes a policy file: the default policy with the lab's audit path, plus `extra` (TOML
    /// sections other than `[audit]`).
    pub fn write_policy(&self, name: &str, extra: &str) -> Result<PathBuf, Failed> {
        let path = self.dir.join(format!("{name}.toml"));
        let text = format!(
            "version = 1\n\n[audit]\npath = \"{}\"\n\n{extra}",
            self.audit.display()
        );
        fs::write(&path, text).map_err(|e| Failed(format!("{}: {e}", path.display())))?;
        Ok(path)
    }

    /// A fresh container id, recorded as used by the attack that is running.
    pub fn id(&self, prefix: &str) -> String {
        let id = unique_id(prefix);
        self.used.borrow_mut().push(id.clone());
        id
    }

    /// The ids used since the last call (the runner checks each left nothing behind).
    pub fn take_used(&self) -> Vec<String> {
        std::mem::take(&mut *self.used.borrow_mut())
    }

    /// The runtime as `Job` selects it.
    pub fn runtime_for(&self, job: &Job) -> Runtime {
        Runtime::hardened_with_policy(job.policy.clone().unwrap_or_else(|| self.policy.clone()))
    }

    fn ctr_run(&self, job: &Job, id: &str, detach: bool) -> Vec<String> {
        let source = job
            .source
            .clone()
            .unwrap_or_else(|| self.image.reference().to_string());
        let mut argv = Vec::new();
        if job.gate && !detach {
            argv.extend([PROBE_IN_IMAGE.to_string(), "gate".to_string()]);
        }
        argv.extend(job.argv.iter().cloned());
        let mut run = Run::new(source, id)
            .runtime(self.runtime_for(job))
            .flags(job.flags.iter().cloned())
            .cmd(argv);
        if detach {
            run = run.detach();
        }
        run.ctr_args_for(&self.c)
    }

    /// Runs `job` to completion: `ctr run --rm`, released from its gate once containerd
    /// announced the start.
    pub fn run(&self, job: Job) -> Result<Ran, Failed> {
        let id = job.id.clone().unwrap_or_else(|| self.id(job.prefix));
        let mut cmd = self.c.ctr().args(self.ctr_run(&job, &id, false));
        let command = cmd.describe();
        cmd.command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn()?;
        let stdout = pipe_reader(child.stdout.take().expect("piped"));
        let stderr = pipe_reader(child.stderr.take().expect("piped"));
        let mut stdin = child.stdin.take();
        let started = self.release_when_started(&id, &mut child, &mut stdin, job.gate);
        drop(stdin);
        let status = wait_with_deadline(&mut child, RUN_TIMEOUT);
        let collect = |rx: mpsc::Receiver<String>| {
            rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default()
        };
        let (stdout, stderr) = (collect(stdout), collect(stderr));
        let Some(status) = status else {
            return Err(Failed(format!(
                "`ctr run` of {id} did not finish within {RUN_TIMEOUT:?} (killed); stdout {stdout:?}, stderr {stderr:?}"
            )));
        };
        Ok(Ran {
            id,
            out: CommandOutput {
                command,
                status,
                stdout,
                stderr,
            },
            started,
        })
    }

    /// Waits until the task of `id` started (then writes the gate's line) or `ctr` exited.
    fn release_when_started(
        &self,
        id: &str,
        child: &mut Child,
        stdin: &mut Option<std::process::ChildStdin>,
        gate: bool,
    ) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if !self.events.matching("/tasks/start", id).is_empty() {
                if gate {
                    if let Some(pipe) = stdin.as_mut() {
                        let _ = pipe.write_all(b"\n");
                    }
                }
                return true;
            }
            if child.try_wait().ok().flatten().is_some() {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// `ctr run --detach`: returns the id once the task started. The workload must outlive the
    /// caller's use of it; [`Lab::remove`] ends it.
    pub fn start_detached(&self, job: Job) -> Result<String, Failed> {
        let id = job.id.clone().unwrap_or_else(|| self.id(job.prefix));
        self.c
            .ctr()
            .args(self.ctr_run(&job, &id, true))
            .checked()
            .map_err(|e| Failed(format!("starting {id}: {e}")))?;
        Ok(id)
    }

    /// `ctr task exec` in a running container.
    pub fn exec(&self, id: &str, flags: &[&str], argv: &[&str]) -> Result<CommandOutput, Failed> {
        Ok(self.c.exec(id, flags, argv).output()?)
    }

    /// The task's status as `ctr task ls` shows it (`RUNNING`, `STOPPED`), if it exists.
    pub fn task_status(&self, id: &str) -> Option<String> {
        crate::fault::task_status(&self.c, id).ok().flatten()
    }

    /// SIGKILLs a detached task, waits for it to stop, deletes task and container.
    pub fn remove(&self, id: &str) -> Result<(), Failed> {
        Ok(crate::fault::kill_and_remove(
            &self.c,
            id,
            Duration::from_secs(30),
        )?)
    }

    /// The audit lines of container `id` so far.
    pub fn audit_lines(&self, id: &str) -> Vec<Value> {
        fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["container_id"] == id)
            .collect()
    }

    /// Waits for the audit line of `event` (`create`, `exit`, `create-rejected`...) of `id`.
    pub fn audit_event(&self, id: &str, event: &str) -> Result<Value, Failed> {
        poll_until(
            &format!("the audit line {event} of {id}"),
            AUDIT_TIMEOUT,
            || {
                self.audit_lines(id)
                    .into_iter()
                    .find(|v| v["event"] == event)
            },
        )
        .map_err(|e| {
            let seen: Vec<String> = self
                .audit_lines(id)
                .iter()
                .map(|v| v["event"].to_string())
                .collect();
            Failed(format!("{e} (events seen: {})", seen.join(", ")))
        })
    }

    /// The raw audit log (to check that no secret value ever reached it).
    pub fn audit_text(&self) -> String {
        fs::read_to_string(&self.audit).unwrap_or_default()
    }

    pub fn events(&self) -> &Events {
        &self.events
    }

    /// `ctr run --config SPEC ID` with the hardened runtime: a hand-made spec, no image.
    pub fn run_config(&self, prefix: &str, spec: &Value) -> Result<Ran, Failed> {
        let id = self.id(prefix);
        let path = self.dir.join(format!("{id}.json"));
        let text = serde_json::to_vec_pretty(spec).expect("a JSON value serialises");
        fs::write(&path, text).map_err(|e| Failed(format!("{}: {e}", path.display())))?;
        let out = self
            .c
            .ctr()
            .args(["run", "--rm", "--fifo-dir"])
            .arg(self.c.fifo_dir())
            .args(["--runtime", HARDENED_RUNTIME, "--runtime-config-path"])
            .arg(&self.policy)
            .arg("--config")
            .arg(&path)
            .arg(&id)
            .timeout(RUN_TIMEOUT)
            .output()?;
        Ok(Ran {
            id,
            out,
            started: false,
        })
    }

    /// A minimal OCI spec that the default policy accepts (own namespaces, root in the bundle,
    /// the container's own cgroup); attacks add one smuggled field each.
    pub fn base_spec(&self, id_hint: &str) -> Value {
        serde_json::json!({
            "ociVersion": "1.0.2-dev",
            "process": {
                "user": {"uid": 0, "gid": 0},
                "args": [PROBE_IN_IMAGE, "ids"],
                "env": ["PATH=/bin"],
                "cwd": "/"
            },
            "root": {"path": "rootfs"},
            "hostname": id_hint,
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}
            ],
            "linux": {
                "namespaces": [
                    {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}
                ]
            }
        })
    }

    /// Stops containerd and reports whether anything had to be forced.
    pub fn shutdown(self) -> Result<(), Failed> {
        let dir = self.c.dir().to_path_buf();
        drop(self.events);
        let report = self.c.shutdown();
        if !report.is_clean() {
            return Err(Failed(format!("unclean shutdown of the lab: {report}")));
        }
        let leaks = crate::leaks::dir_leaks(&dir);
        if !leaks.is_empty() {
            return Err(Failed(format!("after the lab's shutdown: {leaks}")));
        }
        Ok(())
    }
}

fn wait_with_deadline(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}
