//! The lifecycle through the shim's task entry points, on the fake runtime and host: no root, no
//! runsc. Each test is named after the behaviour it proves; every one also checks that what it
//! created is gone at the end (`Bed::assert_clean`).

use std::path::PathBuf;
use std::sync::Arc;

pub use containerd_shim_protos::api::{CreateTaskRequest, ExecProcessRequest};
pub use containerd_shim_protos::protobuf::well_known_types::any::Any;
pub use containerd_shim_protos::ttrpc::Code;
use containerd_shim_protos::types::mount::Mount;
pub use serde_json::{json, Value};

pub use crate::error::ShimError;
use crate::fake::RecordingSink;
use crate::service::Shim;
use gvisor_hardened_core::fake::Fake;
pub use gvisor_hardened_core::reaper::ExitStatus;

mod create;
mod enforcement;
mod evidence;
mod exec;
mod lifecycle;
mod pods;
mod resources;

const SPEC: &str = include_str!("../../../../../policy-injector/tests/fixtures/ctr-plain.json");
pub const SIGTERM: u32 = libc::SIGTERM as u32;
pub const SIGKILL: u32 = libc::SIGKILL as u32;

pub struct Bed {
    dir: tempfile::TempDir,
    pub fake: Fake,
    pub events: Arc<RecordingSink>,
    pub records: Arc<crate::fake::RecordingRecords>,
    pub shim: Shim,
}

impl Bed {
    pub fn new() -> Bed {
        Self::with_policy("")
    }

    /// A shim whose node policy is the default plus `extra` TOML, its audit log in a temp dir.
    pub fn with_policy(extra: &str) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        // The audit log goes to the temp dir, under `extra`'s own [audit] table if it has one.
        let audit = format!("path = \"{}\"", dir.path().join("audit.jsonl").display());
        let text = if extra.contains("[audit]") {
            extra.replacen("[audit]", &format!("[audit]\n{audit}"), 1)
        } else {
            format!("{extra}\n[audit]\n{audit}\n")
        };
        std::fs::write(&policy, text).unwrap();
        let fake = Fake::default();
        let events = Arc::new(RecordingSink::default());
        let records = Arc::new(crate::fake::RecordingRecords::default());
        let shim = Shim::new(crate::fake::env(
            &fake,
            dir.path(),
            policy,
            events.clone(),
            records.clone(),
        ));
        Bed {
            dir,
            fake,
            events,
            records,
            shim,
        }
    }

    pub fn bundle(&self, id: &str) -> PathBuf {
        self.dir.path().join("bundles").join(id)
    }

    /// A bundle with a real ctr spec for `id`, with `annotations` added.
    pub fn request(&self, id: &str, annotations: &[(&str, &str)]) -> CreateTaskRequest {
        let bundle = self.bundle(id);
        std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
        let mut spec: Value = serde_json::from_str(SPEC).unwrap();
        spec["linux"]["cgroupsPath"] = json!(format!("/test/{id}"));
        for (k, v) in annotations {
            spec["annotations"][*k] = json!(v);
        }
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let mut mount = Mount::new();
        mount.type_ = "overlay".into();
        mount.source = "overlay".into();
        let mut req = CreateTaskRequest::new();
        req.id = id.into();
        req.bundle = bundle.display().to_string();
        req.rootfs = vec![mount];
        req
    }

    pub async fn create(&self, id: &str) {
        self.shim.create(self.request(id, &[])).await.unwrap();
    }

    pub async fn running(&self, id: &str) {
        self.create(id).await;
        self.shim.start(id, "").await.unwrap();
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    /// The audit events recorded for container `id`, in order.
    pub fn audit(&self, id: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["container_id"] == id)
            .collect()
    }

    pub fn audit_events(&self, id: &str) -> Vec<String> {
        self.audit(id)
            .iter()
            .map(|r| r["event"].as_str().unwrap().to_string())
            .collect()
    }

    pub fn audit_record(&self, id: &str, event: &str) -> Value {
        self.audit(id)
            .into_iter()
            .find(|r| r["event"] == event)
            .unwrap_or_else(|| panic!("no {event} record for {id}: {:?}", self.audit(id)))
    }

    pub async fn exit_status(&self, id: &str) -> u32 {
        self.shim.wait(id, "").await.unwrap().exit_status
    }

    /// Starts `id`, whose workload ignores SIGTERM, and checks that the runtime stopped it:
    /// SIGTERM, then SIGKILL after the grace period, the exit (137) exactly `after` from the
    /// start (paused time), audited with `exit_cause` `cause` after an `event` record. Then
    /// deletes it and checks that nothing is left.
    pub async fn assert_stopped_with_sigterm_then_sigkill(
        &self,
        id: &str,
        after: std::time::Duration,
        (cause, timed_out, event): (&str, bool, &str),
    ) {
        self.fake.ignore_sigterm();
        let started = tokio::time::Instant::now();
        self.running(id).await;
        assert_eq!(self.exit_status(id).await, 137);
        assert_eq!(started.elapsed(), after);
        assert_eq!(
            self.fake.calls_of("kill"),
            [
                format!("kill {id} {SIGTERM} all"),
                format!("kill {id} {SIGKILL} all")
            ]
        );
        let exit = self.audit_record(id, "exit");
        assert_eq!(
            (exit["exit_cause"].as_str(), exit["timed_out"].as_bool()),
            (Some(cause), Some(timed_out))
        );
        assert_eq!(self.audit_events(id), ["create", "start", event, "exit"]);
        self.shim.delete(id, "").await.unwrap();
        self.assert_clean();
    }

    /// The end of most tests: SIGKILL to every process of `id`, its exit, its delete, and
    /// nothing left anywhere.
    pub async fn kill_delete_and_check(&self, id: &str) {
        self.shim.kill(id, "", SIGKILL, true).await.unwrap();
        self.exit_status(id).await;
        self.shim.delete(id, "").await.unwrap();
        self.assert_clean();
    }

    /// Nothing of any container is left in runsc, the process table, the mounts or the cgroups,
    /// and the shim's own files are gone from the bundles.
    pub fn assert_clean(&self) {
        assert_eq!(self.fake.leftovers(), Vec::<String>::new());
        for entry in std::fs::read_dir(self.dir.path().join("bundles")).unwrap() {
            let bundle = entry.unwrap().path();
            for name in [
                gvisor_hardened_core::bundle::BUNDLE_STATE,
                gvisor_hardened_core::bundle::INIT_PID_FILE,
            ] {
                assert!(
                    !bundle.join(name).exists(),
                    "{}",
                    bundle.join(name).display()
                );
            }
        }
    }
}

pub fn code(e: ShimError) -> (Code, String) {
    (e.code(), e.to_string())
}

pub fn exited(code: i32) -> ExitStatus {
    ExitStatus::Exited(code)
}
