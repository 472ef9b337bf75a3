//! `install`: the steps, in order. Check first, then act; each step has its own error.
//!
//! 1. Validate the sources (shim, forwarder, policies) — nothing is written before this passes.
//! 2. Read the containerd config (or `containerd config default` when missing) and plan.
//! 3. Copy the shim, the forwarder and the policies atomically, sha256-verified (no restart needed for these:
//!    the shim is exec'd per pod and reads its policy at start).
//! 4. If the config changes: write the candidate, `containerd config dump` it, and refuse unless
//!    the merged view has our handlers and the default runtime. Keep the original bytes, then
//!    move the candidate into place and record the state (before the restart, so uninstall can
//!    always reverse it).
//! 5. Restart containerd, then poll CRI `Status` until our handlers are there. On failure, roll
//!    the config back and restart again, so a node is never left with a broken CRI.
//! 6. Label the node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::command::{self, Containerd};
use crate::config::merged::check_merged;
use crate::cri::{self, CriStatus};
use crate::error::InstallError;
use crate::files::{self, sha256_hex, FileOutcome};
use crate::handlers::{Handler, NODE_LABEL, NODE_LABEL_VALUE, RUNTIME_TYPE};
use crate::kube::KubeClient;
use crate::layout::Layout;
use crate::plan::{self, ConfigAction, ConfigPlan};
use crate::sources::{classes, Sources};
use crate::state::{self, ConfigRecord, FileRecord, InstallState};

/// Who to label: the API client and this node's name (from the downward API).
#[derive(Debug, Clone)]
pub struct Labeller {
    pub client: KubeClient,
    pub node: String,
}

/// Everything the installer needs to act on one node.
pub struct Node {
    pub layout: Layout,
    pub sources: Sources,
    pub containerd: Containerd,
    /// The restart command (argv), e.g. `nsenter -t 1 -m -- systemctl restart containerd`.
    pub restart: Vec<String>,
    /// How long CRI may take to show the expected state after a restart.
    pub cri_timeout: Duration,
    pub labeller: Option<Labeller>,
    /// Progress lines (stderr in the binary, captured in tests).
    pub log: Box<dyn Fn(&str) + Send + Sync>,
}

/// What an install did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallReport {
    pub handlers: Vec<String>,
    pub files_written: usize,
    pub config_changed: bool,
    pub restarted: bool,
    pub labelled: bool,
}

impl Node {
    /// Steps 1-2 only: the plan and the handlers, touching nothing.
    pub fn plan(&self) -> Result<(ConfigPlan, Vec<Handler>), InstallError> {
        let policies = self.sources.validate().map_err(InstallError::Sources)?;
        let handlers = self.layout.handlers(&classes(&policies));
        let plan = self.plan_config(&handlers)?;
        Ok((plan, handlers))
    }

    fn plan_config(&self, handlers: &[Handler]) -> Result<ConfigPlan, InstallError> {
        let cfg = &self.layout.containerd_config;
        let main = read_text(&self.layout.on_host(cfg)).map_err(InstallError::ReadConfig)?;
        let default = if plan::needs_default(cfg, main.as_deref())? {
            (self.log)(&format!(
                "{} is missing or empty: starting from `containerd config default`",
                cfg.display()
            ));
            Some(self.containerd.config_default().map_err(|source| {
                InstallError::DefaultConfig {
                    path: cfg.clone(),
                    source,
                }
            })?)
        } else {
            None
        };
        let read_existing = |p: &Path| read_text(&self.layout.on_host(p)).ok().flatten();
        Ok(plan::plan_install(
            cfg,
            main.as_deref(),
            default.as_deref(),
            handlers,
            &read_existing,
        )?)
    }

    pub fn install(&self) -> Result<InstallReport, InstallError> {
        // 1-2: validate and plan.
        let (plan, handlers) = self.plan()?;
        let policies = self.sources.validate().map_err(InstallError::Sources)?;
        let names: Vec<String> = handlers.iter().map(|h| h.name.clone()).collect();
        for p in policies.iter().filter(|p| p.audit_mode) {
            (self.log)(&format!(
                "WARNING: policy {} is in audit mode (--allow-audit-mode): containers under \
                 handler `{}` run unhardened",
                p.path.display(),
                p.class
                    .as_deref()
                    .unwrap_or(crate::handlers::DEFAULT_HANDLER)
            ));
        }
        (self.log)(&format!(
            "containerd config {} is {}; handlers: {}",
            plan.config_path.display(),
            plan.version.describe(),
            names.join(", ")
        ));

        // 3: files.
        let mut file_records = Vec::new();
        let mut files_written = 0;
        let mut copies = vec![
            (
                self.sources.shim.clone(),
                self.layout.shim_path.clone(),
                0o755,
            ),
            (
                self.sources.forwarder.clone(),
                self.layout.forwarder_path.clone(),
                0o755,
            ),
        ];
        for p in &policies {
            let dest = match &p.class {
                None => self.layout.default_policy_path(),
                Some(c) => self.layout.class_policy_path(c),
            };
            copies.push((p.path.clone(), dest, 0o644));
        }
        for (src, dest, mode) in copies {
            let (outcome, sha256) = files::install_file(&src, &self.layout.on_host(&dest), mode)
                .map_err(InstallError::Files)?;
            if outcome == FileOutcome::Written {
                files_written += 1;
                (self.log)(&format!("installed {} (sha256 {sha256})", dest.display()));
            }
            file_records.push(FileRecord { path: dest, sha256 });
        }

        let state_path = self.layout.on_host(&self.layout.state_file());
        let previous = state::load(&state_path)?;

        // 4-5: config, restart, verify.
        let mut restarted = false;
        let config_record = match &plan.action {
            ConfigAction::Unchanged => {
                (self.log)("containerd config already has our handlers: nothing to change");
                // A previous run may have died between writing and restarting: if CRI does
                // not show the handlers yet, restart now.
                if let Err(why) = cri::status(
                    &self.layout.on_host(&self.layout.cri_socket),
                    Duration::from_secs(5),
                )
                .map_err(|e| e.to_string())
                .and_then(|s| handlers_present(&s, &handlers))
                {
                    (self.log)(&format!(
                        "CRI does not show the handlers yet ({why}): restarting"
                    ));
                    self.restart_and_verify(&handlers, &plan, None)?;
                    restarted = true;
                }
                match previous.as_ref() {
                    Some(p) => p.config.clone(),
                    None => self.record_for_unchanged(&plan)?,
                }
            }
            ConfigAction::WriteMain { new_text } => {
                let record = self.write_main(&plan, new_text, &handlers, previous.as_ref())?;
                self.save_state(&state_path, &plan, &record, &names, &file_records)?;
                self.restart_and_verify(&handlers, &plan, previous.as_ref())?;
                restarted = true;
                record
            }
            ConfigAction::WriteDropIn { path, new_text } => {
                let record = self.write_dropin(path, new_text, &handlers)?;
                self.save_state(&state_path, &plan, &record, &names, &file_records)?;
                self.restart_and_verify(&handlers, &plan, previous.as_ref())?;
                restarted = true;
                record
            }
        };
        self.save_state(&state_path, &plan, &config_record, &names, &file_records)?;

        // 6: label.
        let labelled = match &self.labeller {
            Some(l) => {
                l.client
                    .set_node_label(&l.node, NODE_LABEL, Some(NODE_LABEL_VALUE))
                    .map_err(InstallError::Label)?;
                (self.log)(&format!(
                    "labelled node {} {NODE_LABEL}={NODE_LABEL_VALUE}",
                    l.node
                ));
                true
            }
            None => false,
        };
        Ok(InstallReport {
            handlers: names,
            files_written,
            config_changed: plan.changes(),
            restarted,
            labelled,
        })
    }

    fn save_state(
        &self,
        path: &Path,
        plan: &ConfigPlan,
        record: &ConfigRecord,
        names: &[String],
        files: &[FileRecord],
    ) -> Result<(), InstallError> {
        state::save(
            path,
            &InstallState {
                config_path: plan.config_path.clone(),
                config: record.clone(),
                handlers: names.to_vec(),
                files: files.to_vec(),
            },
        )?;
        Ok(())
    }

    /// A node already configured (by an earlier run whose state was lost, or by hand).
    fn record_for_unchanged(&self, plan: &ConfigPlan) -> Result<ConfigRecord, InstallError> {
        let backup = self.layout.backup_path();
        let has_backup = files::read_optional(&self.layout.on_host(&backup))
            .map_err(InstallError::ReadConfig)?
            .is_some();
        Ok(ConfigRecord::InPlace {
            backup: has_backup.then_some(backup),
            installed_sha256: sha256_hex(plan.original.clone().unwrap_or_default().as_bytes()),
        })
    }

    fn write_main(
        &self,
        plan: &ConfigPlan,
        new_text: &str,
        handlers: &[Handler],
        previous: Option<&InstallState>,
    ) -> Result<ConfigRecord, InstallError> {
        let config = self.layout.on_host(&plan.config_path);
        let candidate = self.layout.candidate_path();
        let mode = files::mode_of(&config).unwrap_or(0o644);
        files::write_atomic(&self.layout.on_host(&candidate), new_text.as_bytes(), mode)
            .map_err(InstallError::WriteConfig)?;
        if let Err(e) = self.check_candidate(&candidate, handlers) {
            let _ = files::remove_if_exists(&self.layout.on_host(&candidate));
            return Err(e);
        }
        // Keep the pre-install bytes, unless an earlier run of ours already kept them (the
        // current file is then partly ours and must not become the "original").
        let backup = match previous.map(|p| &p.config) {
            Some(ConfigRecord::InPlace { backup, .. }) => backup.clone(),
            _ => match &plan.original {
                Some(orig) => {
                    let b = self.layout.backup_path();
                    files::write_atomic(&self.layout.on_host(&b), orig.as_bytes(), mode)
                        .map_err(InstallError::WriteConfig)?;
                    Some(b)
                }
                None => None,
            },
        };
        std::fs::rename(self.layout.on_host(&candidate), &config).map_err(|source| {
            InstallError::WriteConfig(files::FileError::Write {
                path: config.clone(),
                source,
            })
        })?;
        (self.log)(&format!("edited {} in place", plan.config_path.display()));
        Ok(ConfigRecord::InPlace {
            backup,
            installed_sha256: sha256_hex(new_text.as_bytes()),
        })
    }

    fn write_dropin(
        &self,
        path: &Path,
        text: &str,
        handlers: &[Handler],
    ) -> Result<ConfigRecord, InstallError> {
        let on_host = self.layout.on_host(path);
        files::write_atomic(&on_host, text.as_bytes(), 0o644).map_err(InstallError::WriteConfig)?;
        if let Err(e) = self.check_candidate(&self.layout.containerd_config, handlers) {
            let _ = files::remove_if_exists(&on_host);
            return Err(e);
        }
        (self.log)(&format!("wrote drop-in {}", path.display()));
        Ok(ConfigRecord::DropIn {
            path: path.to_path_buf(),
            sha256: sha256_hex(text.as_bytes()),
        })
    }

    /// The drop-in trap guard: ask the node's own containerd what it would run with.
    fn check_candidate(&self, config: &Path, handlers: &[Handler]) -> Result<(), InstallError> {
        let dump = self
            .containerd
            .config_dump(config)
            .map_err(InstallError::Dump)?;
        let summary = check_merged(&dump, handlers).map_err(InstallError::Refused)?;
        (self.log)(&format!(
            "merged config ({}) has runtimes [{}], default `{}`",
            summary.version.describe(),
            summary.runtimes.join(", "),
            summary.default_runtime
        ));
        Ok(())
    }

    fn restart_and_verify(
        &self,
        handlers: &[Handler],
        plan: &ConfigPlan,
        previous: Option<&InstallState>,
    ) -> Result<(), InstallError> {
        (self.log)(&format!(
            "restarting containerd: {}",
            self.restart.join(" ")
        ));
        if let Err(source) = command::run(&self.restart) {
            let rollback = self.rollback(plan, previous);
            return Err(InstallError::Restart { source, rollback });
        }
        let socket = self.layout.on_host(&self.layout.cri_socket);
        match cri::wait_for(&socket, self.cri_timeout, |s| handlers_present(s, handlers)) {
            Ok(_) => {
                (self.log)("CRI reports the handlers and RuntimeReady");
                Ok(())
            }
            Err(source) => {
                let rollback = self.rollback(plan, previous);
                Err(InstallError::CriVerify { source, rollback })
            }
        }
    }

    /// Puts the config back as it was before this run and restarts once more.
    fn rollback(&self, plan: &ConfigPlan, previous: Option<&InstallState>) -> String {
        let config = self.layout.on_host(&plan.config_path);
        let restored = match &plan.action {
            ConfigAction::WriteMain { .. } => match &plan.original {
                Some(orig) => files::write_atomic(
                    &config,
                    orig.as_bytes(),
                    files::mode_of(&config).unwrap_or(0o644),
                )
                .map(|_| ()),
                None => files::remove_if_exists(&config).map(|_| ()),
            },
            ConfigAction::WriteDropIn { path, .. } => {
                files::remove_if_exists(&self.layout.on_host(path)).map(|_| ())
            }
            ConfigAction::Unchanged => Ok(()),
        };
        if let Err(e) = restored {
            return format!("; rollback failed to restore the config: {e}");
        }
        if previous.is_none() {
            let _ = files::remove_if_exists(&self.layout.on_host(&self.layout.backup_path()));
            let _ = files::remove_if_exists(&self.layout.on_host(&self.layout.state_file()));
        }
        if let Err(e) = command::run(&self.restart) {
            return format!("; config rolled back, but the restart failed: {e}");
        }
        let socket = self.layout.on_host(&self.layout.cri_socket);
        let ready = cri::wait_for(&socket, self.cri_timeout, |s| {
            if s.runtime_ready {
                Ok(())
            } else {
                Err("RuntimeReady is false".into())
            }
        });
        match ready {
            Ok(_) => "; config rolled back and containerd restarted (CRI ready)".to_string(),
            Err(e) => {
                format!("; config rolled back and containerd restarted, but CRI is not ready: {e}")
            }
        }
    }
}

/// Install's acceptance test on a CRI status.
pub fn handlers_present(s: &CriStatus, handlers: &[Handler]) -> Result<(), String> {
    if !s.runtime_ready {
        return Err("RuntimeReady is false".into());
    }
    for h in handlers {
        match s.runtimes.get(&h.name) {
            None => return Err(format!("handler `{}` not registered", h.name)),
            Some(t) if t != RUNTIME_TYPE => {
                return Err(format!("handler `{}` has runtime type `{t}`", h.name))
            }
            Some(_) => {}
        }
        let want = h.config_path.display().to_string();
        if s.config_paths.get(&h.name) != Some(&want) {
            return Err(format!("handler `{}` has another ConfigPath", h.name));
        }
    }
    Ok(())
}

fn read_text(path: &Path) -> Result<Option<String>, files::FileError> {
    match files::read_optional(path)? {
        None => Ok(None),
        Some(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|e| files::FileError::Read {
                path: PathBuf::from(path),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            }),
    }
}

pub(crate) fn read_host_text(path: &Path) -> Result<Option<String>, files::FileError> {
    read_text(path)
}
