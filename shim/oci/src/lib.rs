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
mod opened;
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

use cli::{Command, Invocation};
use error::Result;
use log::EngineLog;
use opened::Opened;

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
