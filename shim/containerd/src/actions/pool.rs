//! The warm pool's two commands (`gvisor_hardened_core::pool`): `pool-fill <key dir>`, the
//! filler a shim starts detached, and `pool-drain <policy runsc.root>`, which deletes every
//! warm sandbox no pod claimed (an operator turning the pool off, a node drained, a test's end).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use gvisor_hardened_core::pool::{self, drain, fill, KeyDir};
use gvisor_hardened_core::reaper::Reaper;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the filler's runtime")
}

/// Fills one key's pool; what it did (or why it could not) is appended to `<key>/fill.log`,
/// the filler having no containerd log to write to.
pub fn fill(dir: &str) -> anyhow::Result<()> {
    let kd = KeyDir::at(PathBuf::from(dir));
    let result = runtime()?.block_on(async {
        let reaper = Reaper::install()?;
        anyhow::Ok(fill::fill(&kd, reaper).await?)
    });
    let line = match &result {
        Ok(r) if r.already_filling => "another filler is at work".to_string(),
        Ok(r) if r.drained_own.is_some() => format!(
            "the policy changed since this key was booted (or turned its pool off): drained {} warm",
            r.drained_own.unwrap_or_default()
        ),
        Ok(r) => format!(
            "booted {}, removed {} dead, {} ready{}{}",
            r.booted,
            r.removed_dead,
            r.ready,
            r.drained_stale
                .iter()
                .map(|d| format!("; {d}"))
                .collect::<String>(),
            r.stopped
                .as_deref()
                .map(|s| format!("; stopped: {s}"))
                .unwrap_or_default()
        ),
        Err(e) => format!("failed: {e:#}"),
    };
    let _ = append_log(&kd.dir.join("fill.log"), &line);
    result.map(drop)
}

fn append_log(path: &Path, line: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    writeln!(f, "{now} {line}")
}

/// Drains every key of every namespace under `policy_runsc_root`; prints how many warm
/// sandboxes it deleted.
pub fn drain(policy_runsc_root: &str) -> anyhow::Result<()> {
    let base = Path::new(policy_runsc_root).join(pool::store::POOL_DIR);
    let namespaces: Vec<PathBuf> = match std::fs::read_dir(&base) {
        Ok(rd) => rd.filter_map(|e| e.ok()).map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", base.display())),
    };
    let total = runtime()?.block_on(async {
        let reaper = Reaper::install()?;
        let mut total = 0;
        for ns in &namespaces {
            for kd in drain::keys(ns) {
                total += drain::drain(&kd, reaper.clone())
                    .await
                    .with_context(|| format!("draining {}", kd.dir.display()))?;
            }
        }
        anyhow::Ok(total)
    })?;
    println!("deleted {total} warm sandboxes");
    Ok(())
}
