//! Kubernetes' CRI validation suite (`critest`, sigs.k8s.io/cri-tools at the pinned version)
//! against a private containerd with three handlers: runc, gVisor's own shim
//! (`containerd-shim-runsc-v1` from the same gVisor module as our runsc, plain runsc), and
//! ours. Offline: the suite's images are stand-ins served by a registry on 127.0.0.1
//! (`registry.rs`, `images.rs`), which the test containerd's hosts directory makes the only
//! host of every registry the suite names. Each run's per-spec results come from ginkgo's JSON report;
//! `expected.rs` says which failures are known and why.

pub mod expected;
mod images;
pub mod registry;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::cri::{CriContainerd, CriOptions};
use crate::error::{HarnessError, Result};
use crate::process::output_with_deadline;

/// The handler of gVisor's own shim in the test containerd.
pub const RUNSC_HANDLER: &str = "runsc";

/// The registries the suite's image names point at.
const SUITE_REGISTRIES: &[&str] = &["registry.k8s.io", "gcr.io", "k8s.gcr.io"];

/// How long one handler's whole suite may take before it counts as hung.
pub const SUITE_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// One spec's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

/// One handler's run: every spec by its full name, and how long the suite took.
#[derive(Debug, Clone)]
pub struct Report {
    pub handler: String,
    pub specs: BTreeMap<String, Outcome>,
    pub duration: Duration,
    /// What the suite says of each spec that did not pass: its failure, or why it skipped.
    pub messages: Vec<(String, String)>,
    /// The suite's own output, for a failure message.
    pub output: String,
}

impl Report {
    pub fn count(&self, outcome: Outcome) -> usize {
        self.specs.values().filter(|o| **o == outcome).count()
    }

    pub fn failed(&self) -> impl Iterator<Item = &str> {
        self.specs
            .iter()
            .filter(|(_, o)| **o == Outcome::Failed)
            .map(|(n, _)| n.as_str())
    }
}

/// The registry, a test containerd with the three handlers, and where reports go. One per
/// handler when the handlers' runs go at once: the image specs pull, list and remove images in
/// the containerd's one image store, and would meet another run's.
pub struct Suite {
    pub cri: CriContainerd,
    /// Serves for as long as the suite is alive.
    _registry: registry::Registry,
    dir: tempfile::TempDir,
}

/// runsc (gVisor's shim's and ours) mounts a null network namespace in each runsc root, which
/// nothing unmounts when the suite ends: without this every run left one behind, and its
/// directory with it.
impl Drop for Suite {
    fn drop(&mut self) {
        crate::inspect::release_runsc_null_netns(self.dir.path());
    }
}

impl Suite {
    pub fn start(shim: PathBuf) -> Result<Suite> {
        let registry = registry::Registry::start()
            .map_err(|e| HarnessError::io("starting", "the test registry", e))?;
        images::publish(&registry)?;
        let dir = tempfile::Builder::new()
            .prefix("gvh-critest-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating", "the critest directory", e))?;
        let extra = extra_tables(dir.path(), registry.addr())?;
        // The suite connects to pod IPs: the host must route them to the bridge (without a
        // route they would go out by the default route).
        let cri = CriContainerd::start(CriOptions {
            log_level: "info".into(),
            extra_tables: extra,
            bridge_gateway: true,
            ..CriOptions::with_shim(shim)
        })?;
        Ok(Suite {
            cri,
            _registry: registry,
            dir,
        })
    }

    /// Runs the suite against `handler` (`focus`: only the specs matching that regexp).
    pub fn run(&self, handler: &str, focus: Option<&str>) -> Result<Report> {
        let critest = crate::stack::bin("critest")?;
        let report = self.dir.path().join(format!("{handler}.json"));
        let endpoint = &format!("unix://{}", self.cri.containerd().address().display());
        let mut cmd = Command::new(&critest);
        cmd.arg(format!("--runtime-endpoint={endpoint}"))
            .arg(format!("--image-endpoint={endpoint}"))
            .arg(format!("--runtime-handler={handler}"))
            .arg(format!("--ginkgo.json-report={}", report.display()))
            .args(["--ginkgo.no-color", "--ginkgo.timeout=30m"])
            // critest looks for a crictl.yaml in /etc and beside itself otherwise.
            .env("CONTAINER_RUNTIME_ENDPOINT", endpoint)
            .current_dir(self.dir.path());
        if let Some(f) = focus {
            cmd.arg(format!("--ginkgo.focus={f}"));
        }
        let started = Instant::now();
        let out = output_with_deadline(&mut cmd, None, SUITE_DEADLINE)?;
        let duration = started.elapsed();
        let failed = |e: String| {
            HarnessError::Image(format!(
                "critest against {handler}: {e}\n{}",
                tail(&out.to_string(), 60)
            ))
        };
        let text = std::fs::read_to_string(&report)
            .map_err(|e| failed(format!("{}: {e}", report.display())))?;
        let (specs, messages) = read_report(&text).map_err(failed)?;
        Ok(Report {
            handler: handler.to_string(),
            specs,
            duration,
            messages,
            output: out.to_string(),
        })
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// gVisor's own shim as a handler (its runsc and a root of its own), and the registry's hosts
/// directory, plain HTTP.
fn extra_tables(dir: &Path, registry: &str) -> Result<String> {
    let runsc = crate::stack::bin("runsc")?;
    let shim = crate::stack::bin("containerd-shim-runsc-v1")?;
    let runsc_toml = dir.join("runsc.toml");
    let write = |path: &Path, text: String| {
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| HarnessError::io("creating", p, e))?;
        }
        std::fs::write(path, text).map_err(|e| HarnessError::io("writing", path, e))
    };
    write(
        &runsc_toml,
        format!(
            "binary_name = \"{}\"\nroot = \"{}\"\n",
            runsc.display(),
            dir.join("runsc-root").display()
        ),
    )?;
    // The suite's registries are all this one, and only this one: their `server` too, so a
    // name the test registry lacks fails here instead of going out to the real one.
    let hosts = dir.join("hosts.d");
    for upstream in SUITE_REGISTRIES {
        write(
            &hosts.join(upstream).join("hosts.toml"),
            format!(
                "server = \"http://{registry}\"\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )?;
    }
    let rt = "plugins.\"io.containerd.cri.v1.runtime\"";
    Ok(format!(
        r#"
[plugins."io.containerd.cri.v1.images".registry]
  config_path = "{hosts}"
[{rt}.containerd.runtimes.{RUNSC_HANDLER}]
  runtime_type = "io.containerd.runsc.v1"
  runtime_path = "{shim}"
  [{rt}.containerd.runtimes.{RUNSC_HANDLER}.options]
    TypeUrl = "io.containerd.runsc.v1.options"
    ConfigPath = "{runsc_toml}"
"#,
        hosts = hosts.display(),
        shim = shim.display(),
        runsc_toml = runsc_toml.display(),
    ))
}

/// The specs of a ginkgo JSON report: full name (containers then leaf) -> outcome, and what
/// the report says of each spec that did not pass (the failure, or why it was skipped).
fn read_report(text: &str) -> std::result::Result<ReadReport, String> {
    let suites: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("the JSON report: {e}"))?;
    let mut specs = BTreeMap::new();
    let mut messages = Vec::new();
    for suite in suites.as_array().into_iter().flatten() {
        for spec in suite["SpecReports"].as_array().into_iter().flatten() {
            if spec["LeafNodeType"] != "It" {
                continue;
            }
            let mut parts: Vec<&str> = spec["ContainerHierarchyTexts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str())
                .collect();
            parts.push(spec["LeafNodeText"].as_str().unwrap_or_default());
            let name = parts.join(" ");
            let outcome = match spec["State"].as_str().unwrap_or_default() {
                "passed" => Outcome::Passed,
                "skipped" | "pending" => Outcome::Skipped,
                _ => Outcome::Failed,
            };
            if outcome != Outcome::Passed {
                let message = spec["Failure"]["Message"].as_str().unwrap_or_default();
                messages.push((name.clone(), message.to_string()));
            }
            specs.insert(name, outcome);
        }
    }
    if specs.is_empty() {
        return Err("no specs in the JSON report".into());
    }
    Ok((specs, messages))
}

type ReadReport = (BTreeMap<String, Outcome>, Vec<(String, String)>);
