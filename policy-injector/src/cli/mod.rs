//! The `policy-injector` binary: file I/O around the pure library, one-line errors, exit codes
//! 0 (done), 1 (unreadable or malformed input or policy), 2 (rejected by policy), 3 (the audit
//! chain is broken).

pub mod args;
mod attest;
mod audit;
mod explain;
mod export;
mod follow;
mod metrics;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, Context as _};
use clap::Parser;
use serde_json::Value;

use args::{AuditCommand, Cli, Command};
use policy_injector::{harden, Context, HardenError, Mode, Policy, DEFAULT_POLICY_TOML};

/// How a command failed: a rejection (exit 2), a broken audit chain (exit 3) or anything else
/// (exit 1).
enum Failure {
    Rejected(HardenError),
    ChainBroken(String),
    /// A broken chain under output that is data (an export): the verdict goes to stderr.
    ChainBrokenAfterOutput(String),
    Error(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(e: anyhow::Error) -> Self {
        Failure::Error(e)
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Rejected(e)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(Failure::ChainBroken(verdict)) => {
            // The verdict, like "N records, chain intact", goes to stdout.
            println!("{verdict}");
            ExitCode::from(3)
        }
        Err(Failure::ChainBrokenAfterOutput(verdict)) => {
            eprintln!("{verdict}");
            ExitCode::from(3)
        }
        Err(Failure::Error(e)) => {
            // One line: the chain joined, never a backtrace.
            let msg = e
                .chain()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(": ");
            eprintln!("error: {}", msg.replace('\n', " "));
            ExitCode::from(1)
        }
    }
}

fn run(cmd: Command) -> Result<(), Failure> {
    match cmd {
        Command::Audit { command } => run_audit(command),
        Command::DefaultPolicy { preset: None } => {
            print!("{DEFAULT_POLICY_TOML}");
            Ok(())
        }
        Command::DefaultPolicy { preset: Some(name) } => {
            let text = policy_injector::preset(&name).ok_or_else(|| {
                let known: Vec<&str> = policy_injector::PRESETS.iter().map(|(n, _)| *n).collect();
                anyhow!("no preset {name:?} (presets: {})", known.join(", "))
            })?;
            print!("{text}");
            Ok(())
        }
        Command::CheckPolicy { file } => {
            let policy = load_policy(Some(&file))?;
            println!(
                "ok: {} (mode {})",
                file.display(),
                match policy.mode {
                    Mode::Enforce => "enforce",
                    Mode::Audit => "audit",
                }
            );
            Ok(())
        }
        Command::Harden {
            policy,
            pod_namespaces,
            token_sources,
            in_place,
            config,
        } => run_harden(
            SpecArgs {
                policy,
                pod_namespaces,
                token_sources,
                config,
            },
            in_place,
        ),
        Command::Explain {
            policy,
            pod_namespaces,
            token_sources,
            json,
            config,
        } => run_explain(
            SpecArgs {
                policy,
                pod_namespaces,
                token_sources,
                config,
            },
            json,
        ),
    }
}

/// `audit ...`: the audit log's verbs.
fn run_audit(command: AuditCommand) -> Result<(), Failure> {
    match command {
        AuditCommand::Verify {
            public_key,
            allow_open,
            log,
            files,
        } => {
            let files = match log {
                Some(live) => follow::files_of_log(&live),
                None => files,
            };
            let verdict = audit::verify(&files, public_key.as_deref(), allow_open)?;
            match verdict {
                Ok(text) => {
                    print!("{text}");
                    Ok(())
                }
                Err(text) => Err(Failure::ChainBroken(text)),
            }
        }
        AuditCommand::Export {
            format,
            log,
            follow,
            poll_ms,
            node,
            files,
        } => {
            let files = match &log {
                Some(live) => follow::files_of_log(live),
                None => files,
            };
            let node = node.unwrap_or_else(export::host_name);
            match (follow, log) {
                (true, Some(live)) => {
                    let poll = std::time::Duration::from_millis(poll_ms.max(1));
                    match export::follow(&live, format, &node, poll)? {}
                }
                _ => export::files(&files, format, &node)?.map_err(Failure::ChainBrokenAfterOutput),
            }
        }
        AuditCommand::Metrics {
            log,
            listen,
            poll_ms,
        } => {
            let poll = std::time::Duration::from_millis(poll_ms.max(1));
            // Serves until killed: only a failure returns.
            match metrics::serve(&log, listen, poll)? {}
        }
        AuditCommand::Attest {
            log,
            container,
            namespace,
            key,
            manifest,
            out,
        } => {
            let files = follow::files_of_log(&log);
            let req = attest::AttestRequest {
                files: &files,
                container_id: &container,
                namespace: namespace.as_deref(),
                key: &key,
                manifest: manifest.as_deref(),
            };
            let envelope = attest::attest(&req)?.map_err(Failure::ChainBroken)?;
            match out {
                Some(path) => attest::write_new(&path, &envelope)?,
                None => print!("{envelope}"),
            }
            Ok(())
        }
        AuditCommand::VerifyAttestation {
            public_key,
            artifacts,
            envelope,
        } => {
            let report = attest::verify(&public_key, &envelope, artifacts.as_deref())?
                .map_err(Failure::ChainBroken)?;
            print!("{report}");
            Ok(())
        }
        AuditCommand::Keygen { out } => {
            print!("{}", audit::keygen(&out)?);
            Ok(())
        }
    }
}

/// What `harden` and `explain` share: the policy, the pod's context, the spec file.
struct SpecArgs {
    policy: Option<PathBuf>,
    pod_namespaces: Vec<String>,
    token_sources: Vec<String>,
    config: PathBuf,
}

/// [`SpecArgs`] read: the policy, the spec (as text and parsed) and the pod's context.
struct Loaded {
    policy: Policy,
    raw_spec: String,
    spec: Value,
    ctx: Context,
    config: PathBuf,
}

impl SpecArgs {
    fn load(self) -> anyhow::Result<Loaded> {
        let policy = load_policy(self.policy.as_deref())?;
        let (raw_spec, spec) = read_spec(&self.config)?;
        let ctx = context_for(&spec, self.pod_namespaces, self.token_sources);
        Ok(Loaded {
            policy,
            raw_spec,
            spec,
            ctx,
            config: self.config,
        })
    }
}

/// `harden`: the spec through the policy, to stdout or in place.
fn run_harden(args: SpecArgs, in_place: bool) -> Result<(), Failure> {
    let Loaded {
        policy,
        raw_spec,
        spec,
        ctx,
        config,
    } = args.load()?;
    let hardened = harden(&spec, &policy, &ctx).map_err(|e| match e {
        HardenError::Rejected(_) => Failure::Rejected(e),
        HardenError::Malformed { .. } => Failure::Error(anyhow!("{}: {e}", config.display())),
    })?;
    let mut text = if raw_spec.trim_start().starts_with("{\n") || raw_spec.contains("\n  ") {
        serde_json::to_string_pretty(&hardened.spec)
    } else {
        serde_json::to_string(&hardened.spec)
    }
    .context("serialising the hardened spec")?;
    text.push('\n');
    if in_place {
        write_atomically(&config, text.as_bytes())?;
    } else {
        std::io::stdout()
            .write_all(text.as_bytes())
            .context("writing to stdout")?;
    }
    if hardened.mode == Mode::Audit {
        let would_reject = hardened
            .decisions
            .iter()
            .filter(|d| d.action == policy_injector::Action::Rejected)
            .count();
        eprintln!(
            "audit mode: spec unchanged; {} decision(s), {would_reject} would-be rejection(s)",
            hardened.decisions.len()
        );
    }
    Ok(())
}

/// `explain`: what the policy would do to the spec, and why.
fn run_explain(args: SpecArgs, json: bool) -> Result<(), Failure> {
    let Loaded {
        policy,
        spec,
        ctx,
        config,
        ..
    } = args.load()?;
    let report =
        explain::explain(&spec, &policy, &ctx).map_err(|e| anyhow!("{}: {e}", config.display()))?;
    let out = if json {
        let mut s = serde_json::to_string_pretty(&report.to_json())
            .context("serialising the explanation")?;
        s.push('\n');
        s
    } else {
        report.to_text()
    };
    std::io::stdout()
        .write_all(out.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}

fn load_policy(path: Option<&Path>) -> anyhow::Result<Policy> {
    let Some(path) = path else {
        return Ok(Policy::default());
    };
    let src = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read policy {}", path.display()))?;
    Policy::from_toml_str(&src).map_err(|e| anyhow!("policy {}: {e}", path.display()))
}

fn read_spec(path: &Path) -> anyhow::Result<(String, Value)> {
    let raw =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let spec: Value = serde_json::from_str(&raw).map_err(|e| {
        anyhow!(
            "{}: invalid JSON at line {}, column {}: {}",
            path.display(),
            e.line(),
            e.column(),
            e
        )
    })?;
    if !spec.is_object() {
        return Err(anyhow!(
            "{}: the spec must be a JSON object",
            path.display()
        ));
    }
    Ok((raw, spec))
}

/// Resolves each bind source on this host (symlinks followed), so the mounts rule can check
/// where a bind really points. Sources that do not exist are left out. Token sources are taken
/// as given: the operator names them (the shim finds them in the kubelet's volumes).
fn context_for(
    spec: &Value,
    pod_namespace_paths: Vec<String>,
    token_sources: Vec<String>,
) -> Context {
    let mut resolved = BTreeMap::new();
    if let Some(mounts) = spec.get("mounts").and_then(Value::as_array) {
        for m in mounts {
            let is_bind = policy_injector::is_bind_mount(m);
            let Some(src) = m.get("source").and_then(Value::as_str) else {
                continue;
            };
            if !is_bind || !src.starts_with('/') {
                continue;
            }
            if let Ok(canon) = std::fs::canonicalize(src) {
                resolved.insert(src.to_string(), canon.to_string_lossy().into_owned());
            }
        }
    }
    Context {
        resolved_sources: resolved,
        pod_namespace_paths,
        token_sources: token_sources.into_iter().collect(),
        ..Context::default()
    }
}

/// Writes next to the target and renames over it, so a reader never sees half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let perms = std::fs::metadata(path)
        .with_context(|| format!("cannot stat {}", path.display()))?
        .permissions();
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::set_permissions(&tmp, perms)
        .with_context(|| format!("cannot set permissions on {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}
