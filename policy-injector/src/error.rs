//! Typed errors: loading a policy (`PolicyError`) and applying it (`HardenError`).

use crate::decision::Rule;

/// Why a policy file could not be loaded. Every variant names the key and, when the source
/// text is known, the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The text is not TOML, or a key is not where the schema expects it.
    #[error("{}", fmt_parse(*line, *column, key.as_deref(), message))]
    Parse {
        line: Option<usize>,
        column: Option<usize>,
        /// Dotted path of the table or key the parser was in, when known.
        key: Option<String>,
        message: String,
    },
    /// A value of the right type that the policy cannot use (a bad unit, zero where zero means
    /// nothing, a runsc flag outside the allowlist...).
    #[error("invalid value for `{key}`{}: {reason}", fmt_line(*line))]
    Invalid {
        key: String,
        line: Option<usize>,
        reason: String,
    },
    /// Two or more keys that cannot hold together.
    #[error("contradiction between `{}`{}: {reason}", keys.join("` and `"), fmt_line(*line))]
    Contradiction {
        keys: Vec<String>,
        line: Option<usize>,
        reason: String,
    },
}

fn fmt_line(line: Option<usize>) -> String {
    match line {
        Some(l) => format!(" (line {l})"),
        None => String::new(),
    }
}

fn fmt_parse(
    line: Option<usize>,
    column: Option<usize>,
    key: Option<&str>,
    message: &str,
) -> String {
    let mut out = String::from("policy parse error");
    match (line, column) {
        (Some(l), Some(c)) => out.push_str(&format!(" at line {l}, column {c}")),
        (Some(l), None) => out.push_str(&format!(" at line {l}")),
        _ => {}
    }
    if let Some(k) = key {
        out.push_str(&format!(" in `{k}`"));
    }
    out.push_str(": ");
    // toml's messages can span lines; the CLI promises one line.
    out.push_str(&message.split_whitespace().collect::<Vec<_>>().join(" "));
    out
}

/// One reason a spec cannot run under the policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rejection {
    pub rule: Rule,
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}: {}", self.rule, self.field, self.reason)
    }
}

/// Why `harden` (or `harden_process`, `clamp_resources`) returned no spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HardenError {
    /// The spec is well-formed but the policy refuses it. Never empty.
    #[error("rejected by policy: {}", fmt_rejections(.0))]
    Rejected(Vec<Rejection>),
    /// A field the rules read has the wrong type or shape.
    #[error("malformed spec: {field}: {reason}")]
    Malformed { field: String, reason: String },
}

fn fmt_rejections(all: &[Rejection]) -> String {
    match all.split_first() {
        None => "no reason given".to_string(),
        Some((first, [])) => first.to_string(),
        Some((first, rest)) => format!("{first} (+{} more)", rest.len()),
    }
}

impl HardenError {
    pub(crate) fn malformed(field: impl Into<String>, reason: impl Into<String>) -> Self {
        HardenError::Malformed {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
