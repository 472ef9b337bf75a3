//! What the Docker and Podman harnesses share: the private directory with its test policy, the
//! command builder, the test image as a root filesystem tarball (`docker import` / `podman
//! import`: there is no registry), the leak checks after a container and the teardown of
//! everything under the directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::image::TEST_IMAGE_REF;
use crate::inspect;
use crate::leaks::{Leaks, LEAK_GRACE};
use crate::poll::poll_until;
use crate::process::{BoundedCommand, CommandOutput};

/// Default deadline of one engine call: a cold sandbox on a loaded 2-core machine takes
/// seconds; anything near this is a hang.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(120);

/// runsc-hardened's own state root when the engine gives no `--root` (Podman).
pub const DEFAULT_STATE_ROOT: &str = "/run/gvisor-hardened/oci";

/// The runtime name both engines register runsc-hardened under.
pub const HARDENED: &str = "gvisor-hardened";
/// The baseline runtime: plain runsc, loopback only, registered beside it.
pub const BASELINE: &str = "runsc";

/// runsc-hardened: `$GVH_RUNSC_HARDENED`, else the one cargo built next to the test executable.
pub fn runsc_hardened_binary() -> Result<PathBuf> {
    crate::shim_binary::product_binary("runsc-hardened", "GVH_RUNSC_HARDENED")
}

/// A command bound to one private engine, with a deadline ([`ENGINE_TIMEOUT`] by default).
pub type EngineCommand = BoundedCommand;

pub(crate) fn engine_command(cmd: Command) -> EngineCommand {
    BoundedCommand::new(cmd, ENGINE_TIMEOUT)
}

/// A private directory for one engine instance, with the test policy runsc-hardened runs under:
/// the audit log and runsc's state inside the directory, everything else the default policy.
#[derive(Debug)]
pub struct EngineDir {
    dir: PathBuf,
}

impl EngineDir {
    /// `/tmp/gvh-<kind>-<hex>`: short, for the engines' unix sockets.
    pub fn create(kind: &str) -> Result<EngineDir> {
        let dir = std::env::temp_dir().join(format!("gvh-{kind}-{}", random_hex(5)));
        fs::create_dir(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
        let d = EngineDir { dir };
        d.write_signing_key()?;
        d.write_policy("policy.toml", "")?;
        Ok(d)
    }

    /// The test policies sign each container's final record (`[audit] signing_key`), so
    /// [`assert_audit_signed_and_intact`](Self::assert_audit_signed_and_intact) can check
    /// every container's trail.
    fn write_signing_key(&self) -> Result<()> {
        let prefix = self.dir.join("audit");
        let out = crate::audit_tools::policy_injector_audit(&[
            "keygen",
            "--out",
            &prefix.display().to_string(),
        ])?;
        if !out.status.success() {
            return Err(HarnessError::io(
                "policy-injector audit keygen --out",
                &prefix,
                std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
            ));
        }
        Ok(())
    }

    fn signing_key(&self) -> PathBuf {
        self.dir.join("audit.key")
    }

    /// Panics unless `policy-injector audit verify --public-key` finds the chain intact and
    /// every container that got a sandbox sealed by its signed final record; returns what it
    /// printed. Call it once every container is gone.
    #[track_caller]
    pub fn assert_audit_signed_and_intact(&self) -> String {
        let (log, public) = (self.audit_log(), self.dir.join("audit.pub"));
        let out = crate::audit_tools::policy_injector_audit(&[
            "verify",
            "--public-key",
            &public.display().to_string(),
            "--log",
            &log.display().to_string(),
        ])
        .unwrap();
        let text = crate::audit_tools::outcome(&out)
            .unwrap_or_else(|e| panic!("audit verify --public-key {}: {e}", log.display()));
        assert!(text.contains("signed and verified"), "{text}");
        text
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.jsonl")
    }

    /// Where runsc keeps its state under the test policies (`[runsc] root`).
    pub fn runsc_root(&self) -> PathBuf {
        self.dir.join("runsc")
    }

    /// The default test policy.
    pub fn policy(&self) -> PathBuf {
        self.dir.join("policy.toml")
    }

    /// Writes a policy file `name`: `extra` (TOML) followed by the test settings (audit log
    /// and runsc root in the directory) for the tables `extra` does not set itself.
    pub fn write_policy(&self, name: &str, extra: &str) -> Result<PathBuf> {
        let path = self.dir.join(name);
        let mut text = format!("{extra}\n");
        if !extra.contains("[audit]") {
            text.push_str(&format!(
                "[audit]\npath = {:?}\nsigning_key = {:?}\n",
                self.audit_log().display().to_string(),
                self.signing_key().display().to_string()
            ));
        }
        if !extra.contains("[runsc]") {
            text.push_str(&format!(
                "[runsc]\nroot = {:?}\n",
                self.runsc_root().display().to_string()
            ));
        }
        fs::write(&path, text).map_err(|e| HarnessError::io("writing", &path, e))?;
        Ok(path)
    }

    /// The audit log's records, parsed.
    pub fn audit_lines(&self) -> Vec<serde_json::Value> {
        fs::read_to_string(self.audit_log())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The events audited for container `id`, in order.
    pub fn audit_events(&self, id: &str) -> Vec<String> {
        self.audit_lines()
            .iter()
            .filter(|l| l["container_id"] == id)
            .filter_map(|l| l["event"].as_str().map(str::to_string))
            .collect()
    }

    /// The exit statuses in container `id`'s `exec-exit` records, in order. Panics unless
    /// each exec's records come as `exec`, `exec-start`, `exec-exit`.
    #[track_caller]
    pub fn exec_exits(&self, id: &str) -> Vec<i64> {
        let lines: Vec<serde_json::Value> = self
            .audit_lines()
            .into_iter()
            .filter(|l| {
                l["container_id"] == id
                    && l["event"].as_str().is_some_and(|e| e.starts_with("exec"))
            })
            .collect();
        let events: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
        for (i, three) in events.chunks(3).enumerate() {
            assert_eq!(
                three,
                ["exec", "exec-start", "exec-exit"],
                "exec {i}: {events:?}"
            );
        }
        exit_statuses(&lines)
    }

    /// The exit statuses in container `id`'s `exec-exit` records, in order, without
    /// [`exec_exits`](Self::exec_exits)' check of the records around them (an exec runsc
    /// refused has no `exec-start`, a running one no `exec-exit` yet).
    pub fn exec_exit_statuses(&self, id: &str) -> Vec<i64> {
        let lines: Vec<serde_json::Value> = self
            .audit_lines()
            .into_iter()
            .filter(|l| l["container_id"] == id)
            .collect();
        exit_statuses(&lines)
    }

    /// The first audit record of `event`, of any container.
    pub fn first_audit_record(&self, event: &str) -> Option<serde_json::Value> {
        self.audit_lines().into_iter().find(|l| l["event"] == event)
    }

    /// The first audit record of `event` for container `id`.
    pub fn audit_record(&self, id: &str, event: &str) -> Option<serde_json::Value> {
        self.audit_lines()
            .into_iter()
            .find(|l| l["container_id"] == id && l["event"] == event)
    }
}

/// The `exit_status` of each `exec-exit` record among `lines`, in order.
fn exit_statuses(lines: &[serde_json::Value]) -> Vec<i64> {
    lines
        .iter()
        .filter(|l| l["event"] == "exec-exit")
        .map(|l| l["exit_status"].as_i64().unwrap_or(-1))
        .collect()
}

/// What container `id` left behind: processes and mounts mentioning it (the guard names its
/// state directory, which ends in the id), cgroups named after it (or Podman's
/// `libpod-<id>`), runsc state under `runsc_root`, and runsc-hardened's state directory under
/// `state_root`.
pub fn container_leaks(id: &str, runsc_root: &Path, state_root: &Path) -> Leaks {
    let mut cgroups = inspect::cgroups_named(id);
    cgroups.extend(inspect::cgroups_named(&format!("libpod-{id}")));
    let state = state_root.join(id);
    Leaks {
        processes: inspect::processes_mentioning(id),
        mounts: inspect::mounts_mentioning(id),
        cgroups,
        runtime_state: inspect::runsc_state_files(runsc_root, Some(id)),
        files: [state].into_iter().filter(|p| p.exists()).collect(),
    }
}

/// Polls (up to [`LEAK_GRACE`]) for container `id` to leave nothing; panics with what is left.
#[track_caller]
pub fn assert_container_gone(id: &str, runsc_root: &Path, state_root: &Path) {
    let mut last = Leaks::default();
    if poll_until("the container's leftovers to go", LEAK_GRACE, || {
        last = container_leaks(id, runsc_root, state_root);
        last.is_empty().then_some(())
    })
    .is_err()
    {
        panic!("container {id} left this behind after {LEAK_GRACE:?}:\n{last}");
    }
}

/// Everything still on the host because of the directory: what teardown had to force.
#[derive(Debug, Default)]
pub struct Forced {
    pub containers: Vec<String>,
    pub processes: Vec<inspect::ProcInfo>,
    pub mounts: Vec<inspect::MountInfo>,
    pub cgroups: Vec<PathBuf>,
    pub errors: Vec<String>,
}

impl Forced {
    /// Nothing had to be forced beyond the engine's own exit.
    pub fn is_clean(&self) -> bool {
        self.containers.is_empty()
            && self.processes.is_empty()
            && self.cgroups.is_empty()
            && self.errors.is_empty()
    }
}

impl std::fmt::Display for Forced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "containers left: {:?}", self.containers)?;
        for p in &self.processes {
            writeln!(f, "  killed {}: {}", p.pid, p.cmdline)?;
        }
        for m in &self.mounts {
            writeln!(f, "  unmounted {}", m.mount_point.display())?;
        }
        for c in &self.cgroups {
            writeln!(f, "  cgroup left {}", c.display())?;
        }
        for e in &self.errors {
            writeln!(f, "  error: {e}")?;
        }
        Ok(())
    }
}

/// Kills what still runs from `dir`, unmounts what is mounted under it, removes the cgroup
/// tree `cgroup_parent` (the engine's, named after the directory; `expected` names children
/// the engine itself keeps there, such as Podman's `conmon`) and the directory.
pub(crate) fn remove_everything(
    dir: &Path,
    cgroup_parent: Option<&str>,
    expected: &[&str],
    forced: &mut Forced,
) {
    let needle = dir.to_string_lossy().into_owned();
    let survivors = inspect::processes_mentioning(&needle);
    for p in &survivors {
        // SAFETY: plain kill(2); a stale pid only yields ESRCH.
        unsafe { libc::kill(p.pid, libc::SIGKILL) };
    }
    let _ = poll_until("killed processes to exit", Duration::from_secs(10), || {
        survivors
            .iter()
            .all(|p| !inspect::is_alive(p.pid))
            .then_some(())
    });
    forced.processes.extend(survivors);
    inspect::release_runsc_null_netns(dir);
    let mut mounts = inspect::mounts_under(dir);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.mount_point.as_os_str().len()));
    for m in &mounts {
        if let Err(e) = unmount(&m.mount_point) {
            forced
                .errors
                .push(format!("umount {}: {e}", m.mount_point.display()));
        }
    }
    forced.mounts.extend(mounts);
    if let Some(parent) = cgroup_parent {
        for top in inspect::cgroup_dirs(parent) {
            for name in expected {
                let mut ignored = Forced::default();
                let child = top.join(name);
                if child.is_dir() {
                    remove_cgroup_tree(&child, true, &mut ignored);
                }
                forced.errors.extend(ignored.errors);
            }
            remove_cgroup_tree(&top, true, forced);
        }
    }
    if std::env::var_os(crate::containerd::KEEP_DIR_ENV).is_some() {
        eprintln!("gvh harness: keeping {}", dir.display());
    } else if dir.exists() {
        if let Err(e) = fs::remove_dir_all(dir) {
            forced
                .errors
                .push(format!("removing {}: {e}", dir.display()));
        }
    }
}

fn remove_cgroup_tree(dir: &Path, top: bool, forced: &mut Forced) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path(), false, forced);
            }
        }
    }
    if !top {
        forced.cgroups.push(dir.to_path_buf());
    }
    let removed = poll_until("the cgroup to empty", Duration::from_secs(10), || {
        for pid in fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<i32>().ok())
        {
            // SAFETY: plain kill(2) of a process in our engine's own cgroup tree.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        match fs::remove_dir(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => None,
            _ => Some(()),
        }
    });
    if removed.is_err() {
        forced.errors.push(format!("rmdir {}", dir.display()));
    }
}

fn unmount(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid NUL-terminated path; MNT_DETACH so a busy leftover cannot keep it.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `ENGINE run --rm --cidfile FILE RUNTIME ARGS IMAGE sh -c SCRIPT` (`RUNTIME`: the arguments
/// that pick the runtime): the output, and the container's id ("" when the engine wrote none).
pub fn run_rm_script(
    engine: EngineCommand,
    dir: &EngineDir,
    runtime: &[String],
    args: &[&str],
    script: &str,
) -> Result<(CommandOutput, String)> {
    let cid = dir
        .path()
        .join(format!("cid-{}", crate::ids::unique_id("c")));
    let out = engine
        .args(["run", "--rm", "--cidfile"])
        .arg(&cid)
        .args(runtime)
        .args(args)
        .args([TEST_IMAGE_REF, "sh", "-c", script])
        .output()?;
    Ok((out, read_cidfile(&cid).unwrap_or_default()))
}

/// The container id a `--cidfile` received.
pub fn read_cidfile(path: &Path) -> Result<String> {
    let id = fs::read_to_string(path).map_err(|e| HarnessError::io("reading", path, e))?;
    Ok(id.trim().to_string())
}

/// After an engine's shutdown: nothing had to be forced and nothing of its directory is left.
#[track_caller]
pub(crate) fn assert_shut_down_cleanly(dir: &Path, forced: Forced) {
    assert!(forced.is_clean(), "{forced}");
    let leaks = crate::leaks::dir_leaks(dir);
    assert!(
        leaks.is_empty(),
        "after shutdown of {}:\n{leaks}",
        dir.display()
    );
}
