//! runsc-hardened: gvisor-hardened as an OCI runtime binary, for engines that take runc's
//! command line rather than a containerd shim (Docker 20.10 through containerd's runc shim,
//! Podman 4.3 through conmon). Registered as runtime `gvisor-hardened`.
//!
//! Every container gets what the shim gives it: the same policy files, the same hardening
//! (`gvisor_hardened_core::prepare`), the same runsc flags, the same audit log, and the same sandbox
//! operations (`gvisor_hardened_core::sandbox`: exit classification, the time limits, host processes by
//! pidfd). What the shim does from its long-lived process, a per-container guard does here
//! (`guard/`, one file per concern; a detached exec has its own, `exec_guard.rs`; both forked as
//! `fork.rs` describes). One file per subcommand; the command line is data (`cli.rs`);
//! per-container state in `state.rs`; the container's runsc client and the cleanup `create`
//! and `delete` share in `runtime.rs`.

pub mod cli;
mod create;
mod delete;
mod egress;
mod engine;
pub mod error;
mod exec;
mod exec_guard;
mod fork;
pub mod guard;
mod kill;
pub mod log;
mod pause;
mod ps;
mod query;
mod runtime;
mod start;
pub mod state;
#[cfg(test)]
mod tests;
mod trail;
mod update;

use std::process::ExitCode;

use cli::{Command, Global, Invocation};
use error::{OciError, Result};
use log::EngineLog;
use state::{Record, StateDir};

use gvisor_hardened_core::reaper::Reaper;

/// What `--version` prints, in runc's shape (Docker parses it for its default runtime).
pub fn version_text() -> String {
    format!(
        "runsc-hardened version {}\ncommit: gvisor-hardened\nspec: 1.0.2-dev\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Runs one invocation (the arguments after the program name); the process's exit code.
pub fn main(args: Vec<String>) -> ExitCode {
    let inv = match cli::parse(args.clone()) {
        Ok(inv) => inv,
        Err(e) => {
            // The log flags may be among what failed to parse (or after it): the engine's log
            // as far as the words name it, and stderr.
            let (path, format) = cli::log_flags_of(&args);
            EngineLog::new(path.as_deref(), format).error(&e.to_string());
            return ExitCode::from(2);
        }
    };
    if inv.command == Command::Version {
        print!("{}", version_text());
        return ExitCode::SUCCESS;
    }
    let log = EngineLog::new(inv.global.log.as_deref(), inv.global.log_format);
    log::install(&log);
    // Before anything is forked: the guard holds credentials and CA keys (core_dumps.rs).
    if let Err(e) = gvisor_hardened_core::core_dumps::disable() {
        log.error(&format!("cannot turn core dumps off: {e}"));
        return ExitCode::FAILURE;
    }
    // The process the engine will wait on (`create`'s guard, a detached `exec`'s) is forked
    // now, while this one has one thread: see `fork.rs`.
    let forking = match &inv.command {
        Command::Create { id, .. } => Some(fork::fork_helper(|_, ready| {
            create::guard_child(&inv.global, id, ready)
        })),
        Command::Exec { detach: true, .. } => Some(fork::fork_helper(|payload, ready| {
            exec_guard::guard_child(&inv, payload, ready)
        })),
        _ => None,
    };
    let forked = match forking.transpose() {
        Ok(Some(fork::Fork::Child(code))) => return ExitCode::from(code),
        Ok(Some(fork::Fork::Parent(helper))) => Some(helper),
        Ok(None) => None,
        Err(e) => {
            log.error(&e.to_string());
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log.error(&format!("cannot start a runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(&inv, &log, forked)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            log.error(&e.to_string());
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(inv: &Invocation, log: &EngineLog, forked: Option<fork::Forked>) -> Result<u8> {
    let g = &inv.global;
    match &inv.command {
        Command::Create {
            id,
            bundle,
            pid_file,
            console_socket,
            preserve_fds,
        } => {
            let args = create::CreateArgs {
                id,
                bundle,
                pid_file: pid_file.as_deref(),
                console_socket: console_socket.as_deref(),
                preserve_fds: *preserve_fds,
            };
            let guard = forked.expect("create forks its guard before the runtime starts");
            create::run(g, args, log, guard).await.map(|()| 0)
        }
        Command::Start { id } => start::run(&Opened::open(g, id).await?).await.map(|()| 0),
        Command::State { id } => query::run(g, id).await.map(|()| 0),
        Command::Kill { id, signal, all } => kill::run(&Opened::open(g, id).await?, *signal, *all)
            .await
            .map(|()| 0),
        Command::Delete { id, force } => delete::run(g, id, *force).await.map(|()| 0),
        Command::Exec {
            id,
            process,
            detach,
            pid_file,
            console_socket,
            tty: _,
            preserve_fds,
        } => {
            let args = exec::ExecArgs {
                process,
                detach: *detach,
                pid_file: pid_file.as_deref(),
                console_socket: console_socket.as_deref(),
                preserve_fds: *preserve_fds,
            };
            // A detached exec's guard, forked, is the subreaper; this call must not reap it.
            // A non-detached exec is its own guard and reaps what runsc leaves.
            let c = if *detach {
                Opened::open_for_exec(g, id).await?
            } else {
                Opened::open(g, id).await?
            };
            exec::run(c, args, forked).await
        }
        Command::Ps { id, json } => ps::run(g, id, *json).map(|()| 0),
        Command::Pause { id } => pause::pause(&Opened::open(g, id).await?).await.map(|()| 0),
        Command::Resume { id } => pause::resume(&Opened::open(g, id).await?).await.map(|()| 0),
        Command::Update { id, resources } => update::run(&Opened::open(g, id).await?, resources)
            .await
            .map(|()| 0),
        Command::Version => unreachable!("handled before the runtime"),
    }
}

/// An existing container: its state, record, policy, and the sandbox core's runtime over a
/// runsc client configured as at create.
pub(crate) struct Opened {
    pub state: StateDir,
    pub record: Record,
    pub policy: policy_injector::Policy,
    /// The sandbox core's seam over the container's runsc.
    pub runtime: std::sync::Arc<dyn gvisor_hardened_core::runtime::SandboxRuntime>,
    /// The sandbox core's seam over the host's cgroups.
    pub host: std::sync::Arc<dyn gvisor_hardened_core::host::Host>,
}

impl Opened {
    async fn open(g: &Global, id: &str) -> Result<Opened> {
        Self::open_with(g, id, Reaper::install()?).await
    }

    /// For exec: `runsc exec --detach` leaves the exec's process behind for the engine to
    /// wait on, so this process must not be a subreaper that would inherit (and reap) it.
    async fn open_for_exec(g: &Global, id: &str) -> Result<Opened> {
        Self::open_with(g, id, Reaper::install_without_subreaper()?).await
    }

    async fn open_with(g: &Global, id: &str, reaper: Reaper) -> Result<Opened> {
        let state = StateDir::new(g.root.as_deref(), id)?;
        Ok(Self::from_state(state, reaper, None)?.0)
    }

    /// The container whose state directory is `state`, as `create` recorded it: its policy and
    /// the runtime over its runsc (which writes the sandbox's pid to `sandbox_pid_file` when
    /// given; `create`'s guard needs it). Also returns the runsc client, for the guard's own
    /// `runsc delete`.
    pub(crate) fn from_state(
        state: StateDir,
        reaper: Reaper,
        sandbox_pid_file: Option<std::path::PathBuf>,
    ) -> Result<(Opened, gvisor_hardened_core::runsc::client::Runsc)> {
        let record = state.record()?;
        let policy = record.policy()?;
        let runsc = runtime::runsc_for(&record, &policy, &reaper)?;
        // Execs without a terminal as one attached runsc process, as in the shim.
        let mut runtime =
            gvisor_hardened_core::runtime::runsc::RunscRuntime::new(runsc.clone(), reaper)
                .with_attached_exec();
        if let Some(path) = sandbox_pid_file {
            runtime = runtime.with_pid_file(path);
        }
        let c = Opened {
            state,
            record,
            policy,
            runtime: std::sync::Arc::new(runtime),
            host: std::sync::Arc::new(gvisor_hardened_core::host::linux::LinuxHost),
        };
        Ok((c, runsc))
    }

    /// The container's trail: its records, in the shared log, covered by `delete`'s signature.
    fn audit(&self) -> trail::StateTrail {
        trail::StateTrail::open(&self.record, &self.state)
    }

    /// Audits best effort: the call's own outcome is what the engine needs.
    fn audit_best_effort(&self, rec: &gvisor_hardened_core::audit::AuditRecord<'_>) {
        if let Err(e) = self.audit().append(rec) {
            self.record
                .log
                .warn(&format!("container {}: {e}", self.record.id));
        }
    }
}

fn not_running(e: gvisor_hardened_core::runsc::error::RunscError, id: &str) -> OciError {
    if e.is_gone() {
        OciError::NotRunning(id.to_string())
    } else {
        OciError::Runsc(e)
    }
}
