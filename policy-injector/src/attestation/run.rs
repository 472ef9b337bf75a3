//! What ran, folded from the audit log's records of one sandbox: a pure fold over the lines in
//! log order (rotated files first), fed by whatever reads the files. Every front end (the
//! containerd shim, runsc-hardened, CRI pods) writes the same records, so the predicate is the
//! same for all of them.
//!
//! A run is a container's records from its `create` to its signed final record. An id used
//! again starts a new run; the last run that ended is the one attested. Egress records are
//! filed under the pod's sandbox container (the forwarder runs there), so a run takes those of
//! its own id and of its pod's sandbox id from its `create` to its `exit`.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::audit_chain::{hash_line, GENESIS_EVENT};

/// The predicate of a run attestation (`predicateType` [`super::PREDICATE_TYPE`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunPredicate {
    pub sandbox: Sandbox,
    /// The image reference as the runtime was given it; absent for bundles without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `sha256:<hex>` when the reference pins a digest (`name@sha256:...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
    /// sha256 of the hardened config.json the sandbox ran with (the create record's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// The policy in force: path, sha256 of its bytes, mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runsc_args: Option<Value>,
    pub times: Times,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
    /// Exec'd processes (exec-start records).
    pub execs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    pub artifacts: Artifacts,
    pub audit: AuditRef,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sandbox {
    pub namespace: String,
    pub container_id: String,
    /// The Kubernetes pod, from the CRI annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<Value>,
}

/// RFC 3339 times of the records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Times {
    pub created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exited: Option<String>,
    /// The signed final record's.
    pub ended: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Exit {
    pub status: u64,
    /// exited, signaled, oom, process-limit, timeout, idle-timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// The init process's output as the shim delivered it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Output {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_sha256: Option<String>,
}

/// What the sandbox's egress proxy let through and refused while the run was open.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Egress {
    /// Connections by verdict: allowed, denied, cut, failed.
    pub connections: BTreeMap<String, u64>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub byte_cap_crossed: u64,
    /// `host:port` of connections allowed (cut and failed included), and of those denied.
    pub hosts_allowed: BTreeSet<String>,
    pub hosts_denied: BTreeSet<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Artifacts {
    /// The exit manifest file the subjects come from, as the exit record names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<ManifestRef>,
    /// Why there is no exit manifest (the exit record's error), or "none" when the sandbox had
    /// no writable volume or manifests were off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// Both manifests complete: every file written is a subject or listed in `unattested`.
    pub exact: bool,
    /// Added, modified and removed entries (all types), from the exit record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<Value>,
    /// Written files that are not subjects, and why.
    pub unattested: Vec<super::manifest::Unattested>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ManifestRef {
    pub path: String,
    pub sha256: String,
}

/// Where the evidence is: the signed trail this predicate was folded from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AuditRef {
    /// Records in the trail, the final one included.
    pub records: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    /// sha256 of the final record's line (its signature included): pins this statement to
    /// one place in one log.
    pub final_record_sha256: String,
    pub key_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    #[error("no create record of container {0} in the log")]
    NotFound(String),
    #[error(
        "container {id} exists in several namespaces ({namespaces}); name one with --namespace"
    )]
    Ambiguous { id: String, namespaces: String },
    #[error("container {id}: its last run has no signed final record (still running, the log was cut, or the trail is not signed: set [audit] signing_key)")]
    NotEnded { id: String },
}

/// Feed every line of the log in order with [`RunFold::line`], then [`RunFold::finish`].
pub struct RunFold {
    namespace: Option<String>,
    id: String,
    namespaces: BTreeSet<String>,
    open: Option<RunPredicate>,
    pod_sandbox: Option<String>,
    ended: Option<RunPredicate>,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

impl RunFold {
    pub fn new(container_id: &str, namespace: Option<&str>) -> RunFold {
        RunFold {
            namespace: namespace.map(str::to_string),
            id: container_id.to_string(),
            namespaces: BTreeSet::new(),
            open: None,
            pod_sandbox: None,
            ended: None,
        }
    }

    /// One line of the log (without its newline). Lines that are not JSON objects are skipped:
    /// whether the log is intact is the verifier's to say, beside this fold.
    pub fn line(&mut self, line: &[u8]) {
        let Ok(rec) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let event = str_of(&rec, "event").unwrap_or("");
        if event == GENESIS_EVENT {
            return;
        }
        let ns = str_of(&rec, "namespace").unwrap_or("");
        if self.namespace.as_deref().is_some_and(|want| want != ns) {
            return;
        }
        let own = str_of(&rec, "container_id") == Some(self.id.as_str());
        if own && event == "create" {
            self.namespaces.insert(ns.to_string());
            self.begin(&rec, ns);
        }
        let Some(run) = self.open.as_mut() else {
            return;
        };
        if run.sandbox.namespace != ns {
            return;
        }
        if event.starts_with("egress-") {
            let sandbox = str_of(&rec, "sandbox_id");
            let ours = own
                || sandbox == Some(self.id.as_str())
                || (sandbox.is_some() && sandbox == self.pod_sandbox.as_deref());
            // The proxy drains its connections before the exit record; after the exit, a
            // pod's proxy serves the pod's other containers, not this one.
            if ours && run.times.exited.is_none() {
                fold_egress(run, event, &rec);
            }
        } else if !own {
            return;
        }
        let seq = rec.get("seq").and_then(Value::as_u64).unwrap_or(0);
        if run.audit.records == 0 {
            run.audit.first_seq = seq;
        }
        if own {
            run.audit.records += 1;
            run.audit.last_seq = seq;
            fold_lifecycle(run, event, &rec);
        }
        if let (true, Some(sig)) = (own, rec.get("sig")) {
            run.times.ended = str_of(&rec, "time").unwrap_or("").to_string();
            run.audit.final_record_sha256 = hash_line(line).to_string();
            run.audit.key_id = str_of(sig, "key_id").unwrap_or("").to_string();
            self.ended = self.open.take();
        }
    }

    fn begin(&mut self, create: &Value, ns: &str) {
        let pod = create.get("pod").cloned();
        self.pod_sandbox = pod
            .as_ref()
            .and_then(|p| str_of(p, "sandbox_id"))
            .map(str::to_string);
        let image = str_of(create, "image").map(str::to_string);
        let image_digest = image.as_deref().and_then(|i| {
            let (_, digest) = i.rsplit_once('@')?;
            digest.starts_with("sha256:").then(|| digest.to_string())
        });
        self.open = Some(RunPredicate {
            sandbox: Sandbox {
                namespace: ns.to_string(),
                container_id: self.id.clone(),
                pod,
            },
            image,
            image_digest,
            config_sha256: str_of(create, "config_sha256").map(str::to_string),
            policy: create.get("policy").cloned(),
            runsc_args: create.get("runsc_args").cloned(),
            times: Times {
                created: str_of(create, "time").unwrap_or("").to_string(),
                ..Times::default()
            },
            artifacts: Artifacts {
                missing: Some("none".to_string()),
                ..Artifacts::default()
            },
            ..RunPredicate::default()
        });
    }

    /// The last run that ended, or why there is none.
    pub fn finish(self) -> Result<RunPredicate, RunError> {
        if self.namespace.is_none() && self.namespaces.len() > 1 {
            return Err(RunError::Ambiguous {
                id: self.id,
                namespaces: self.namespaces.into_iter().collect::<Vec<_>>().join(", "),
            });
        }
        if self.open.is_some() {
            return Err(RunError::NotEnded { id: self.id });
        }
        self.ended.ok_or(RunError::NotFound(self.id))
    }
}

fn fold_lifecycle(run: &mut RunPredicate, event: &str, rec: &Value) {
    let time = || str_of(rec, "time").map(str::to_string);
    match event {
        "start" => run.times.started = time(),
        "exec-start" => run.execs += 1,
        "exit" => {
            run.times.exited = time();
            run.exit = Some(Exit {
                status: rec.get("exit_status").and_then(Value::as_u64).unwrap_or(0),
                cause: str_of(rec, "exit_cause").map(str::to_string),
            });
            let stream = |s: &str| {
                rec.pointer(&format!("/output/{s}/sha256"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let output = Output {
                bytes: rec.get("output_bytes").and_then(Value::as_u64),
                truncated: rec.get("output_truncated").and_then(Value::as_bool),
                stdout_sha256: stream("stdout"),
                stderr_sha256: stream("stderr"),
            };
            if output != Output::default() {
                run.output = Some(output);
            }
            if let Some(a) = rec.get("artifacts") {
                fold_exit_artifacts(&mut run.artifacts, a);
            }
        }
        _ => {}
    }
}

fn fold_exit_artifacts(out: &mut Artifacts, a: &Value) {
    if let Some(error) = str_of(a, "error") {
        out.missing = Some(error.to_string());
        return;
    }
    let (Some(path), Some(sha256)) = (
        a.pointer("/manifest/path").and_then(Value::as_str),
        a.pointer("/manifest/sha256").and_then(Value::as_str),
    ) else {
        return;
    };
    out.manifest = Some(ManifestRef {
        path: path.to_string(),
        sha256: sha256.to_string(),
    });
    out.missing = None;
    out.diff = a.get("diff").map(|d| {
        let count = |k: &str| d.get(k).cloned().unwrap_or(Value::Null);
        serde_json::json!({"added": count("added"), "modified": count("modified"),
                           "removed": count("removed")})
    });
}

fn fold_egress(run: &mut RunPredicate, event: &str, rec: &Value) {
    let e = run.egress.get_or_insert_with(Egress::default);
    match event {
        "egress-connection" => {
            let verdict = str_of(rec, "verdict").unwrap_or("unknown").to_string();
            let host = format!(
                "{}:{}",
                str_of(rec, "host").unwrap_or(""),
                rec.get("port").and_then(Value::as_u64).unwrap_or(0)
            );
            if verdict == "denied" {
                e.hosts_denied.insert(host);
            } else {
                e.hosts_allowed.insert(host);
            }
            *e.connections.entry(verdict).or_default() += 1;
            let n = |k: &str| rec.get(k).and_then(Value::as_u64).unwrap_or(0);
            e.bytes_up += n("bytes_up");
            e.bytes_down += n("bytes_down");
        }
        "egress-byte-cap-crossed" => e.byte_cap_crossed += 1,
        _ => {}
    }
}
