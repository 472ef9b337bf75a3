//! Adding and removing our runtime handler tables in a parsed config, layout preserved.
//!
//! Only the tables of our handlers are touched; every other byte of the document survives. New
//! tables copy the indentation of an existing sibling runtime (e.g. `runc`) so an edited
//! `containerd config default` still reads like one.

use toml_edit::{value, Array, DocumentMut, Item, Table};

use super::{ConfigError, ConfigVersion};
use crate::handlers::{Handler, OPTIONS_TYPE_URL, POD_ANNOTATIONS, RUNTIME_TYPE};

/// Marker comment above each handler table we add: tells an operator who owns it.
pub const MANAGED_COMMENT: &str =
    "# Managed by gvisor-hardened-installer: removed by its uninstall.";

/// The values a registered handler must carry, as (key path below the handler table, value).
pub fn desired_values(handler: &Handler) -> Vec<(Vec<&'static str>, DesiredValue)> {
    vec![
        (
            vec!["runtime_type"],
            DesiredValue::Str(RUNTIME_TYPE.to_string()),
        ),
        (
            vec!["runtime_path"],
            DesiredValue::Str(handler.runtime_path.display().to_string()),
        ),
        (
            vec!["pod_annotations"],
            DesiredValue::StrList(vec![POD_ANNOTATIONS.to_string()]),
        ),
        (
            vec!["options", "TypeUrl"],
            DesiredValue::Str(OPTIONS_TYPE_URL.to_string()),
        ),
        (
            vec!["options", "ConfigPath"],
            DesiredValue::Str(handler.config_path.display().to_string()),
        ),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DesiredValue {
    Str(String),
    StrList(Vec<String>),
}

/// As TOML, the way an operator would write it (messages put it beside what containerd dumped).
impl std::fmt::Display for DesiredValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.to_item().to_string().trim())
    }
}

impl DesiredValue {
    /// Does a TOML item hold this value (formatting ignored)?
    pub fn matches(&self, item: Option<&Item>) -> bool {
        let Some(v) = item.and_then(Item::as_value) else {
            return false;
        };
        match self {
            DesiredValue::Str(s) => v.as_str() == Some(s.as_str()),
            DesiredValue::StrList(list) => v.as_array().is_some_and(|a| {
                a.len() == list.len() && a.iter().zip(list).all(|(x, y)| x.as_str() == Some(y))
            }),
        }
    }

    pub(crate) fn to_item(&self) -> Item {
        match self {
            DesiredValue::Str(s) => value(s.as_str()),
            DesiredValue::StrList(list) => {
                let mut a = Array::new();
                for s in list {
                    a.push(s.as_str());
                }
                value(a)
            }
        }
    }
}

/// Whether the handler is present with all our values (extra keys an operator added are fine).
pub fn is_registered(doc: &DocumentMut, version: ConfigVersion, handler: &Handler) -> bool {
    let Some(table) = runtimes_table(doc, version).and_then(|t| t.get(&handler.name)) else {
        return false;
    };
    desired_values(handler).iter().all(|(path, want)| {
        let mut item = table;
        for key in &path[..path.len() - 1] {
            match item.get(key) {
                Some(next) => item = next,
                None => return false,
            }
        }
        want.matches(item.get(path[path.len() - 1]))
    })
}

/// The runtimes table, if the document has one.
pub fn runtimes_table(doc: &DocumentMut, version: ConfigVersion) -> Option<&Item> {
    let mut item = doc.as_item();
    for key in version.runtimes_path() {
        item = item.get(key)?;
    }
    Some(item)
}

/// Adds or updates the handler tables. Returns whether the document changed.
pub fn register(
    doc: &mut DocumentMut,
    version: ConfigVersion,
    handlers: &[Handler],
) -> Result<bool, ConfigError> {
    let todo: Vec<&Handler> = handlers
        .iter()
        .filter(|h| !is_registered(doc, version, h))
        .collect();
    if todo.is_empty() {
        return Ok(false);
    }
    let runtimes = runtimes_table_mut(doc, version)?;
    let style = Style::from_siblings(runtimes);
    for handler in todo {
        let exists = runtimes.contains_key(&handler.name);
        if !exists {
            let mut t = Table::new();
            t.decor_mut().set_prefix(format!(
                "{}{indent}{MANAGED_COMMENT}\n{indent}",
                style.header_prefix,
                indent = style.header_indent
            ));
            runtimes.insert(&handler.name, Item::Table(t));
        }
        let table = runtimes
            .get_mut(&handler.name)
            .and_then(Item::as_table_mut)
            .ok_or_else(|| ConfigError::NotATable {
                path: format!("{}.{}", version.runtimes_path().join("."), handler.name),
                found: "not a table",
            })?;
        for (path, want) in desired_values(handler) {
            set_value(table, &path, want.to_item(), &style, &handler.name, version)?;
        }
    }
    Ok(true)
}

/// Removes the named handler tables. Returns whether the document changed.
pub fn unregister(
    doc: &mut DocumentMut,
    version: ConfigVersion,
    names: &[&str],
) -> Result<bool, ConfigError> {
    if runtimes_table(doc, version).is_none() {
        return Ok(false);
    }
    let runtimes = runtimes_table_mut(doc, version)?;
    let mut changed = false;
    for name in names {
        changed |= runtimes.remove(name).is_some();
    }
    Ok(changed)
}

fn set_value(
    table: &mut Table,
    path: &[&str],
    item: Item,
    style: &Style,
    handler: &str,
    version: ConfigVersion,
) -> Result<(), ConfigError> {
    match path {
        [key] => {
            table.insert(key, item);
            if let Some(mut k) = table.key_mut(key) {
                k.leaf_decor_mut().set_prefix(style.key_indent.clone());
            }
            Ok(())
        }
        [sub, rest @ ..] => {
            if !table.contains_key(sub) {
                let mut t = Table::new();
                t.decor_mut().set_prefix(style.sub_header_prefix.clone());
                table.insert(sub, Item::Table(t));
            }
            let sub_table = table
                .get_mut(sub)
                .and_then(Item::as_table_mut)
                .ok_or_else(|| ConfigError::NotATable {
                    path: format!("{}.{handler}.{sub}", version.runtimes_path().join(".")),
                    found: "not a table",
                })?;
            let inner = Style {
                key_indent: style.sub_key_indent.clone(),
                ..style.clone()
            };
            set_value(sub_table, rest, item, &inner, handler, version)
        }
        [] => Ok(()),
    }
}

/// Walks to the runtimes table, creating missing tables as implicit ones (no empty headers).
fn runtimes_table_mut(
    doc: &mut DocumentMut,
    version: ConfigVersion,
) -> Result<&mut Table, ConfigError> {
    let mut table = doc.as_table_mut();
    let mut walked = Vec::new();
    for key in version.runtimes_path() {
        walked.push(key);
        if !table.contains_key(key) {
            let mut t = Table::new();
            t.set_implicit(true);
            table.insert(key, Item::Table(t));
        }
        let found = type_name(table.get(key));
        table = table
            .get_mut(key)
            .and_then(Item::as_table_mut)
            .ok_or_else(|| ConfigError::NotATable {
                path: walked.join("."),
                found,
            })?;
    }
    Ok(table)
}

fn type_name(item: Option<&Item>) -> &'static str {
    match item {
        Some(Item::Value(v)) if v.is_inline_table() => "an inline table",
        Some(Item::Value(_)) => "a value",
        Some(Item::ArrayOfTables(_)) => "an array of tables",
        Some(Item::Table(_)) => "a table",
        Some(Item::None) | None => "missing",
    }
}

/// Whitespace copied from an existing runtime table so new tables line up with it.
#[derive(Debug, Clone)]
struct Style {
    header_prefix: String,
    header_indent: String,
    key_indent: String,
    sub_header_prefix: String,
    sub_key_indent: String,
}

impl Style {
    fn from_siblings(runtimes: &Table) -> Style {
        let mut style = Style {
            header_prefix: "\n".to_string(),
            header_indent: String::new(),
            key_indent: String::new(),
            sub_header_prefix: "\n".to_string(),
            sub_key_indent: String::new(),
        };
        let Some(sibling) = runtimes.iter().find_map(|(_, i)| i.as_table()) else {
            return style;
        };
        if let Some(prefix) = sibling.decor().prefix().and_then(|p| p.as_str()) {
            let (blank, indent) = split_indent(prefix);
            style.header_prefix = if blank.is_empty() { "\n".into() } else { blank };
            style.header_indent = indent;
        }
        if let Some(k) = first_key_indent(sibling) {
            style.key_indent = k;
        }
        if let Some(opts) = sibling.get("options").and_then(Item::as_table) {
            if let Some(prefix) = opts.decor().prefix().and_then(|p| p.as_str()) {
                style.sub_header_prefix = prefix.to_string();
            }
            if let Some(k) = first_key_indent(opts) {
                style.sub_key_indent = k;
            }
        } else {
            style.sub_header_prefix = format!("\n{}", style.header_indent);
            style.sub_key_indent = style.key_indent.clone();
        }
        style
    }
}

/// Splits a header prefix into its leading part (blank lines, comments) and the indentation of
/// the header line itself. Comments of the sibling are not copied: only the blank lines.
fn split_indent(prefix: &str) -> (String, String) {
    let indent_start = prefix.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let indent = prefix[indent_start..].to_string();
    let newlines = prefix[..indent_start].matches('\n').count().min(1);
    ("\n".repeat(newlines), indent)
}

fn first_key_indent(table: &Table) -> Option<String> {
    let (key, item) = table.iter().find(|(_, i)| i.is_value())?;
    let _ = item;
    table
        .key(key)
        .and_then(|k| k.leaf_decor().prefix())
        .and_then(|p| p.as_str())
        .map(|s| s.rsplit('\n').next().unwrap_or(s).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use std::path::PathBuf;

    fn handler(name: &str) -> Handler {
        Handler {
            name: name.to_string(),
            config_path: PathBuf::from(format!("/etc/gvisor-hardened/{name}.toml")),
            runtime_path: PathBuf::from("/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
        }
    }

    #[test]
    fn register_into_empty_v3_creates_the_path_without_empty_headers() {
        let mut doc = parse("version = 3\n").unwrap();
        assert!(register(&mut doc, ConfigVersion::V3, &[handler("gvisor-hardened")]).unwrap());
        let out = doc.to_string();
        assert!(!out.contains("[plugins]\n"), "{out}");
        assert!(
            out.contains(
                "[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gvisor-hardened]"
            ),
            "{out}"
        );
        assert!(is_registered(
            &doc,
            ConfigVersion::V3,
            &handler("gvisor-hardened")
        ));
    }

    #[test]
    fn register_twice_changes_nothing_the_second_time() {
        let mut doc = parse("version = 2\n").unwrap();
        let hs = [handler("a"), handler("b")];
        assert!(register(&mut doc, ConfigVersion::V2, &hs).unwrap());
        let once = doc.to_string();
        assert!(!register(&mut doc, ConfigVersion::V2, &hs).unwrap());
        assert_eq!(doc.to_string(), once);
    }

    #[test]
    fn register_fixes_a_drifted_value_and_keeps_operator_keys() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.a]\nruntime_type = \"other\"\nprivileged_without_host_devices = true\n";
        let mut doc = parse(text).unwrap();
        assert!(register(&mut doc, ConfigVersion::V2, &[handler("a")]).unwrap());
        let out = doc.to_string();
        assert!(
            out.contains("runtime_type = \"io.containerd.gvisor-hardened.v1\""),
            "{out}"
        );
        assert!(
            out.contains("privileged_without_host_devices = true"),
            "{out}"
        );
    }

    #[test]
    fn unregister_removes_only_our_tables() {
        let text = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nruntime_type = \"io.containerd.runc.v2\"\n";
        let mut doc = parse(text).unwrap();
        register(&mut doc, ConfigVersion::V2, &[handler("a")]).unwrap();
        assert!(unregister(&mut doc, ConfigVersion::V2, &["a"]).unwrap());
        assert!(doc.to_string().contains("runtimes.runc]"));
        assert!(!doc.to_string().contains("runtimes.a"));
        assert!(!unregister(&mut doc, ConfigVersion::V2, &["a"]).unwrap());
    }

    #[test]
    fn runtimes_as_a_value_is_a_typed_error() {
        let text =
            "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd]\nruntimes = 5\n";
        let mut doc = parse(text).unwrap();
        let err = register(&mut doc, ConfigVersion::V3, &[handler("a")]).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::NotATable {
                    found: "a value",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn new_tables_copy_the_sibling_indentation() {
        let text = "version = 2\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n    runtime_type = \"io.containerd.runc.v2\"\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n      SystemdCgroup = true\n";
        let mut doc = parse(text).unwrap();
        register(&mut doc, ConfigVersion::V2, &[handler("a")]).unwrap();
        let out = doc.to_string();
        assert!(out.starts_with(text), "{out}");
        assert!(out.contains("\n  [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.a]\n    runtime_type"), "{out}");
        assert!(out.contains("\n      ConfigPath = "), "{out}");
    }
}
