//! What the metrics read from one audit line: the few fields they count by, nothing else (the
//! schema is shim/audit-record.schema.json; the writers are shim/core/src/audit.rs and
//! shim/egress/src/audit.rs).

use serde::Deserialize;

use crate::Rule;

#[derive(Debug, Default, Deserialize)]
pub struct Line {
    pub event: Option<String>,
    pub time: Option<String>,
    pub namespace: Option<String>,
    pub container_id: Option<String>,
    /// Lifecycle records: `{path, sha256, mode}`; egress records: the policy's name.
    pub policy: Option<PolicyField>,
    pub pod: Option<Pod>,
    pub exit_cause: Option<String>,
    pub output_truncated: Option<bool>,
    pub error: Option<String>,
    // Egress records.
    pub verdict: Option<String>,
    pub rule: Option<String>,
    pub host: Option<String>,
    pub port: Option<u64>,
    pub bytes_up: Option<u64>,
    pub bytes_down: Option<u64>,
    pub attempt: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PolicyField {
    Ref { path: String },
    Name(String),
}

#[derive(Debug, Default, Deserialize)]
pub struct Pod {
    pub sandbox_id: Option<String>,
}

impl Line {
    pub fn parse(bytes: &[u8]) -> Option<Line> {
        serde_json::from_slice(bytes).ok()
    }

    /// The `policy` label: the policy file's path (lifecycle records) or name (egress records).
    pub fn policy(&self) -> &str {
        match &self.policy {
            Some(PolicyField::Ref { path }) => path,
            Some(PolicyField::Name(name)) => name,
            None => "",
        }
    }

    /// Whether this container is a sandbox of its own: not a container joining a pod's sandbox.
    pub fn is_sandbox(&self) -> bool {
        match (&self.pod, &self.container_id) {
            (
                Some(Pod {
                    sandbox_id: Some(s),
                }),
                Some(id),
            ) => s == id,
            _ => true,
        }
    }

    /// The egress `host` label: the host only when an allowlist entry names it exactly (the rule
    /// is `host:port`), so the label takes no more values than the policy lists. Denied hosts and
    /// hosts admitted by a `*.domain` entry or a CIDR range are whatever the workload asked for.
    pub fn listed_host(&self) -> &str {
        match (&self.host, self.port, &self.rule, self.verdict.as_deref()) {
            (Some(host), Some(port), Some(rule), Some(v))
                if v != "denied" && *rule == format!("{host}:{port}") =>
            {
                host
            }
            _ => "",
        }
    }
}

/// The rule of a refusal, from its error ("rejected by policy: <rule>: <field>: <reason>",
/// `HardenError::Rejected`'s text): one of the policy's rule names, or "other".
pub fn rejected_rule(error: Option<&str>) -> &'static str {
    let name = error
        .and_then(|e| e.strip_prefix("rejected by policy: "))
        .and_then(|rest| rest.split(':').next())
        .unwrap_or("");
    Rule::ALL
        .iter()
        .map(|r| r.as_str())
        .find(|known| *known == name)
        .unwrap_or("other")
}

/// Milliseconds since the Unix epoch of the writers' RFC 3339 UTC time
/// (`YYYY-MM-DDTHH:MM:SS.mmmZ`; the fraction may be absent or of any length).
pub fn millis(time: &str) -> Option<i64> {
    let b = time.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let s = time.get(from..from + len)?;
        if !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || *b.last()? != b'Z' {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (h, mi, s) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let frac = &time[19..time.len() - 1];
    let ms = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        Some(digits) if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) => {
            let three: String = digits.chars().chain("000".chars()).take(3).collect();
            three.parse::<i64>().ok()?
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
