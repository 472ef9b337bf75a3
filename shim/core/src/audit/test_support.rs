//! What the audit tests share (the writer's here, the exporter's over its files in the tests
//! crate): subjects, an exit, an egress connection record, and verification of the files on
//! disk.

use std::path::{Path, PathBuf};

use policy_injector::audit_chain::sign::VerifyingKey;
use policy_injector::audit_chain::verify::verify_all;
use policy_injector::audit_chain::{Break, Summary};

use super::file::numbered;
use super::{PodRef, PolicyRef, Subject};
use crate::egress::audit::{ConnectionRecord, Verdict};
use crate::egress::{EgressAudit, EgressEvent, SandboxRef};
use crate::exit::{Exit, ExitCause};

pub fn subject(id: &str) -> Subject {
    Subject {
        namespace: "default".into(),
        container_id: id.into(),
        image: None,
        pod: None,
        policy: PolicyRef {
            path: "/etc/gvisor-hardened/policy.toml".into(),
            sha256: "ab".into(),
            mode: "enforce".into(),
        },
    }
}

/// Container `id` of pod `agent` (namespace `default`) whose sandbox is `sandbox`, as CRI
/// names it, under the node's policy in enforce mode.
pub fn pod_subject(id: &str, sandbox: &str) -> Subject {
    Subject {
        namespace: "k8s.io".into(),
        container_id: id.into(),
        image: Some("docker.io/library/busybox:latest".into()),
        pod: Some(PodRef {
            name: Some("agent".into()),
            namespace: Some("default".into()),
            uid: Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into()),
            sandbox_id: Some(sandbox.into()),
            container_name: Some(id.into()),
        }),
        policy: PolicyRef {
            path: "/etc/gvisor-hardened/policy.toml".into(),
            sha256: "3efb4f1727e9920fe46b05d10be3f62f93558b9eecefa4048b8762bfed437463".into(),
            mode: "enforce".into(),
        },
    }
}

/// An exit now.
pub fn exit(cause: ExitCause, status: u32) -> Exit {
    Exit {
        status,
        at: std::time::SystemTime::now(),
        cause,
    }
}

/// A CONNECT to `host` on port 443 by the pod sandbox `pause` under the agent policy, admitted
/// or refused by the entry `api.example.test:443`, as the proxy records it.
pub fn egress_connection(
    host: &str,
    verdict: Verdict,
    bytes_up: u64,
    bytes_down: u64,
) -> EgressAudit {
    EgressAudit {
        sandbox: SandboxRef {
            sandbox_id: "pause".into(),
            container_id: "pause".into(),
            policy: "gvisor-hardened-agent".into(),
        },
        event: EgressEvent::Connection(ConnectionRecord {
            peer: "10.88.0.2:40000".into(), // net-scan: data
            method: "CONNECT".into(),
            host: host.into(),
            port: 443,
            resolved: None,
            verdict,
            rule: "api.example.test:443".into(),
            reason: None,
            sni: None,
            bytes_up,
            bytes_down,
            duration_ms: 5,
        }),
    }
}

/// The log's files in rotation order: `path.N` ... `path.1`, `path`.
pub fn files_of(path: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = (1..=1000)
        .map(|n| numbered(path, n))
        .take_while(|p| p.exists())
        .collect();
    out.reverse();
    out.push(path.to_path_buf());
    out
}

pub fn verify(path: &Path, key: Option<VerifyingKey>) -> Result<Summary, Break> {
    let files = files_of(path);
    let bytes: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
        .collect();
    let refs: Vec<(&str, &[u8])> = bytes
        .iter()
        .map(|(n, b)| (n.as_str(), b.as_slice()))
        .collect();
    verify_all(&refs, key, false)
}
