//! Helpers shared by the rules' unit tests.

use serde_json::{json, Value};

use crate::decision::{Action, Rule};
use crate::error::{HardenError, Rejection};
use crate::harden::{harden, Context, Hardened};
use crate::policy::Policy;

/// A small spec that the default policy accepts: own network, pid and ipc namespaces, a root,
/// a process. Tests break it one way at a time.
pub(crate) fn base_spec() -> Value {
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "user": {"uid": 1000, "gid": 1000},
            "args": ["sh"],
            "env": ["PATH=/usr/bin:/bin"],
            "cwd": "/"
        },
        "root": {"path": "rootfs"},
        "hostname": "test",
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

pub(crate) fn harden_with(
    spec: &Value,
    policy: &Policy,
    ctx: &Context,
) -> Result<Hardened, HardenError> {
    harden(spec, policy, ctx)
}

pub(crate) fn harden_ok(spec: &Value) -> Hardened {
    harden_ok_with(spec, &Policy::default())
}

pub(crate) fn harden_ok_with(spec: &Value, policy: &Policy) -> Hardened {
    match harden(spec, policy, &Context::default()) {
        Ok(h) => h,
        Err(e) => panic!("expected the spec to pass, got: {e}"),
    }
}

pub(crate) fn harden_err(spec: &Value) -> HardenError {
    harden(spec, &Policy::default(), &Context::default()).expect_err("expected an error")
}

pub(crate) fn rejections(spec: &Value) -> Vec<Rejection> {
    rejections_with(spec, &Policy::default(), &Context::default())
}

pub(crate) fn rejections_with(spec: &Value, policy: &Policy, ctx: &Context) -> Vec<Rejection> {
    match harden(spec, policy, ctx) {
        Err(HardenError::Rejected(r)) => r,
        Err(e) => panic!("expected a rejection, got: {e}"),
        Ok(_) => panic!("expected a rejection, the spec passed"),
    }
}

pub(crate) fn count(h: &Hardened, rule: Rule, action: Action) -> usize {
    h.decisions
        .iter()
        .filter(|d| d.rule == rule && d.action == action)
        .count()
}

/// The mount at `dest` in a hardened spec.
pub(crate) fn mount_at<'a>(spec: &'a Value, dest: &str) -> Option<&'a Value> {
    spec["mounts"]
        .as_array()?
        .iter()
        .find(|m| m["destination"] == dest)
}
