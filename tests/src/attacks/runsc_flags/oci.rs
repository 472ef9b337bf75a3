//! The runsc-hardened paths of the runsc-flag rows: the flag on its command line as the engines
//! pass runtime arguments, and the annotation in a bundle it creates.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::{annotations, current_runsc_section, fail, record_clean, FlagCase};
use crate::attacks::lab::Lab;
use crate::attacks::{ensure, Failed, Outcome};
use crate::engine::runsc_hardened_binary;
use crate::ids::unique_id;
use crate::process::output_with_deadline;

/// runsc-hardened as the engines call it, in a directory of its own inside the lab.
struct Cli {
    dir: PathBuf,
}

impl Drop for Cli {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Cli {
    fn new(lab: &Lab) -> Result<Cli, Failed> {
        let dir = lab
            .dir()
            .join(format!("rf-cli-{}", crate::ids::random_hex(6)));
        fs::create_dir(&dir).map_err(fail)?;
        let cli = Cli { dir };
        let text = format!(
            "{}root = {:?}\n\n[audit]\npath = {:?}\n",
            current_runsc_section()?,
            cli.p("runsc-root").display().to_string(),
            cli.p("audit.jsonl").display().to_string()
        );
        fs::write(cli.p("policy.toml"), text).map_err(fail)?;
        Ok(cli)
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `runsc-hardened --root R --log L --log-format=json [--policy=P] ARGS`.
    fn command(&self, with_policy: bool, args: &[String]) -> Result<Command, Failed> {
        let mut cmd = Command::new(runsc_hardened_binary()?);
        cmd.arg("--root")
            .arg(self.p("root"))
            .arg("--log")
            .arg(self.p("log.json"))
            .arg("--log-format=json");
        if with_policy {
            cmd.arg(format!("--policy={}", self.p("policy.toml").display()));
        }
        cmd.args(args);
        Ok(cmd)
    }

    fn call(
        &self,
        with_policy: bool,
        args: &[String],
    ) -> Result<crate::process::CommandOutput, Failed> {
        let mut cmd = self.command(with_policy, args)?;
        Ok(output_with_deadline(
            &mut cmd,
            None,
            std::time::Duration::from_secs(60),
        )?)
    }

    /// `create` as the engines run it: its stdio is the container's, so nothing here holds a
    /// pipe the sandbox would keep open.
    fn create(&self, id: &str, bundle: &Path) -> Result<bool, Failed> {
        let args = [
            "create".to_string(),
            "--bundle".into(),
            bundle.display().to_string(),
            "--pid-file".into(),
            self.p("guard.pid").display().to_string(),
            id.to_string(),
        ];
        let status = self
            .command(true, &args)?
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(fail)?;
        Ok(status.success())
    }

    fn last_error(&self) -> String {
        fs::read_to_string(self.p("log.json"))
            .unwrap_or_default()
            .lines()
            .last()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .and_then(|v| v["msg"].as_str().map(String::from))
            .unwrap_or_default()
    }

    fn record(&self, id: &str, event: &str) -> Option<Value> {
        fs::read_to_string(self.p("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["container_id"] == id && v["event"] == event)
    }
}

pub(super) fn through_engine_args(lab: &Lab, c: &FlagCase) -> Outcome {
    let cli = Cli::new(lab)?;
    let bundle = cli.p("bundle");
    fs::create_dir(&bundle).map_err(fail)?;
    let out = cli.call(
        false,
        &[
            format!("--{}={}", c.flag, c.value),
            "create".into(),
            "--bundle".into(),
            bundle.display().to_string(),
            "rf-engine".into(),
        ],
    )?;
    let error = cli.last_error();
    ensure(
        !out.success() && error.contains(&format!("--{} is a runsc flag", c.flag)),
        || format!("runsc-hardened did not refuse it by name: {out}; log: {error}"),
    )?;
    ensure(!cli.p("root").join("rf-engine").exists(), || {
        "state was created".into()
    })?;
    Ok("runsc-hardened --flag refused".into())
}

pub(super) fn through_runsc_hardened_annotation(lab: &Lab, c: &FlagCase) -> Outcome {
    let cli = Cli::new(lab)?;
    let id = unique_id("rf-oci");
    let bundle = cli.p("bundle");
    crate::direct::make_busybox_rootfs(&bundle.join("rootfs"))?;
    let ann: serde_json::Map<String, Value> = annotations(c)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
        "annotations": ann,
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "cgroupsPath": format!("/{id}"),
        },
    });
    fs::write(bundle.join("config.json"), spec.to_string()).map_err(fail)?;
    let created = cli.create(&id, &bundle)?;
    let record = cli.record(&id, "create");
    let deleted = cli.call(true, &["delete".into(), "--force".into(), id.clone()])?;
    ensure(created, || {
        format!("runsc-hardened create failed: {}", cli.last_error())
    })?;
    record_clean(&record.ok_or_else(|| fail("no create record"))?, c)?;
    ensure(deleted.success(), || format!("delete --force: {deleted}"))?;
    let leaks = crate::poll::poll_until(
        "runsc-hardened's container to go",
        crate::leaks::LEAK_GRACE,
        || {
            let l = crate::engine::container_leaks(&id, &cli.p("runsc-root"), &cli.p("root"));
            l.is_empty().then_some(())
        },
    );
    ensure(leaks.is_ok(), || {
        let l = crate::engine::container_leaks(&id, &cli.p("runsc-root"), &cli.p("root"));
        format!("left behind: {l}")
    })?;
    Ok("runsc-hardened annotation stripped".into())
}
