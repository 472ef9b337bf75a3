//! The one launch sequence, after `crate::prepare` has hardened and recorded the spec: both
//! front ends boot a sandbox (or a pod's later container) through [`launch`], in the process
//! that will watch it (the shim; runsc-hardened's guard). The order is the core's; what a
//! front end does to boot (its streams, the rootfs, `runsc create` or a warm sandbox's claim)
//! and what it owns to undo sit behind [`LaunchSteps`].
//!
//! In order: refuse a cgroup that exists already (runsc would join it as it is, without the
//! policy's limits); the sandbox's egress credentials (its CA, and the CA bundle its spec
//! binds, before runsc needs the file); boot; watch the sandbox process and find its cgroups;
//! refuse an idle timeout whose CPU time cannot be read. Any failure undoes what was done, in
//! reverse: runsc's container, what runsc cannot stop, the cgroups (never one that was refused
//! for existing before us), the credentials, then the front end's own part.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::lifetime;
use crate::cgroup::CgroupError;
use crate::egress::credentials::{self, CredentialError};
use crate::host::{Host, SandboxCgroups};
use crate::runtime::SandboxRuntime;
use policy_injector::EgressPlan;

/// After a SIGKILL the kernel refuses rmdir of a cgroup for a moment (threads still exiting).
const CGROUP_RMDIR_WAIT: Duration = Duration::from_secs(5);
const CGROUP_RMDIR_POLL: Duration = Duration::from_millis(2);

/// What a launch makes, from the prepared spec.
pub struct LaunchPlan<'a> {
    pub id: &'a str,
    /// The id runsc knows the sandbox by (a claimed warm sandbox keeps the pool's).
    pub runsc_id: &'a str,
    pub namespace: &'a str,
    pub cgroups_path: &'a str,
    /// A sandbox of its own (`false`: a container joining its pod's sandbox, which has the
    /// cgroups, the egress and the credentials).
    pub makes_sandbox: bool,
    pub egress: Option<&'a EgressPlan>,
    pub idle_timeout: Option<Duration>,
}

/// The launch's own refusals, in each front end's error type.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Credentials(#[from] CredentialError),
    /// The idle timeout could not read the sandbox's CPU time (the message says why).
    #[error("{0}")]
    IdleSampling(String),
}

/// What a front end does at each step of [`launch`].
#[async_trait]
pub trait LaunchSteps: Send + Sync {
    type Error: From<LaunchError> + std::fmt::Display + Send + Sync;

    fn runtime(&self) -> &dyn SandboxRuntime;
    fn host(&self) -> &dyn Host;
    /// The front end's host work (streams, the rootfs), `runsc create` (or a warm sandbox's
    /// claim), and the streams attached. Returns the sandbox's pid.
    async fn boot(&self) -> Result<u32, Self::Error>;
    /// Watches the sandbox's process for its exit (the front end keeps the watch) and finds
    /// its cgroups, which tell an OOM kill from a plain kill and which the idle timeout reads.
    fn watch(&self, pid: u32) -> Result<Option<Arc<dyn SandboxCgroups>>, Self::Error>;
    /// What runsc cannot stop (a claimed warm sandbox, not our child): after runsc's delete,
    /// or at once when the launch was refused before anything booted.
    async fn kill_leftovers(&self) {}
    /// The front end's own part of the undo (streams, mounts, files, the failure's record).
    async fn undo(&self, error: &Self::Error);
}

/// Launches `plan` through `steps`. Returns the sandbox's pid; on failure nothing it made is
/// left behind.
pub async fn launch<S: LaunchSteps + ?Sized>(
    steps: &S,
    plan: &LaunchPlan<'_>,
) -> Result<u32, S::Error> {
    if plan.makes_sandbox {
        if let Err(e) = steps.host().ensure_no_cgroups(plan.cgroups_path, plan.id) {
            // Not ours to remove: the cgroup existed before us. Nothing booted, but a sandbox
            // the front end holds for this launch must still go.
            let e = S::Error::from(LaunchError::Cgroup(e));
            steps.kill_leftovers().await;
            steps.undo(&e).await;
            return Err(e);
        }
    }
    let launched = async {
        if plan.makes_sandbox {
            credentials::prepare_sandbox(plan.egress, plan.namespace, plan.id)
                .map_err(LaunchError::from)?;
        }
        let pid = steps.boot().await?;
        let cgroups = steps.watch(pid)?;
        lifetime::check_idle_sampling(plan.idle_timeout, cgroups.as_deref())
            .map_err(LaunchError::IdleSampling)?;
        Ok::<_, S::Error>(pid)
    }
    .await;
    if let Err(e) = &launched {
        undo(steps, plan).await;
        steps.undo(e).await;
    }
    launched
}

/// runsc's container, what runsc cannot stop, the cgroups, the credentials.
async fn undo<S: LaunchSteps + ?Sized>(steps: &S, plan: &LaunchPlan<'_>) {
    if let Err(e) = steps.runtime().delete(plan.runsc_id).await {
        if !e.is_gone() {
            log::warn!("container {}: cleanup delete: {e}", plan.id);
        }
    }
    steps.kill_leftovers().await;
    if let Err(e) = remove_cgroups(steps.host(), plan.cgroups_path, plan.id).await {
        log::error!("container {}: {e}", plan.id);
    }
    if plan.makes_sandbox {
        credentials::forget_sandbox(plan.namespace, plan.id);
    }
}

/// Removes the sandbox's cgroups runsc left, retrying while the kernel still refuses (threads
/// of a killed sandbox exiting), at most [`CGROUP_RMDIR_WAIT`].
pub async fn remove_cgroups(
    host: &dyn Host,
    cgroups_path: &str,
    id: &str,
) -> Result<(), CgroupError> {
    let deadline = tokio::time::Instant::now() + CGROUP_RMDIR_WAIT;
    loop {
        match host.remove_cgroups(cgroups_path, id) {
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(CGROUP_RMDIR_POLL).await
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Mutex;

    use super::*;
    use crate::fake::{Fake, Step};
    use crate::runtime::{CreateCall, ExitWatch, RunscStdio};

    /// A front end over the fake world: boots with `runsc create`, keeps the watch, and
    /// writes down its own undo.
    struct Steps {
        fake: Fake,
        exit: Mutex<Option<ExitWatch>>,
        undone: Mutex<Vec<String>>,
    }

    impl Steps {
        fn new() -> Steps {
            Steps {
                fake: Fake::default(),
                exit: Mutex::new(None),
                undone: Mutex::new(Vec::new()),
            }
        }
    }

    #[async_trait]
    impl LaunchSteps for Steps {
        type Error = String;

        fn runtime(&self) -> &dyn SandboxRuntime {
            &self.fake
        }
        fn host(&self) -> &dyn Host {
            &self.fake
        }
        async fn boot(&self) -> Result<u32, String> {
            self.fake
                .create(CreateCall {
                    id: "c1",
                    bundle: Path::new("/nonexistent/bundle"),
                    console_socket: None,
                    stdio: RunscStdio::default(),
                })
                .await
                .map_err(|e| e.to_string())
        }
        fn watch(&self, pid: u32) -> Result<Option<Arc<dyn SandboxCgroups>>, String> {
            let exit = self.fake.watch(pid).map_err(|e| e.to_string())?;
            *self.exit.lock().unwrap() = Some(exit);
            Ok(self.fake.sandbox_cgroups(pid).ok())
        }
        async fn kill_leftovers(&self) {
            self.undone.lock().unwrap().push("leftovers killed".into());
        }
        async fn undo(&self, error: &String) {
            self.undone.lock().unwrap().push(error.clone());
        }
    }

    impl From<LaunchError> for String {
        fn from(e: LaunchError) -> String {
            e.to_string()
        }
    }

    fn plan(idle_timeout: Option<Duration>) -> LaunchPlan<'static> {
        LaunchPlan {
            id: "c1",
            runsc_id: "c1",
            namespace: "default",
            cgroups_path: "/gvh/c1",
            makes_sandbox: true,
            egress: None,
            idle_timeout,
        }
    }

    fn run(steps: &Steps, plan: &LaunchPlan<'_>) -> Result<u32, String> {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(launch(steps, plan))
    }

    #[test]
    fn a_launch_creates_the_sandbox_and_keeps_its_watch() {
        let steps = Steps::new();
        let pid = run(&steps, &plan(None)).unwrap();
        assert!(pid > 0);
        assert_eq!(steps.fake.calls(), ["create c1"]);
        assert!(steps.exit.lock().unwrap().is_some());
        assert!(steps.undone.lock().unwrap().is_empty());
    }

    #[test]
    fn a_cgroup_that_existed_before_is_refused_and_never_removed() {
        let steps = Steps::new();
        steps.fake.add_foreign_cgroup("c1");
        let err = run(&steps, &plan(None)).unwrap_err();
        assert!(err.contains("/gvh/c1"), "{err}");
        // Nothing booted, nothing of runsc's deleted, and the cgroup is not ours to remove; a
        // sandbox the front end holds for the launch (a warm claim) goes all the same.
        assert!(steps.fake.calls().is_empty(), "{:?}", steps.fake.calls());
        assert_eq!(
            *steps.undone.lock().unwrap(),
            ["leftovers killed".into(), err]
        );
    }

    #[test]
    fn a_failed_runsc_create_is_undone_runsc_first_then_the_cgroups_then_the_front_end() {
        let steps = Steps::new();
        steps.fake.fail_next(Step::Create);
        let err = run(&steps, &plan(None)).unwrap_err();
        assert_eq!(
            steps.fake.calls(),
            ["create c1", "delete c1", "remove-cgroups c1"]
        );
        assert_eq!(
            *steps.undone.lock().unwrap(),
            ["leftovers killed".into(), err]
        );
    }

    #[test]
    fn an_idle_timeout_that_cannot_read_the_cpu_time_stops_the_launch_and_removes_the_sandbox() {
        let steps = Steps::new();
        steps.fake.fail_always(Step::ReadCpu);
        let err = run(&steps, &plan(Some(Duration::from_secs(30)))).unwrap_err();
        assert!(err.contains("idle timeout"), "{err}");
        assert_eq!(
            steps.fake.calls(),
            ["create c1", "delete c1", "remove-cgroups c1"]
        );
        assert!(
            steps.fake.leftovers().is_empty(),
            "{:?}",
            steps.fake.leftovers()
        );
    }
}
