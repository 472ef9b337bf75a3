//! The one release sequence of a deleted container, for both front ends (the shim's Delete
//! and teardown; runsc-hardened's `delete`). Every step runs even when an earlier one failed;
//! what failed is reported with the rest, for the `delete` record and the caller.
//!
//! In order: what must end inside the sandbox's trail before it goes (its egress, its timers);
//! runsc's container (unless the front end saw it deleted already); what the front end holds
//! (a warm pool's claim, the streams, the rootfs mount); the cgroups runsc left (retried while
//! the kernel still refuses, `launch::remove_cgroups`); the bundle (the workspace concluded if
//! the exit did not, then our files, `bundle::release_after_delete`).

use std::path::PathBuf;

use async_trait::async_trait;

use super::launch::remove_cgroups;
use crate::bundle::{self, Files};
use crate::cgroup::CgroupError;
use crate::host::Host;
use crate::runsc::error::RunscError;
use crate::runtime::SandboxRuntime;
use crate::workspace::WorkspaceReport;

/// What is released.
pub struct ReleasePlan<'a> {
    pub id: &'a str,
    /// The id runsc knows the sandbox by (a claimed warm sandbox keeps the pool's).
    pub runsc_id: &'a str,
    pub cgroups_path: &'a str,
    pub bundle: PathBuf,
    /// Whose files the bundle holds besides the configs.
    pub files: Files,
}

/// A step that failed; the others ran.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseProblem {
    #[error(transparent)]
    Runsc(#[from] RunscError),
    /// The container's runtime could not be had (the message says why).
    #[error("{0}")]
    NoRuntime(String),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// Another step (the message says which: the front end's own, or the workspace's).
    #[error("{0}")]
    Step(String),
}

/// What the release did.
#[derive(Debug, Default)]
pub struct Released {
    /// In the order the steps ran.
    pub problems: Vec<ReleaseProblem>,
    /// The workspace's conclusion, when this release made it.
    pub workspace: Option<WorkspaceReport>,
}

impl Released {
    /// All the problems, for a record's `error`.
    pub fn summary(&self) -> Option<String> {
        (!self.problems.is_empty()).then(|| {
            self.problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// What a front end does at each step of [`release`].
#[async_trait]
pub trait ReleaseSteps: Send + Sync {
    /// The container's runtime, or why it cannot be had.
    fn runtime(&self) -> Result<&dyn SandboxRuntime, String>;
    fn host(&self) -> &dyn Host;
    /// What ends before the sandbox goes, inside its trail (its egress, its timers).
    async fn before_runsc(&self) {}
    /// Whether runsc's container is known to be gone already (runsc-hardened's guard deletes
    /// it at the exit).
    fn runsc_deleted(&self) -> bool {
        false
    }
    /// What the front end holds of the container: a warm pool's claim, the streams, the
    /// rootfs mount.
    async fn let_go(&self, problems: &mut Vec<ReleaseProblem>);
}

/// Releases `plan` through `steps`.
pub async fn release<S: ReleaseSteps + ?Sized>(steps: &S, plan: ReleasePlan<'_>) -> Released {
    let mut problems = Vec::new();
    steps.before_runsc().await;
    if !steps.runsc_deleted() {
        match steps.runtime() {
            Ok(runtime) => match runtime.delete(plan.runsc_id).await {
                Err(e) if !e.is_gone() => problems.push(ReleaseProblem::Runsc(e)),
                _ => {}
            },
            Err(why) => problems.push(ReleaseProblem::NoRuntime(why)),
        }
    }
    steps.let_go(&mut problems).await;
    if let Err(e) = remove_cgroups(steps.host(), plan.cgroups_path, plan.id).await {
        problems.push(e.into());
    }
    let bundle = plan.bundle;
    let files = plan.files;
    // A walk of the workspace when the exit did not conclude it: off the async threads.
    let workspace =
        tokio::task::spawn_blocking(move || bundle::release_after_delete(&bundle, files))
            .await
            .unwrap_or_else(|e| {
                problems.push(ReleaseProblem::Step(format!(
                    "concluding the workspace: {e}"
                )));
                None
            });
    Released {
        problems,
        workspace,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::fake::{Fake, Step};
    use crate::runtime::{CreateCall, RunscStdio};

    struct Steps {
        fake: Fake,
        runtime_missing: bool,
        deleted_already: bool,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl ReleaseSteps for Steps {
        fn runtime(&self) -> Result<&dyn SandboxRuntime, String> {
            if self.runtime_missing {
                return Err("the policy of c1 cannot be read".into());
            }
            Ok(&self.fake)
        }
        fn host(&self) -> &dyn Host {
            &self.fake
        }
        async fn before_runsc(&self) {
            self.seen.lock().unwrap().push("before runsc".into());
        }
        fn runsc_deleted(&self) -> bool {
            self.deleted_already
        }
        async fn let_go(&self, problems: &mut Vec<ReleaseProblem>) {
            self.seen.lock().unwrap().push("let go".into());
            problems.push(ReleaseProblem::Step("unmounting: busy".into()));
        }
    }

    fn world() -> (Steps, tempfile::TempDir) {
        let fake = Fake::default();
        let bundle = tempfile::tempdir().unwrap();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(fake.create(CreateCall {
                id: "c1",
                bundle: bundle.path(),
                console_socket: None,
                stdio: RunscStdio::default(),
            }))
            .unwrap();
        let steps = Steps {
            fake,
            runtime_missing: false,
            deleted_already: false,
            seen: Mutex::new(Vec::new()),
        };
        (steps, bundle)
    }

    fn run(steps: &Steps, bundle: &std::path::Path) -> Released {
        std::fs::write(bundle.join(bundle::BUNDLE_STATE), b"{}").unwrap();
        let plan = ReleasePlan {
            id: "c1",
            runsc_id: "c1",
            cgroups_path: "/gvh/c1",
            bundle: bundle.to_path_buf(),
            files: Files::Engine,
        };
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
            .block_on(release(steps, plan))
    }

    #[test]
    fn every_step_runs_after_a_failed_one_and_each_failure_is_reported() {
        let (steps, bundle) = world();
        steps.fake.fail_next(Step::Delete);
        let released = run(&steps, bundle.path());
        assert_eq!(*steps.seen.lock().unwrap(), ["before runsc", "let go"]);
        let calls = steps.fake.calls();
        assert_eq!(calls[1..], ["delete c1", "remove-cgroups c1"]);
        let summary = released.summary().unwrap();
        assert!(summary.contains("delete"), "{summary}");
        assert!(summary.ends_with("unmounting: busy"), "{summary}");
        // Our files went anyway.
        assert!(!bundle.path().join(bundle::BUNDLE_STATE).exists());
    }

    #[test]
    fn a_runsc_container_deleted_already_is_not_deleted_again() {
        let (mut steps, bundle) = world();
        steps.deleted_already = true;
        run(&steps, bundle.path());
        assert!(steps.fake.calls_of("delete").is_empty());
        assert_eq!(steps.fake.calls_of("remove-cgroups"), ["remove-cgroups c1"]);
    }

    #[test]
    fn a_runtime_that_cannot_be_had_is_a_problem_and_the_rest_still_runs() {
        let (mut steps, bundle) = world();
        steps.runtime_missing = true;
        let released = run(&steps, bundle.path());
        assert!(matches!(
            released.problems.first(),
            Some(ReleaseProblem::NoRuntime(_))
        ));
        assert_eq!(steps.fake.calls_of("remove-cgroups"), ["remove-cgroups c1"]);
    }
}
