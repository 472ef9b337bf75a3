//! Checks of the merged configuration containerd reports (`containerd config dump`).
//!
//! containerd 1.x replaces a whole plugin section with an import's, so a config can look right
//! on disk and still lose `runtimes.runc` once merged: CRI then fails to start and the node goes
//! NotReady. Restarting is only allowed when the merged view has our handlers *and* the default
//! runtime still exists.

use thiserror::Error;
use toml_edit::{DocumentMut, Item};

use super::register::desired_values;
use super::{detect_version, disabled_plugins, parse, ConfigError, ConfigVersion};
use crate::handlers::Handler;

/// containerd's built-in default for `default_runtime_name` in both layouts.
const BUILTIN_DEFAULT_RUNTIME: &str = "runc";

#[derive(Debug, Error)]
pub enum MergedConfigError {
    #[error("merged config could not be read: {0}")]
    Config(#[from] ConfigError),
    #[error("merged config is unsafe to restart into: {}", problems.join("; "))]
    Unsafe { problems: Vec<String> },
}

/// What the merged configuration says, for messages and the CRI cross-check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedSummary {
    pub version: ConfigVersion,
    pub default_runtime: String,
    pub runtimes: Vec<String>,
}

/// Checks a merged config: the CRI plugin enabled, every handler present with our values, the
/// default runtime present. Returns every problem found, not only the first.
pub fn check_merged(dump: &str, handlers: &[Handler]) -> Result<MergedSummary, MergedConfigError> {
    let doc = parse(dump)?;
    let version = detect_version(&doc)?;
    let summary = summarize(&doc, version);
    let mut problems = Vec::new();

    let disabled = disabled_plugins(&doc);
    let cri_ids: &[&str] = match version {
        ConfigVersion::V2 => &["io.containerd.grpc.v1.cri", "cri"],
        ConfigVersion::V3 | ConfigVersion::V4 => {
            &["io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"]
        }
    };
    for id in cri_ids {
        if disabled.iter().any(|d| d == id) {
            problems.push(format!("the CRI plugin `{id}` is disabled"));
        }
    }

    let runtimes = runtimes_item(&doc, version);
    for handler in handlers {
        let Some(table) = runtimes.and_then(|r| r.get(&handler.name)) else {
            problems.push(format!("handler `{}` is missing", handler.name));
            continue;
        };
        for (path, want) in desired_values(handler) {
            let mut item = Some(table);
            for key in &path {
                item = item.and_then(|i| i.get(key));
            }
            if !want.matches(item) {
                let found = item
                    .map(|i| i.to_string().trim().to_string())
                    .unwrap_or_else(|| "nothing".to_string());
                problems.push(format!(
                    "handler `{}` has {} = {found}, expected {want}",
                    handler.name,
                    path.join(".")
                ));
            }
        }
    }

    if !summary.runtimes.contains(&summary.default_runtime) {
        problems.push(format!(
            "default runtime `{}` has no runtime table (CRI would refuse to start)",
            summary.default_runtime
        ));
    }

    if problems.is_empty() {
        Ok(summary)
    } else {
        Err(MergedConfigError::Unsafe { problems })
    }
}

fn runtimes_item(doc: &DocumentMut, version: ConfigVersion) -> Option<&Item> {
    let mut item = doc.as_item();
    for key in version.runtimes_path() {
        item = item.get(key)?;
    }
    Some(item)
}

fn summarize(doc: &DocumentMut, version: ConfigVersion) -> MergedSummary {
    let default_runtime = doc
        .get("plugins")
        .and_then(|p| p.get(version.cri_runtime_plugin()))
        .and_then(|p| p.get("containerd"))
        .and_then(|c| c.get("default_runtime_name"))
        .and_then(Item::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or(BUILTIN_DEFAULT_RUNTIME)
        .to_string();
    let runtimes = runtimes_item(doc, version)
        .and_then(Item::as_table_like)
        .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
        .unwrap_or_default();
    MergedSummary {
        version,
        default_runtime,
        runtimes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::register::register;
    use std::path::PathBuf;

    fn ours() -> Vec<Handler> {
        vec![Handler {
            name: "gvisor-hardened".into(),
            config_path: PathBuf::from("/etc/gvisor-hardened/policy.toml"),
            runtime_path: PathBuf::from("/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
        }]
    }

    const RUNC_V2: &str = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"runc\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n";

    #[test]
    fn merged_config_with_runc_and_ours_passes() {
        let mut doc = parse(RUNC_V2).unwrap();
        register(&mut doc, ConfigVersion::V2, &ours()).unwrap();
        let s = check_merged(&doc.to_string(), &ours()).unwrap();
        assert_eq!(s.default_runtime, "runc");
        assert_eq!(s.runtimes, vec!["runc", "gvisor-hardened"]);
    }

    #[test]
    fn merged_config_that_lost_runc_is_refused() {
        // What containerd 1.x reports after a drop-in that only adds our runtime.
        let mut doc = parse("version = 2\n").unwrap();
        register(&mut doc, ConfigVersion::V2, &ours()).unwrap();
        let err = check_merged(&doc.to_string(), &ours()).unwrap_err();
        assert!(
            err.to_string()
                .contains("default runtime `runc` has no runtime table"),
            "{err}"
        );
    }

    #[test]
    fn merged_config_without_our_handler_is_refused() {
        let err = check_merged(RUNC_V2, &ours()).unwrap_err();
        assert!(
            err.to_string()
                .contains("handler `gvisor-hardened` is missing"),
            "{err}"
        );
    }

    #[test]
    fn disabled_cri_plugin_is_refused() {
        let mut doc = parse(&format!(
            "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n{RUNC_V2}"
        ))
        .unwrap();
        register(&mut doc, ConfigVersion::V2, &ours()).unwrap();
        let err = check_merged(&doc.to_string(), &ours()).unwrap_err();
        assert!(err.to_string().contains("is disabled"), "{err}");
    }

    /// containerd 2.x dumps strings in single quotes; a later drop-in that re-registers our
    /// handler with another shim is named with both values as TOML.
    #[test]
    fn a_handler_shadowed_by_another_runtime_type_names_both_values() {
        let mut doc = parse(RUNC_V2).unwrap();
        register(&mut doc, ConfigVersion::V2, &ours()).unwrap();
        let dump = doc.to_string().replace(
            "runtime_type = \"io.containerd.gvisor-hardened.v1\"",
            "runtime_type = 'io.containerd.runsc.v1'",
        );
        let err = check_merged(&dump, &ours()).unwrap_err().to_string();
        assert!(
            err.contains(
                "handler `gvisor-hardened` has runtime_type = 'io.containerd.runsc.v1', \
                 expected \"io.containerd.gvisor-hardened.v1\""
            ),
            "{err}"
        );
    }

    #[test]
    fn a_handler_with_another_policy_path_is_refused() {
        let mut doc = parse(RUNC_V2).unwrap();
        register(&mut doc, ConfigVersion::V2, &ours()).unwrap();
        let mut other = ours();
        other[0].config_path = PathBuf::from("/elsewhere.toml");
        let err = check_merged(&doc.to_string(), &other).unwrap_err();
        assert!(err.to_string().contains("options.ConfigPath"), "{err}");
    }
}
