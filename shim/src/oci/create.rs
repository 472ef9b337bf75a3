//! `create`: the same hardening pipeline as the shim's Create (`crate::prepare`: policy, spec,
//! harden, write, runsc configured, audited), then the guard, which runs `runsc create`.
//!
//! Order: refuse what cannot be honoured (`--systemd-cgroup`, `--preserve-fds`, a taken id)
//! before anything is written; harden and audit; write the state the later calls need; start
//! the guard and wait for its one-line answer; only then write the guard's pid into the
//! engine's `--pid-file`. A failure after the audit line is audited as `create-failed`, and
//! leaves no state, runsc container or cgroup behind.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use super::cli::Global;
use super::engine;
use super::error::{OciError, Result};
use super::guard::{FAILED, READY};
use super::log::EngineLog;
use super::state::{write_pid_file, Record, StateDir};
use super::trail::StateTrail;
use crate::audit::{AuditEvent, AuditRecord};
use crate::bundle;
use crate::policy_source::NODE_POLICY_PATH;
use crate::prepare::{Inputs, Request};
use crate::reaper::Reaper;
use crate::runtime::runsc::RunscFactory;

pub struct CreateArgs<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub preserve_fds: u32,
}

/// Whether systemd runs this host (what `--systemd-cgroup` needs).
fn systemd_running() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

pub async fn run(global: &Global, args: CreateArgs<'_>, log: &EngineLog) -> Result<()> {
    if global.systemd_cgroup {
        return Err(OciError::SystemdCgroup {
            systemd_running: systemd_running(),
        });
    }
    if args.preserve_fds > 0 {
        return Err(OciError::PreserveFds(args.preserve_fds));
    }
    let state = StateDir::new(global.root.as_deref(), args.id)?;
    if state.exists() {
        return Err(OciError::AlreadyExists(args.id.to_string()));
    }
    let bundle = std::fs::canonicalize(args.bundle).map_err(OciError::io("bundle", args.bundle))?;
    // Which engine wrote the spec decides the audit namespace; `Inputs::read` reports a bundle
    // that cannot be read, so a failure here only leaves the engine unknown.
    let engine = bundle::read_spec(&bundle)
        .ok()
        .and_then(|(_, spec)| engine::detect(&spec, args.id, &bundle));
    let namespace = engine::namespace(engine);
    let policy_path = global.policy.as_ref().map(|p| p.display().to_string());
    let mut inputs = Inputs::read(&Request {
        id: args.id,
        namespace,
        bundle: &bundle,
        config_path: policy_path.as_deref(),
        node_policy: Path::new(NODE_POLICY_PATH),
    })?;
    if let Some(engine) = engine {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        inputs.engine = Some(engine::context(
            engine,
            inputs.spec(),
            args.id,
            &bundle,
            &mountinfo,
        ));
    }
    let reaper = Reaper::install_without_subreaper()?;
    let factory = RunscFactory::new(reaper.clone());
    let prepared = inputs.harden(Vec::new(), &factory).await?;
    // Known already: configuring the runtime above asked for them.
    let features = factory.features(&prepared.policy.policy.runsc.path).await?;
    let record = Record {
        id: args.id.to_string(),
        bundle: bundle.clone(),
        engine,
        namespace: namespace.to_string(),
        policy_toml: prepared.policy.policy.to_toml_string(),
        audit_path: prepared.audit.log().path().to_path_buf(),
        subject: prepared.subject.clone(),
        runsc: prepared.runsc.clone(),
        features,
        lifetime: prepared.lifetime,
        cgroups_path: prepared.cgroups_path.clone(),
        annotations: crate::bundle::annotations(&prepared.spec),
        console_socket: args.console_socket.map(Path::to_path_buf),
        log: log.clone(),
        created: humantime::format_rfc3339_nanos(SystemTime::now()).to_string(),
        network_namespace: crate::egress::net::spec_network_namespace(&prepared.spec),
        egress: prepared.egress.clone(),
        policy_name: prepared.policy.source.name(),
    };
    let launched = async {
        state.create(&record)?;
        // `create`'s records so far (in memory): the later calls' processes continue the
        // trail from the state directory.
        StateTrail::open(&record, &state).begin(&prepared.audit.hashes())?;
        let guard_pid = start_guard(&state, &reaper)?;
        state.set_guard_pid(guard_pid)?;
        if let Some(pid_file) = args.pid_file {
            write_pid_file(pid_file, guard_pid)?;
        }
        Ok::<_, OciError>(())
    }
    .await;
    if let Err(e) = launched {
        let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &prepared.subject);
        rec.error = Some(e.to_string());
        // The container's final record: signed over its create record, as the shim's is.
        if let Err(audit) = prepared.audit.seal(&rec) {
            log.warn(&audit.to_string());
        }
        let _ = state.remove();
        bundle::remove_shim_files(&bundle);
        return Err(e);
    }
    Ok(())
}

/// Starts the guard and waits for its answer: the guard's pid once the sandbox exists.
fn start_guard(state: &StateDir, reaper: &Reaper) -> Result<i32> {
    let (read, write) = ready_pipe()?;
    let exe = PathBuf::from("/proc/self/exe");
    let mut cmd = Command::new(&exe);
    // The container's stdio is ours: the guard inherits it and hands it to runsc.
    cmd.arg("guard")
        .arg(state.path())
        .arg(write.as_raw_fd().to_string());
    let pid = reaper.spawn(cmd)?.pid;
    // Nobody waits for it here: once we exit, the engine (a subreaper) inherits the guard. Our
    // copy of the write end must go, or the read below never ends.
    drop(write);
    let mut answer = String::new();
    BufReader::new(std::fs::File::from(read))
        .read_line(&mut answer)
        .map_err(OciError::io("reading the guard's answer", state.path()))?;
    let answer = answer.trim();
    if answer.split(' ').next() == Some(READY) {
        return Ok(pid);
    }
    // The guard has removed what runsc made; it exits on its own.
    Err(OciError::Guard(match answer.strip_prefix(FAILED) {
        Some(reason) => reason.trim().to_string(),
        None => format!("the guard (pid {pid}) exited without creating the sandbox"),
    }))
}

/// A pipe whose write end survives exec (for the guard) and whose read end does not.
fn ready_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), 0) } != 0 {
        return Err(OciError::io("pipe", "ready pipe")(
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: both fds were just made and are owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: fcntl on an fd we own.
    unsafe { libc::fcntl(read.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    Ok((read, write))
}
