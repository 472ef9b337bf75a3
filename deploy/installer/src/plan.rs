//! Planning the containerd config change: where our handlers go and what the new text is.
//!
//! Pure: the caller passes the file contents it read (and `containerd config default` output
//! when the config is missing); the plan says what to write. Nothing here touches the host.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::config::{self, register, ConfigError, ConfigVersion};
use crate::handlers::Handler;

/// File name of our drop-in inside an imported conf.d directory (containerd 2.x only).
pub const DROPIN_NAME: &str = "gvisor-hardened.toml";

#[derive(Debug, Error)]
pub enum PlanError {
    #[error("{path}: {source}")]
    Config {
        path: PathBuf,
        #[source]
        source: ConfigError,
    },
    #[error(
        "{path}: adding our tables would reorder existing content (toml_edit cannot keep this \
         layout); add the handlers by hand or simplify the CRI section's dotted keys"
    )]
    LayoutNotPreserved { path: PathBuf },
    #[error("{path} is missing or empty and no `containerd config default` output was supplied")]
    NeedDefaultConfig { path: PathBuf },
}

/// Where the handler tables are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Edit the main config in place (always on containerd 1.x: see the drop-in trap).
    InPlace,
    /// A drop-in file in a directory the main config imports (containerd 2.x merges deeply).
    DropIn { path: PathBuf },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigAction {
    /// Everything is already registered: nothing to write, no restart.
    Unchanged,
    /// Replace the main config with this text.
    WriteMain { new_text: String },
    /// Write this drop-in; the main config is left alone.
    WriteDropIn { path: PathBuf, new_text: String },
}

/// The decided change, with what it was decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigPlan {
    pub version: ConfigVersion,
    /// Host path of the main config.
    pub config_path: PathBuf,
    /// The main config's bytes as found (`None`: the file did not exist).
    pub original: Option<String>,
    /// True when the starting point was `containerd config default` (missing/empty config).
    pub generated: bool,
    pub action: ConfigAction,
}

impl ConfigPlan {
    pub fn changes(&self) -> bool {
        self.action != ConfigAction::Unchanged
    }

    /// The (path, old text, new text) of the file the plan writes, for a diff.
    pub fn file_change(&self) -> Option<(PathBuf, String, String)> {
        match &self.action {
            ConfigAction::Unchanged => None,
            ConfigAction::WriteMain { new_text } => Some((
                self.config_path.clone(),
                self.original.clone().unwrap_or_default(),
                new_text.clone(),
            )),
            ConfigAction::WriteDropIn { path, new_text } => {
                Some((path.clone(), String::new(), new_text.clone()))
            }
        }
    }
}

/// Whether the main config (as read; `None` = absent) must be generated from the default.
pub fn needs_default(config_path: &Path, main: Option<&str>) -> Result<bool, PlanError> {
    match main {
        None => Ok(true),
        Some(text) => {
            let doc = config::parse(text).map_err(|source| PlanError::Config {
                path: config_path.to_path_buf(),
                source,
            })?;
            Ok(config::is_effectively_empty(&doc))
        }
    }
}

/// Plans the registration of `handlers`.
///
/// `read_existing` returns the current content of a host file (used for an existing drop-in),
/// so re-running on an installed node yields [`ConfigAction::Unchanged`].
pub fn plan_install(
    config_path: &Path,
    main: Option<&str>,
    default_config: Option<&str>,
    handlers: &[Handler],
    read_existing: &dyn Fn(&Path) -> Option<String>,
) -> Result<ConfigPlan, PlanError> {
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| PlanError::Config { path, source }
    };
    let generated = needs_default(config_path, main)?;
    let base = if generated {
        default_config.ok_or_else(|| PlanError::NeedDefaultConfig {
            path: config_path.to_path_buf(),
        })?
    } else {
        main.unwrap_or_default()
    };
    let mut doc = config::parse(base).map_err(err(config_path))?;
    let version = config::detect_version(&doc).map_err(err(config_path))?;

    // A generated config is written whole: containerd reads no imports without a main file.
    let target = if generated {
        Target::InPlace
    } else {
        choose_target(config_path, version, &config::imports(&doc))
    };

    let action = match target {
        Target::InPlace => {
            let fresh = !handlers.iter().any(|h| {
                register::runtimes_table(&doc, version).is_some_and(|r| r.get(&h.name).is_some())
            });
            let changed =
                register::register(&mut doc, version, handlers).map_err(err(config_path))?;
            if changed && fresh && !generated {
                // Fail closed on layout: our edit must be exactly "original + our tables".
                let new_text = doc.to_string();
                let names: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
                let back = plan_surgical_removal(config_path, &new_text, &names)?;
                if back.as_deref() != main {
                    return Err(PlanError::LayoutNotPreserved {
                        path: config_path.to_path_buf(),
                    });
                }
            }
            if changed || generated {
                ConfigAction::WriteMain {
                    new_text: doc.to_string(),
                }
            } else {
                ConfigAction::Unchanged
            }
        }
        Target::DropIn { path } => {
            let new_text = render_dropin(version, handlers).map_err(err(&path))?;
            if read_existing(&path).as_deref() == Some(new_text.as_str()) {
                ConfigAction::Unchanged
            } else {
                ConfigAction::WriteDropIn { path, new_text }
            }
        }
    };
    Ok(ConfigPlan {
        version,
        config_path: config_path.to_path_buf(),
        original: main.map(str::to_string),
        generated,
        action,
    })
}

/// Drop-ins only on 2.x, and only when an import glob of the main config picks up our file.
/// On 1.x a drop-in that touches the CRI section replaces that whole section, so never.
pub fn choose_target(config_path: &Path, version: ConfigVersion, imports: &[String]) -> Target {
    if version == ConfigVersion::V2 {
        return Target::InPlace;
    }
    let config_dir = config_path.parent().unwrap_or(Path::new("/"));
    for import in imports {
        // containerd resolves relative imports against the main config's directory.
        let pattern_path = config_dir.join(import);
        let Some(dir) = pattern_path.parent() else {
            continue;
        };
        // A wildcard in the directory part would make the drop-in's home ambiguous.
        if dir.to_string_lossy().contains(['*', '?', '[']) {
            continue;
        }
        let candidate = dir.join(DROPIN_NAME);
        let Ok(pattern) = glob::Pattern::new(&pattern_path.to_string_lossy()) else {
            continue;
        };
        if pattern.matches_path(&candidate) {
            return Target::DropIn { path: candidate };
        }
    }
    Target::InPlace
}

/// A self-contained drop-in with only our handler tables.
pub fn render_dropin(version: ConfigVersion, handlers: &[Handler]) -> Result<String, ConfigError> {
    let header = format!(
        "# Written by gvisor-hardened-installer; its uninstall removes this file.\n\
         # Registers the gvisor-hardened CRI runtime handlers.\nversion = {}\n",
        version.number()
    );
    let mut doc = config::parse(&header)?;
    register::register(&mut doc, version, handlers)?;
    Ok(doc.to_string())
}

/// Plans the removal of our handlers from a config whose bytes are not the ones we wrote (an
/// operator changed it after install): remove our tables, keep everything else.
pub fn plan_surgical_removal(
    config_path: &Path,
    current: &str,
    names: &[&str],
) -> Result<Option<String>, PlanError> {
    let err = |source| PlanError::Config {
        path: config_path.to_path_buf(),
        source,
    };
    let mut doc = config::parse(current).map_err(err)?;
    let version = config::detect_version(&doc).map_err(err)?;
    let changed = register::unregister(&mut doc, version, names).map_err(err)?;
    Ok(changed.then(|| doc.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handlers() -> Vec<Handler> {
        Handler::standard_set(
            Path::new("/etc/gvisor-hardened"),
            Path::new("/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
            &["gvisor-hardened-tool".to_string()],
        )
    }

    fn none(_: &Path) -> Option<String> {
        None
    }

    #[test]
    fn v2_with_conf_d_import_is_still_edited_in_place() {
        let imports = vec!["/etc/containerd/conf.d/*.toml".to_string()];
        let t = choose_target(
            Path::new("/etc/containerd/config.toml"),
            ConfigVersion::V2,
            &imports,
        );
        assert_eq!(t, Target::InPlace);
    }

    #[test]
    fn v3_with_conf_d_import_gets_a_drop_in() {
        let imports = vec!["/etc/containerd/conf.d/*.toml".to_string()];
        let t = choose_target(
            Path::new("/etc/containerd/config.toml"),
            ConfigVersion::V3,
            &imports,
        );
        assert_eq!(
            t,
            Target::DropIn {
                path: PathBuf::from("/etc/containerd/conf.d/gvisor-hardened.toml")
            }
        );
    }

    #[test]
    fn v3_relative_import_resolves_against_the_config_dir() {
        let imports = vec!["conf.d/*.toml".to_string()];
        let t = choose_target(
            Path::new("/etc/containerd/config.toml"),
            ConfigVersion::V3,
            &imports,
        );
        assert_eq!(
            t,
            Target::DropIn {
                path: PathBuf::from("/etc/containerd/conf.d/gvisor-hardened.toml")
            }
        );
    }

    #[test]
    fn v3_import_of_single_files_only_means_in_place() {
        let imports = vec!["/etc/containerd/extra.toml".to_string()];
        let t = choose_target(
            Path::new("/etc/containerd/config.toml"),
            ConfigVersion::V3,
            &imports,
        );
        assert_eq!(t, Target::InPlace);
    }

    #[test]
    fn missing_config_without_default_is_an_error() {
        let err = plan_install(Path::new("/c.toml"), None, None, &handlers(), &none).unwrap_err();
        assert!(matches!(err, PlanError::NeedDefaultConfig { .. }));
    }

    #[test]
    fn missing_config_is_generated_from_the_default_even_with_imports() {
        let default = "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n";
        let plan = plan_install(
            Path::new("/etc/containerd/config.toml"),
            None,
            Some(default),
            &handlers(),
            &none,
        )
        .unwrap();
        assert!(plan.generated);
        assert!(matches!(plan.action, ConfigAction::WriteMain { .. }));
        assert_eq!(plan.original, None);
    }

    #[test]
    fn existing_identical_drop_in_is_unchanged() {
        let main = "version = 3\nimports = ['/etc/containerd/conf.d/*.toml']\n";
        let dropin = render_dropin(ConfigVersion::V3, &handlers()).unwrap();
        let read = move |_: &Path| Some(dropin.clone());
        let plan = plan_install(
            Path::new("/etc/containerd/config.toml"),
            Some(main),
            None,
            &handlers(),
            &read,
        )
        .unwrap();
        assert_eq!(plan.action, ConfigAction::Unchanged);
    }

    #[test]
    fn a_layout_toml_edit_would_reorder_is_refused() {
        // `containerd` is first created by a sub-table header and then extended with dotted keys:
        // toml_edit re-emits the dotted keys in another order once the tree is touched.
        let main = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n[plugins.\"io.containerd.grpc.v1.cri\"]\nsandbox_image = \"p\"\ncontainerd.default_runtime_name = \"runc\"\nx = 1\n";
        let err =
            plan_install(Path::new("/c.toml"), Some(main), None, &handlers(), &none).unwrap_err();
        assert!(matches!(err, PlanError::LayoutNotPreserved { .. }), "{err}");
    }

    #[test]
    fn surgical_removal_keeps_operator_edits() {
        let main = "version = 2\nroot = \"/x\"\n";
        let plan =
            plan_install(Path::new("/c.toml"), Some(main), None, &handlers(), &none).unwrap();
        let ConfigAction::WriteMain { new_text } = plan.action else {
            panic!("expected in-place")
        };
        let edited = new_text.replace("root = \"/x\"", "root = \"/y\"");
        let out = plan_surgical_removal(
            Path::new("/c.toml"),
            &edited,
            &["gvisor-hardened", "gvisor-hardened-tool"],
        )
        .unwrap()
        .unwrap();
        assert!(out.contains("root = \"/y\""));
        assert!(!out.contains("gvisor-hardened"), "{out}");
    }
}
