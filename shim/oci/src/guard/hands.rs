//! What a guard does to its own process and the host besides driving the sandbox runtime:
//! it hands the engine's stdio to runsc and lets go of it (an exec guard too), moves itself into the sandbox's
//! cgroups and out again, and leaves a `runsc delete` behind. [`HostHands`] does it for real;
//! the fake-world tests put a recorder in its place, so the guard's lifecycle runs without
//! root, runsc or cgroups.

use std::path::PathBuf;

use super::stdio::{EngineStdio, HostStdio};
use super::{cgroups, runsc_delete};
use crate::error::Result;
use crate::state::StateDir;
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::runsc::client::{ProcessIo, Runsc};

pub(crate) trait Hands: EngineStdio + Send + Sync {
    /// Moves the guard into the sandbox's cgroups; the directories it came from.
    fn join(&self, cgroups: &dyn SandboxCgroups) -> Vec<PathBuf>;
    fn leave(&self, home: &[PathBuf]);
    /// Starts `runsc delete` of container `id` from the `home` cgroups, not waited for.
    fn start_runsc_delete(&self, id: &str, state: &StateDir, home: &[PathBuf]);
}

/// The guard's own process and the host, with the container's runsc for its delete.
pub(crate) struct HostHands {
    pub runsc: Runsc,
}

impl EngineStdio for HostHands {
    fn stdio(&self) -> Result<ProcessIo> {
        HostStdio.stdio()
    }

    fn let_go_of_stdio(&self) {
        HostStdio.let_go_of_stdio()
    }
}

impl Hands for HostHands {
    fn join(&self, cgroups: &dyn SandboxCgroups) -> Vec<PathBuf> {
        cgroups.location().map(cgroups::join).unwrap_or_default()
    }

    fn leave(&self, home: &[PathBuf]) {
        cgroups::leave(home)
    }

    fn start_runsc_delete(&self, id: &str, state: &StateDir, home: &[PathBuf]) {
        runsc_delete::start(&self.runsc, id, state, home)
    }
}
