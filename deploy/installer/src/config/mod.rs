//! containerd configuration: version detection and the table paths of the CRI runtimes.
//!
//! Pure: text in, text or typed answers out. The imperative shell reads and writes the files.

pub mod merged;
pub mod register;

use thiserror::Error;
use toml_edit::DocumentMut;

/// The two configuration layouts containerd uses for CRI runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigVersion {
    /// containerd 1.x: `version = 2`, runtimes under `plugins."io.containerd.grpc.v1.cri"`.
    /// Imports replace whole plugin sections (the drop-in trap).
    V2,
    /// containerd 2.0-2.1: `version = 3`, runtimes under
    /// `plugins."io.containerd.cri.v1.runtime"`. Imports are merged deeply.
    V3,
    /// containerd 2.2 and later: `version = 4` (what `containerd config dump` and `config
    /// default` print there), the same CRI layout as version 3; only the server's own
    /// settings (`[grpc]`, `[ttrpc]`, `[debug]`, `[metrics]`) moved into plugins. containerd
    /// 2.2+ still reads version 3 files, migrating them.
    V4,
}

impl ConfigVersion {
    /// The plugin whose `containerd.runtimes` table holds the CRI runtime handlers.
    pub fn cri_runtime_plugin(self) -> &'static str {
        match self {
            ConfigVersion::V2 => "io.containerd.grpc.v1.cri",
            ConfigVersion::V3 | ConfigVersion::V4 => "io.containerd.cri.v1.runtime",
        }
    }

    pub fn number(self) -> i64 {
        match self {
            ConfigVersion::V2 => 2,
            ConfigVersion::V3 => 3,
            ConfigVersion::V4 => 4,
        }
    }

    /// Key path of the runtimes table, from the document root.
    pub fn runtimes_path(self) -> [&'static str; 4] {
        [
            "plugins",
            self.cri_runtime_plugin(),
            "containerd",
            "runtimes",
        ]
    }

    /// Human form for messages and the diff header.
    pub fn describe(self) -> &'static str {
        match self {
            ConfigVersion::V2 => "version 2 (containerd 1.x)",
            ConfigVersion::V3 => "version 3 (containerd 2.x)",
            ConfigVersion::V4 => "version 4 (containerd 2.2+)",
        }
    }
}

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("containerd config is not valid TOML: {0}")]
    Parse(#[from] toml_edit::TomlError),
    #[error(
        "containerd config version {found} is not supported (need 2 for containerd 1.x, 3 or 4 for 2.x); \
         a config without `version` is version 1: migrate it with `containerd config migrate`"
    )]
    UnsupportedVersion { found: String },
    #[error("containerd config key `{path}` is {found}, expected a table")]
    NotATable { path: String, found: &'static str },
}

/// Parses a config; comments, ordering and whitespace survive a round trip byte for byte.
pub fn parse(text: &str) -> Result<DocumentMut, ConfigError> {
    Ok(text.parse::<DocumentMut>()?)
}

/// Reads the top-level `version`. Absent means version 1 to containerd, which we refuse rather
/// than guess a layout.
pub fn detect_version(doc: &DocumentMut) -> Result<ConfigVersion, ConfigError> {
    match doc.get("version") {
        Some(item) => match item.as_integer() {
            Some(2) => Ok(ConfigVersion::V2),
            Some(3) => Ok(ConfigVersion::V3),
            Some(4) => Ok(ConfigVersion::V4),
            Some(n) => Err(ConfigError::UnsupportedVersion {
                found: n.to_string(),
            }),
            None => Err(ConfigError::UnsupportedVersion {
                found: format!("`{}`", item.to_string().trim()),
            }),
        },
        None => Err(ConfigError::UnsupportedVersion {
            found: "1 (no `version` key)".to_string(),
        }),
    }
}

/// True when the text holds no keys or tables at all (only whitespace/comments): containerd then
/// runs on built-in defaults, and an installer must start from `containerd config default`.
pub fn is_effectively_empty(doc: &DocumentMut) -> bool {
    doc.as_table().is_empty()
}

/// The `imports` globs of a config, in order.
pub fn imports(doc: &DocumentMut) -> Vec<String> {
    top_level_strings(doc, "imports")
}

/// Plugin ids listed in `disabled_plugins`.
pub fn disabled_plugins(doc: &DocumentMut) -> Vec<String> {
    top_level_strings(doc, "disabled_plugins")
}

/// The string items of the top-level array `key` (none when it is missing or not an array).
fn top_level_strings(doc: &DocumentMut, key: &str) -> Vec<String> {
    doc.get(key)
        .and_then(|i| i.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_2_and_3_are_detected() {
        assert_eq!(
            detect_version(&parse("version = 2\n").unwrap()).unwrap(),
            ConfigVersion::V2
        );
        assert_eq!(
            detect_version(&parse("version = 3\n").unwrap()).unwrap(),
            ConfigVersion::V3
        );
        assert_eq!(
            detect_version(&parse("version = 4\n").unwrap()).unwrap(),
            ConfigVersion::V4
        );
        assert_eq!(
            ConfigVersion::V4.runtimes_path(),
            ConfigVersion::V3.runtimes_path()
        );
    }

    #[test]
    fn missing_version_is_refused_as_version_1() {
        let err = detect_version(&parse("root = \"/x\"\n").unwrap()).unwrap_err();
        assert!(err.to_string().contains("no `version` key"), "{err}");
    }

    #[test]
    fn non_integer_version_is_refused() {
        let err = detect_version(&parse("version = \"2\"\n").unwrap()).unwrap_err();
        assert!(matches!(err, ConfigError::UnsupportedVersion { .. }));
    }

    #[test]
    fn comments_only_config_is_empty() {
        assert!(is_effectively_empty(&parse("# nothing here\n\n").unwrap()));
        assert!(!is_effectively_empty(&parse("version = 2\n").unwrap()));
    }

    #[test]
    fn imports_are_listed_in_order() {
        let doc = parse("version = 3\nimports = ['/a/*.toml', \"/b.toml\"]\n").unwrap();
        assert_eq!(imports(&doc), vec!["/a/*.toml", "/b.toml"]);
    }
}
