//! The guard's steps of the core's launch sequence (`gvisor_hardened_core::sandbox::launch`,
//! the shim's too): the init's streams (through the sandbox core's copy when bounded or
//! watched for idleness; a terminal relayed under a budget, `terminal.rs`), `runsc create` as
//! the guard's child, the sandbox process watched and its cgroups found. What the launch
//! leaves the guard is taken with [`GuardLaunch::launched`].

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use policy_injector::Policy;

use super::hands::Hands;
use super::stdio;
use crate::error::{OciError, Result};
use crate::state::{proc_start_time, Record, StateDir};
use gvisor_hardened_core::host::{Host, SandboxCgroups};
use gvisor_hardened_core::runtime::{CreateCall, ExitWatch, SandboxRuntime};
use gvisor_hardened_core::sandbox::host_process::HostProcess;
use gvisor_hardened_core::sandbox::launch::LaunchSteps;

pub(super) struct GuardLaunch<'a> {
    pub state: &'a StateDir,
    pub record: &'a Record,
    pub policy: &'a Policy,
    pub runtime: &'a dyn SandboxRuntime,
    pub host: &'a dyn Host,
    pub hands: &'a dyn Hands,
    /// Filled by the launch, taken by [`GuardLaunch::launched`].
    pub streams: Mutex<Option<stdio::Guarded>>,
    pub watched: Mutex<Option<Watched>>,
}

pub(super) struct Watched {
    process: Option<Arc<HostProcess>>,
    exit: ExitWatch,
    probe: Option<Arc<dyn SandboxCgroups>>,
}

/// What a launch leaves the guard.
pub(super) struct Launched {
    pub streams: stdio::Guarded,
    pub process: Option<Arc<HostProcess>>,
    pub exit: ExitWatch,
    pub probe: Option<Arc<dyn SandboxCgroups>>,
}

impl<'a> GuardLaunch<'a> {
    /// After a launch that succeeded: its streams, process, exit watch and cgroups.
    pub(super) fn launched(self) -> Result<Launched> {
        let streams = self.streams.into_inner().unwrap_or_else(|e| e.into_inner());
        let watched = self.watched.into_inner().unwrap_or_else(|e| e.into_inner());
        match (streams, watched) {
            (Some(streams), Some(w)) => Ok(Launched {
                streams,
                process: w.process,
                exit: w.exit,
                probe: w.probe,
            }),
            _ => Err(OciError::Invalid {
                what: "the launch",
                reason: "it succeeded without booting the sandbox".into(),
            }),
        }
    }
}

#[async_trait]
impl LaunchSteps for GuardLaunch<'_> {
    type Error = OciError;

    fn runtime(&self) -> &dyn SandboxRuntime {
        self.runtime
    }

    fn host(&self) -> &dyn Host {
        self.host
    }

    async fn boot(&self) -> Result<u32> {
        let record = self.record;
        let budget = stdio::budget(
            self.state,
            self.policy.output.max_bytes.map(|b| b.0),
            record.lifetime.idle_timeout.is_some(),
            true,
        )?;
        // A terminal goes to runsc's console socket, not through the streams: under a budget
        // the guard relays it (`terminal.rs`).
        let (mut streams, io, console_socket) =
            stdio::Guarded::open(self.hands, budget, record.console_socket.as_deref())?;
        let created = self
            .runtime
            .create(CreateCall {
                id: &record.id,
                bundle: &record.bundle,
                console_socket: console_socket.as_deref(),
                stdio: io,
            })
            .await;
        // The container's streams belong to the sandbox now.
        self.hands.let_go_of_stdio();
        let pid = created?;
        streams.attach(record.console_socket.as_deref())?;
        *self.streams.lock().unwrap_or_else(|e| e.into_inner()) = Some(streams);
        // With its start time, for `kill`'s last resort from another process.
        if let Err(e) = self
            .state
            .set_sandbox_process(pid as i32, proc_start_time(pid as i32))
        {
            log::warn!("container {}: {e}", record.id);
        }
        Ok(pid)
    }

    fn watch(&self, pid: u32) -> Result<Option<Arc<dyn SandboxCgroups>>> {
        // Before the watch: until the reaper has seen its exit, the pid is our child's.
        let process = self.runtime.host_process(pid);
        let exit = self.runtime.watch(pid)?;
        let probe = match self.host.sandbox_cgroups(pid) {
            Ok(cg) => Some(cg),
            Err(e) => {
                log::warn!(
                    "container {}: sandbox cgroups: {e}; OOM and process-limit exits will not be told apart",
                    self.record.id
                );
                None
            }
        };
        *self.watched.lock().unwrap_or_else(|e| e.into_inner()) = Some(Watched {
            process,
            exit,
            probe: probe.clone(),
        });
        Ok(probe)
    }

    /// Nothing of the guard's own: its streams go with it, and `create`, which hears the
    /// failure on the ready pipe, removes the state and writes `create-failed`.
    async fn undo(&self, _error: &OciError) {}
}
