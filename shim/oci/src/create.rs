//! `create`: the same hardening pipeline as the shim's Create (`gvisor_hardened_core::prepare`: policy, spec,
//! harden, write, runsc configured, audited), then the guard, which runs `runsc create`.
//!
//! Order: fork the guard, which waits (`fork.rs`); refuse what cannot be honoured
//! (`--systemd-cgroup`, `--preserve-fds`, a taken id) before anything is written; harden and
//! audit; write the state the later calls need; tell the guard to go and wait for its one-line
//! answer; only then write the guard's pid into the engine's `--pid-file`. A failure after the
//! audit line is audited as `create-failed`, and leaves no state, runsc container or cgroup
//! behind.

use std::fs::File;
use std::path::Path;
use std::time::SystemTime;

use super::cli::Global;
use super::engine;
use super::error::{OciError, Result};
use super::fork::Forked;
use super::log::EngineLog;
use super::state::{proc_start_time, write_pid_file, Record, StateDir};
use super::trail::StateTrail;
use super::{guard, runtime};
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord};
use gvisor_hardened_core::bundle;
use gvisor_hardened_core::host::linux::LinuxHost;
use gvisor_hardened_core::policy_source::NODE_POLICY_PATH;
use gvisor_hardened_core::prepare::{Inputs, Request};
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runtime::runsc::{RunscFactory, RunscRuntime};

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

pub async fn run(
    global: &Global,
    args: CreateArgs<'_>,
    log: &EngineLog,
    mut guard: Forked,
) -> Result<()> {
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
        annotations: gvisor_hardened_core::bundle::annotations(&prepared.spec),
        memory_at_create: prepared.memory_limit(),
        console_socket: args.console_socket.map(Path::to_path_buf),
        log: log.clone(),
        created: humantime::format_rfc3339_nanos(SystemTime::now()).to_string(),
        network_namespace: gvisor_hardened_core::egress::net::spec_network_namespace(
            &prepared.spec,
        ),
        egress: prepared.egress.clone(),
        policy_name: prepared.policy.source.name(),
        writable_binds: gvisor_hardened_core::artifacts::writable_binds(&prepared.spec),
        runsc_binary: gvisor_hardened_core::runsc::feature_cache::Identity::of(
            &prepared.policy.policy.runsc.path,
        )
        .map(|id| id.path),
        idle_threshold: gvisor_hardened_core::idle::IdleThreshold::of_spec(&prepared.spec),
    };
    // The guard's pid once it has made the sandbox: a failure after that must end both.
    let running = std::cell::Cell::new(None);
    let guard_pid = guard.pid();
    let launched = async {
        state.create(&record)?;
        // `create`'s records so far (in memory): the later calls' processes continue the
        // trail from the state directory.
        StateTrail::open(&record, &state).begin(&prepared.audit.hashes())?;
        guard.go("", state.path())?;
        running.set(Some(guard_pid));
        state.set_guard(guard_pid, proc_start_time(guard_pid))?;
        if let Some(pid_file) = args.pid_file {
            write_pid_file(pid_file, guard_pid)?;
        }
        Ok::<_, OciError>(())
    }
    .await;
    if let Err(e) = launched {
        if running.get().is_some() {
            // Through the pidfd taken at the fork, and waited for: the engine that sees this
            // create fail must find no guard left.
            guard.kill();
            if let Ok(runsc) = runtime::runsc_for(&record, &prepared.policy.policy, &reaper) {
                let runsc = RunscRuntime::new(runsc, reaper.clone());
                runtime::undo(&runsc, &LinuxHost, &record).await;
            }
        }
        let _ = state.remove();
        bundle::release_after_failed_create(&bundle, bundle::Files::Engine);
        let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &prepared.subject);
        rec.error = Some(e.to_string());
        // The container's final record: signed over its create record, as the shim's is.
        if let Err(audit) = prepared.audit.seal(&rec) {
            log.warn(&audit.to_string());
        }
        return Err(e);
    }
    Ok(())
}

/// The guard's side of `create`'s fork (`fork::fork_helper`), once told to go: the guard for
/// container `id`. It shows up as `runsc-hardened guard STATE_DIR`.
pub fn guard_child(global: &Global, id: &str, ready: File) -> u8 {
    match StateDir::new(global.root.as_deref(), id) {
        Ok(state) => guard::main(state.path(), ready),
        Err(_) => 1,
    }
}
