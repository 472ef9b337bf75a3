//! `uninstall`: every install step reversed, in reverse order.
//!
//! 1. Unlabel the node, so the scheduler stops placing our pods here first. A refusal does not
//!    stop the rest: `kubectl delete -k` deletes the installer's RBAC together with the
//!    DaemonSet, so the API server may answer 403 while the pod is uninstalling, and a node left
//!    labelled but restored is better than one left labelled and still configured. The label
//!    error is returned after everything else was undone.
//! 2. Restore the config: the original bytes when the file is still exactly what we wrote,
//!    otherwise (an operator edited it since) remove only our tables; a drop-in is deleted.
//! 3. Restart containerd if the config changed and check over CRI that it is ready without
//!    our handlers.
//! 4. Delete the warm sandboxes of every installed policy with a warm pool (`[pool]`), with
//!    the shim's `pool-drain`, while its binary is still there and containerd no longer sends
//!    pods to it. Best effort: a failure is logged, the uninstall goes on.
//! 5. Remove the shim, the policies, the backup and the state. Last, because pods that still
//!    run under our shim need its binary until containerd has let go of the handlers.
//!
//! Without a state file (lost, or a node configured by an older run) it falls back to removing
//! our tables and our files by name; running it twice is harmless.

use crate::command;
use crate::cri;
use crate::error::UninstallError;
use crate::files::{self, sha256_hex};
use crate::handlers::{DEFAULT_HANDLER, NODE_LABEL, TOOL_HANDLER};
use crate::install::{read_host_text, Node};
use crate::plan::{self, DROPIN_NAME};
use crate::state::{self, ConfigRecord, FileRecord, InstallState};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UninstallReport {
    /// `restored` (original bytes), `surgical` (our tables removed), `drop-in removed`,
    /// or `unchanged`.
    pub config: String,
    pub restarted: bool,
    pub files_removed: usize,
    pub unlabelled: bool,
}

/// The runsc roots (`[runsc] root`) of the policies among `texts` whose warm pool is on: where
/// `pool-drain` finds their warm sandboxes. A policy that does not parse has none to drain.
pub fn pooled_runsc_roots<'a>(texts: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut roots: Vec<String> = texts
        .into_iter()
        .filter_map(|t| policy_injector::Policy::from_toml_str(t).ok())
        .filter(|p| p.pool.enabled())
        .map(|p| p.runsc.root)
        .collect();
    roots.sort();
    roots.dedup();
    roots
}

impl Node {
    /// Step 4: `<host exec> <shim> pool-drain <root>` for each pooled policy's runsc root.
    fn drain_pools(&self, st: &InstallState) {
        let texts: Vec<String> = st
            .files
            .iter()
            .filter(|f| f.path.extension().is_some_and(|e| e == "toml"))
            .filter_map(|f| std::fs::read_to_string(self.layout.on_host(&f.path)).ok())
            .collect();
        for root in pooled_runsc_roots(texts.iter().map(String::as_str)) {
            let mut argv = self.containerd.host_exec.clone();
            argv.push(self.layout.shim_path.display().to_string());
            argv.push("pool-drain".into());
            argv.push(root.clone());
            match command::run(&argv) {
                Ok(out) => (self.log)(&format!("warm pool under {root}: {}", out.trim())),
                Err(e) => (self.log)(&format!(
                    "warm pool under {root} not drained ({e}); delete its sandboxes with `{} pool-drain {root}`",
                    self.layout.shim_path.display()
                )),
            }
        }
    }

    pub fn uninstall(&self) -> Result<UninstallReport, UninstallError> {
        // 1: unlabel; a refusal is reported once the rest is undone.
        let mut label_error = None;
        let unlabelled = match &self.labeller {
            Some(l) => match l.client.set_node_label(&l.node, NODE_LABEL, None) {
                Ok(()) => {
                    (self.log)(&format!("removed label {NODE_LABEL} from node {}", l.node));
                    true
                }
                Err(e) => {
                    (self.log)(&format!(
                        "could not remove label {NODE_LABEL} from node {} ({e}); restoring the node anyway",
                        l.node
                    ));
                    label_error = Some(e);
                    false
                }
            },
            None => false,
        };

        let state_path = self.layout.on_host(&self.layout.state_file());
        let st = match state::load(&state_path)? {
            Some(s) => s,
            None => {
                (self.log)("no install state: removing our handlers and files by name");
                self.fallback_state()
            }
        };

        // 2: config.
        let config = self.revert_config(&st)?;

        // 3: restart and verify.
        let restarted = config != "unchanged";
        if restarted {
            (self.log)(&format!(
                "restarting containerd: {}",
                self.restart.join(" ")
            ));
            command::run(&self.restart).map_err(UninstallError::Restart)?;
            let names = st.handlers.clone();
            cri::wait_for(
                &self.layout.on_host(&self.layout.cri_socket),
                self.cri_timeout,
                |s| {
                    if !s.runtime_ready {
                        return Err("RuntimeReady is false".into());
                    }
                    match names.iter().find(|n| s.runtimes.contains_key(*n)) {
                        Some(n) => Err(format!("handler `{n}` still registered")),
                        None => Ok(()),
                    }
                },
            )
            .map_err(UninstallError::CriVerify)?;
            (self.log)("CRI is ready without our handlers");
        }

        // 4: warm pools.
        self.drain_pools(&st);

        // 5: files.
        let mut files_removed = 0;
        for f in &st.files {
            if files::remove_if_exists(&self.layout.on_host(&f.path))
                .map_err(UninstallError::Files)?
            {
                files_removed += 1;
                (self.log)(&format!("removed {}", f.path.display()));
            }
        }
        let mut dirs = vec![
            self.layout.policy_dir.join("policies"),
            self.layout.policy_dir.clone(),
        ];
        // The forwarder's own directory (/usr/local/lib/gvisor-hardened) once empty; a
        // destination flag may point into a shared one, which stays even when empty.
        dirs.extend(
            self.layout
                .forwarder_path
                .parent()
                .filter(|d| d.file_name().is_some_and(|n| n == "gvisor-hardened"))
                .map(|d| d.to_path_buf()),
        );
        for dir in dirs {
            files::remove_dir_if_empty(&self.layout.on_host(&dir))
                .map_err(UninstallError::Files)?;
        }
        files::remove_if_exists(&self.layout.on_host(&self.layout.backup_path()))
            .map_err(UninstallError::Files)?;
        files::remove_if_exists(&state_path).map_err(UninstallError::Files)?;
        files::remove_dir_if_empty(&self.layout.on_host(&self.layout.state_dir))
            .map_err(UninstallError::Files)?;

        if let Some(e) = label_error {
            return Err(UninstallError::Label(e));
        }
        Ok(UninstallReport {
            config,
            restarted,
            files_removed,
            unlabelled,
        })
    }

    fn revert_config(&self, st: &InstallState) -> Result<String, UninstallError> {
        let config_path = self.layout.on_host(&st.config_path);
        match &st.config {
            ConfigRecord::DropIn { path, .. } => {
                let removed = files::remove_if_exists(&self.layout.on_host(path))
                    .map_err(UninstallError::Config)?;
                if removed {
                    (self.log)(&format!("removed drop-in {}", path.display()));
                    return Ok("drop-in removed".into());
                }
                Ok("unchanged".into())
            }
            ConfigRecord::InPlace {
                backup,
                installed_sha256,
            } => {
                let current = read_host_text(&config_path).map_err(UninstallError::Config)?;
                let untouched = current
                    .as_deref()
                    .is_some_and(|c| &sha256_hex(c.as_bytes()) == installed_sha256);
                if untouched {
                    let mode = files::mode_of(&config_path).unwrap_or(0o644);
                    match backup {
                        Some(b) => {
                            let bytes = files::read_optional(&self.layout.on_host(b))
                                .map_err(UninstallError::Config)?
                                .ok_or_else(|| {
                                    UninstallError::Config(files::FileError::Read {
                                        path: b.clone(),
                                        source: std::io::Error::new(
                                            std::io::ErrorKind::NotFound,
                                            "backup of the original config is gone",
                                        ),
                                    })
                                })?;
                            files::write_atomic(&config_path, &bytes, mode)
                                .map_err(UninstallError::Config)?;
                        }
                        None => {
                            files::remove_if_exists(&config_path)
                                .map_err(UninstallError::Config)?;
                        }
                    }
                    (self.log)(&format!(
                        "restored {} to its original bytes",
                        st.config_path.display()
                    ));
                    return Ok("restored".into());
                }
                let Some(current) = current else {
                    return Ok("unchanged".into());
                };
                let names: Vec<&str> = st.handlers.iter().map(String::as_str).collect();
                match plan::plan_surgical_removal(&st.config_path, &current, &names)? {
                    Some(text) => {
                        let mode = files::mode_of(&config_path).unwrap_or(0o644);
                        files::write_atomic(&config_path, text.as_bytes(), mode)
                            .map_err(UninstallError::Config)?;
                        (self.log)(&format!(
                            "{} changed since install: removed only our handler tables",
                            st.config_path.display()
                        ));
                        Ok("surgical".into())
                    }
                    None => Ok("unchanged".into()),
                }
            }
        }
    }

    /// What to undo when the state file is missing: our standard names and paths.
    fn fallback_state(&self) -> InstallState {
        let cfg = self.layout.containerd_config.clone();
        let main = read_host_text(&self.layout.on_host(&cfg)).ok().flatten();
        // A drop-in of ours, if the config imports a directory that would hold one.
        let dropin = main
            .as_deref()
            .and_then(|m| crate::config::parse(m).ok())
            .and_then(|doc| {
                let v = crate::config::detect_version(&doc).ok()?;
                match plan::choose_target(&cfg, v, &crate::config::imports(&doc)) {
                    plan::Target::DropIn { path } => Some(path),
                    plan::Target::InPlace => None,
                }
            })
            .filter(|p| p.file_name().is_some_and(|n| n == DROPIN_NAME))
            .filter(|p| self.layout.on_host(p).exists());
        let config = match dropin {
            Some(path) => ConfigRecord::DropIn {
                path,
                sha256: String::new(),
            },
            None => ConfigRecord::InPlace {
                backup: None,
                // Never matches: forces the surgical path, which keeps everything not ours.
                installed_sha256: String::new(),
            },
        };
        let mut handlers = vec![DEFAULT_HANDLER.to_string(), TOOL_HANDLER.to_string()];
        let mut files = vec![
            FileRecord {
                path: self.layout.shim_path.clone(),
                sha256: String::new(),
            },
            FileRecord {
                path: self.layout.forwarder_path.clone(),
                sha256: String::new(),
            },
            FileRecord {
                path: self.layout.default_policy_path(),
                sha256: String::new(),
            },
        ];
        let policies = self
            .layout
            .on_host(&self.layout.policy_dir.join("policies"));
        if let Ok(entries) = std::fs::read_dir(policies) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(class) = name.strip_suffix(".toml") {
                    if !handlers.iter().any(|h| h == class) {
                        handlers.push(class.to_string());
                    }
                    files.push(FileRecord {
                        path: self.layout.class_policy_path(class),
                        sha256: String::new(),
                    });
                }
            }
        }
        InstallState {
            config_path: cfg,
            config,
            handlers,
            files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_policies_with_a_warm_pool_are_drained_each_root_once() {
        let off = "version = 1\n";
        let on = "version = 1\n[pool]\nsize = 2\n";
        let on_elsewhere = "version = 1\n[pool]\nsize = 1\n[runsc]\nroot = \"/run/other\"\n";
        assert_eq!(pooled_runsc_roots([off]), Vec::<String>::new());
        assert_eq!(
            pooled_runsc_roots([off, on, on, on_elsewhere, "not toml ["]),
            vec![
                policy_injector::Policy::default().runsc.root,
                "/run/other".to_string()
            ]
        );
    }
}
