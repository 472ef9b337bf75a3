//! The command line, as data: clap structs only, no logic.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Operator tool for gvisor-hardened's hardening policy: applies it to an OCI config.json,
/// explains what it would change, and prints or checks policy files.
#[derive(Debug, Parser)]
#[command(name = "policy-injector", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the hardened config.json (or rewrite it with --in-place). Exit 0 when hardened,
    /// 2 when the policy rejects the spec, 1 when the input or policy cannot be read.
    Harden {
        /// Policy file (TOML). Without it, the embedded default policy applies.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// A host namespace path of the pod sandbox the container may join (e.g.
        /// /proc/4242/ns/ipc); repeat for each. The shim supplies these at runtime.
        #[arg(long = "pod-namespace", value_name = "PATH")]
        pod_namespaces: Vec<String>,
        /// A bind source (as written in CONFIG_JSON) that holds a Kubernetes service-account
        /// token, e.g. a projected serviceAccountToken volume; repeat for each. The shim finds
        /// these at runtime by looking into the kubelet's volumes.
        #[arg(long = "token-source", value_name = "PATH")]
        token_sources: Vec<String>,
        /// Rewrite CONFIG_JSON instead of printing; nothing is written when the spec is rejected.
        #[arg(long)]
        in_place: bool,
        /// OCI runtime spec (config.json).
        #[arg(value_name = "CONFIG_JSON")]
        config: PathBuf,
    },
    /// List every change and rejection the policy makes to CONFIG_JSON, and why, grouped by rule.
    /// The spec is not modified. Exit 0 when explained (whatever the verdict), 1 on errors.
    Explain {
        /// Policy file (TOML). Without it, the embedded default policy applies.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        /// A host namespace path of the pod sandbox the container may join; repeat for each.
        #[arg(long = "pod-namespace", value_name = "PATH")]
        pod_namespaces: Vec<String>,
        /// A bind source that holds a Kubernetes service-account token; repeat for each.
        #[arg(long = "token-source", value_name = "PATH")]
        token_sources: Vec<String>,
        /// Print the explanation as JSON instead of text.
        #[arg(long)]
        json: bool,
        /// OCI runtime spec (config.json).
        #[arg(value_name = "CONFIG_JSON")]
        config: PathBuf,
    },
    /// Print the embedded default policy as commented TOML, or a shipped preset.
    DefaultPolicy {
        /// A preset instead of the default: coding-agent.
        #[arg(long, value_name = "NAME")]
        preset: Option<String>,
    },
    /// Load a policy file strictly and report the first problem (exit 1) or "ok" (exit 0).
    CheckPolicy {
        /// Policy file (TOML).
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// The tamper-evident audit log: verify its hash chain and signatures, make a signing key.
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Verify the hash chain of audit log files, given in rotation order (oldest first:
    /// audit.jsonl.N ... audit.jsonl.1 audit.jsonl), or all of a log's files with --log. Prints
    /// "N records, chain intact" and exits 0, or names the first break and exits 3; exits 1
    /// when a file cannot be read.
    Verify {
        /// Also check each sandbox's signature with this ed25519 public key (PEM).
        #[arg(long, value_name = "PEM")]
        public_key: Option<PathBuf>,
        /// With --public-key: list sandboxes without a signed final record (running ones, on a
        /// live log) instead of failing on them.
        #[arg(long, requires = "public_key")]
        allow_open: bool,
        /// The live log: its rotated files (PATH.N ... PATH.1) are read first, then PATH.
        #[arg(long, value_name = "PATH", conflicts_with = "files")]
        log: Option<PathBuf>,
        /// Log files, oldest first.
        #[arg(value_name = "FILE", required_unless_present = "log")]
        files: Vec<PathBuf>,
    },
    /// Write the log's records as OCSF events (--format ocsf) or OpenTelemetry logs in OTLP JSON
    /// (--format otel), one JSON document per line on stdout, environment values redacted.
    /// FILEs are read in the order given, or all of a log's files with --log; --follow then
    /// follows the live file as it grows and across rotations, until killed. Every record of
    /// this version has an OCSF class; one that has none (an event from a newer shim) is left
    /// out and counted on stderr with the rest.
    /// The chain is verified as the lines go by: a break is named on stderr, and over files the
    /// exit status is then 3. Exits 0, or 1 when a file cannot be read or stdout cannot be written.
    Export {
        #[arg(long, value_enum)]
        format: ExportFormat,
        /// The live log: its rotated files (PATH.N ... PATH.1) are read first, then PATH.
        #[arg(long, value_name = "PATH", conflicts_with = "files")]
        log: Option<PathBuf>,
        /// Keep following the live log (--log) for new records.
        #[arg(long, requires = "log", conflicts_with = "files")]
        follow: bool,
        /// With --follow: how often to look for new lines at the end of the live file, in ms.
        #[arg(long, value_name = "MS", default_value_t = 250)]
        poll_ms: u64,
        /// The node's name for records before a genesis record names it (default: this host's).
        #[arg(long, value_name = "NAME")]
        node: Option<String>,
        /// Log files, oldest first.
        #[arg(value_name = "FILE", required_unless_present = "log")]
        files: Vec<PathBuf>,
    },
    /// Serve Prometheus metrics at http://ADDR/metrics, folded from the audit log: its rotated
    /// files first, then the live file followed as it grows and across rotations. The chain is
    /// verified line by line as it is read (gvh_audit_chain_intact turns 0 at the first break).
    /// Runs until killed; exits 1 when ADDR cannot be bound.
    Metrics {
        /// The live log: its rotated files (PATH.N ... PATH.1) are read first, then PATH.
        #[arg(long, value_name = "PATH")]
        log: PathBuf,
        /// Where and to whom it serves.
        #[command(flatten)]
        listen: MetricsListen,
        /// How often to look for new lines once at the end of the live file, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 250)]
        poll_ms: u64,
    },
    /// Write a signed run attestation of one sandbox: an in-toto Statement v1 in a DSSE
    /// envelope, signed with the audit signing key. Subjects: the files the sandbox added or
    /// modified (its exit manifest, with their sha256); predicate: what ran. The log is verified
    /// with the key first (exit 3 when it does not verify); exit 1 when there is no ended run of
    /// the container or it wrote no file.
    Attest {
        /// The live log: its rotated files (PATH.N ... PATH.1) are read first, then PATH.
        #[arg(long, value_name = "PATH")]
        log: PathBuf,
        /// The container (sandbox) id.
        #[arg(long, value_name = "ID")]
        container: String,
        /// The containerd namespace, when the id is in several.
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
        /// The audit signing key (PKCS#8 PEM, as `[audit] signing_key`).
        #[arg(long, value_name = "KEYFILE")]
        key: PathBuf,
        /// The exit manifest, when it is no longer where the exit record says.
        #[arg(long, value_name = "FILE")]
        manifest: Option<PathBuf>,
        /// Write the envelope to this new file instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Check a run attestation: the DSSE signature with the public key, the statement's form,
    /// and with --artifacts that each subject's file hashes as attested. Exit 0 when it holds,
    /// 3 when refused, 1 when a file cannot be read.
    VerifyAttestation {
        /// The audit signing key's public half (PEM, as `audit keygen` writes it).
        #[arg(long, value_name = "PUB")]
        public_key: PathBuf,
        /// A directory standing for the container's root: the subject /data/out.txt is checked
        /// at DIR/data/out.txt.
        #[arg(long, value_name = "DIR")]
        artifacts: Option<PathBuf>,
        /// The envelope (JSON).
        #[arg(value_name = "ENVELOPE")]
        envelope: PathBuf,
    },
    /// Write a new ed25519 key pair: PREFIX.key (private, PKCS#8 PEM, mode 0600) for
    /// `[audit] signing_key`, and PREFIX.pub (public, PEM) for `audit verify --public-key`.
    /// Existing files are never overwritten.
    Keygen {
        #[arg(long, value_name = "PREFIX", default_value = "audit-signing")]
        out: PathBuf,
    },
}

/// `audit export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// OCSF 1.8.0 events: Process Activity, Network Activity, Detection Finding.
    Ocsf,
    /// OpenTelemetry logs, OTLP JSON: one LogsData per line.
    Otel,
}

/// `audit metrics`: where it serves and who may read it.
#[derive(clap::Args, Debug, Clone)]
pub struct MetricsListen {
    /// Address to serve on (port 0: any free port, printed at start). Loopback by default, as
    /// node exporters bind; any other address needs --bearer-token-file.
    #[arg(long = "listen", value_name = "ADDR", default_value = "127.0.0.1:9464")]
    pub addr: SocketAddr,
    /// A file holding the token a scrape must send as `Authorization: Bearer TOKEN`
    /// (Prometheus: `authorization: {credentials_file: ...}`); read once at start, trailing
    /// whitespace ignored. GET /healthz answers without it and shows nothing.
    #[arg(long, value_name = "FILE")]
    pub bearer_token_file: Option<PathBuf>,
}
