//! The sandbox probe (`tests/probe/probe.c`): where it is, and how to read what it prints.
//!
//! Every probe subcommand prints one line: `ok [key=value ...]`, `errno NAME [key=value ...]`
//! or `timeout [key=value ...]`. Run `sandbox-probe help` for the list of subcommands.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{HarnessError, Result};

/// The probe binary built by build.rs (static, runs in any image).
pub const PROBE_PATH: &str = env!("GVH_PROBE_PATH");

/// Where the probe lives inside the test image.
pub const PROBE_IN_IMAGE: &str = "/bin/sandbox-probe";
/// A copy owned by root with the setuid bit (mode 04755), for setuid-escalation attacks:
/// `... as 65534 65534 ids` shows `euid=0` where the setuid bit works.
pub const PROBE_SUID_IN_IMAGE: &str = "/bin/sandbox-probe-suid";
/// A copy carrying file capabilities (`security.capability`: cap_setuid and cap_net_raw,
/// effective), for file-capability attacks. Run it as `... as 65534 65534 caps`: exec as a
/// non-root user is where file capabilities would elevate.
pub const PROBE_FCAPS_IN_IMAGE: &str = "/bin/sandbox-probe-fcaps";

/// The path of the probe binary on the host.
pub fn probe_path() -> &'static Path {
    Path::new(PROBE_PATH)
}

/// How a probe action ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Failed with this errno name, e.g. `EPERM`.
    Errno(String),
    /// Did not finish in time (the probe's own timeout, e.g. for `connect`).
    Timeout,
}

/// One parsed probe line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeLine {
    pub outcome: Outcome,
    /// The `key=value` details, e.g. `CapEff` -> `0000000000000000`.
    pub fields: BTreeMap<String, String>,
}

impl ProbeLine {
    /// Parses a probe line (surrounding whitespace ignored).
    pub fn parse(line: &str) -> Result<ProbeLine> {
        let err = |reason| HarnessError::ProbeOutput {
            line: line.to_string(),
            reason,
        };
        let mut words = line.split_whitespace();
        let outcome = match words.next() {
            Some("ok") => Outcome::Ok,
            Some("timeout") => Outcome::Timeout,
            Some("errno") => Outcome::Errno(
                words
                    .next()
                    .ok_or_else(|| err("errno without a name"))?
                    .to_string(),
            ),
            Some(_) => return Err(err("does not start with ok, errno or timeout")),
            None => return Err(err("empty")),
        };
        let mut fields = BTreeMap::new();
        for word in words {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| err("detail is not key=value"))?;
            fields.insert(k.to_string(), v.to_string());
        }
        Ok(ProbeLine { outcome, fields })
    }

    /// Parses the last non-empty line of `output` (a shell may print before the probe).
    pub fn parse_last(output: &str) -> Result<ProbeLine> {
        let line = output.lines().rev().find(|l| !l.trim().is_empty()).ok_or(
            HarnessError::ProbeOutput {
                line: output.to_string(),
                reason: "no output",
            },
        )?;
        ProbeLine::parse(line)
    }

    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// The errno name if the action failed with one.
    pub fn errno(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Errno(name) => Some(name),
            _ => None,
        }
    }

    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_ok_line_with_fields() {
        let l = ProbeLine::parse("ok CapEff=0000000000000000 CapBnd=00\n").unwrap();
        assert!(l.is_ok());
        assert_eq!(l.field("CapEff"), Some("0000000000000000"));
        assert_eq!(l.field("CapBnd"), Some("00"));
        assert_eq!(l.errno(), None);
    }

    #[test]
    fn parses_an_errno_line() {
        let l = ProbeLine::parse("errno EROFS step=open").unwrap();
        assert_eq!(l.errno(), Some("EROFS"));
        assert_eq!(l.field("step"), Some("open"));
    }

    #[test]
    fn parses_a_timeout_line() {
        let l = ProbeLine::parse("timeout addr=127.0.0.1:9 timeout_ms=100").unwrap();
        assert_eq!(l.outcome, Outcome::Timeout);
    }

    #[test]
    fn parse_last_skips_earlier_output() {
        let l = ProbeLine::parse_last("hello\nok nnp=1\n\n").unwrap();
        assert_eq!(l.field("nnp"), Some("1"));
    }

    #[test]
    fn rejects_lines_that_are_not_probe_output() {
        for bad in ["", "sh: not found", "errno", "ok novalue"] {
            assert!(ProbeLine::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_probe_binary_runs_on_the_host() {
        let out = std::process::Command::new(PROBE_PATH)
            .arg("nnp")
            .output()
            .unwrap();
        assert!(out.status.success());
        let l = ProbeLine::parse(&String::from_utf8_lossy(&out.stdout)).unwrap();
        assert!(l.field("nnp").is_some(), "{l:?}");
    }

    #[test]
    fn the_probe_rejects_unknown_commands_with_status_2() {
        let out = std::process::Command::new(PROBE_PATH)
            .arg("no-such-command")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
    }
}
