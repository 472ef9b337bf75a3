//! The known failures of the CRI validation suite (`tests/critest-expected.toml`), each with
//! who fails it and why, and the check of a run against them: any failure not listed, and any
//! listed failure that passed, is a difference to explain. So is a spec one handler skips while
//! another runs it (the suite skips what a runtime reports it lacks), unless listed as a skip
//! with its reason: a skip would otherwise hide a spec quietly.

use std::collections::BTreeSet;

use super::{Outcome, Report, RUNSC_HANDLER};

/// Why a spec fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A hardening rule refuses what the spec asks; the caller's error names the rule.
    Rule,
    /// A hardening rule rewrites what the spec asks (a read-only root, a non-root user, no added
    /// capability, a seccomp profile, no network), and the spec checks for what it asked.
    Rewrite,
    /// gVisor cannot do it: gVisor's own shim fails it too.
    Gvisor,
    /// The harness: a stand-in image, the test containerd's private setup.
    Harness,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub spec: String,
    pub handlers: Vec<String>,
    pub kind: Kind,
    pub reason: String,
    /// For `rule` and `rewrite`: the policy rule.
    pub rule: Option<String>,
    /// For `rule`: what the failure message must contain (`rejected by policy: RULE`).
    pub message: Option<String>,
}

/// A spec a handler skips while another handler runs it.
#[derive(Debug, Clone)]
pub struct Skip {
    pub spec: String,
    pub handlers: Vec<String>,
    pub reason: String,
}

/// The list, parsed.
#[derive(Debug, Clone, Default)]
pub struct Expected {
    pub failures: Vec<Failure>,
    pub skips: Vec<Skip>,
}

fn tables<'a>(doc: &'a toml_edit::DocumentMut, key: &str) -> Vec<&'a toml_edit::Table> {
    doc.get(key)
        .and_then(|f| f.as_array_of_tables())
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn handlers_of(t: &toml_edit::Table, spec: &str) -> Result<Vec<String>, String> {
    Ok(t.get("handlers")
        .and_then(|v| v.as_array())
        .ok_or(format!("{spec}: no handlers"))?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect())
}

pub fn load(text: &str) -> Result<Expected, String> {
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    let mut skips = Vec::new();
    for (i, t) in tables(&doc, "skip").into_iter().enumerate() {
        let s = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let spec = s("spec").ok_or(format!("skip[{i}]: no spec"))?;
        skips.push(Skip {
            handlers: handlers_of(t, &spec)?,
            reason: s("reason").ok_or(format!("{spec}: no reason"))?,
            spec,
        });
    }
    let mut out = Vec::new();
    for (i, t) in tables(&doc, "failure").into_iter().enumerate() {
        let s = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let spec = s("spec").ok_or(format!("failure[{i}]: no spec"))?;
        let kind = match s("kind").as_deref() {
            Some("rule") => Kind::Rule,
            Some("rewrite") => Kind::Rewrite,
            Some("gvisor") => Kind::Gvisor,
            Some("harness") => Kind::Harness,
            other => {
                return Err(format!(
                    "{spec}: kind {other:?}: rule, rewrite, gvisor or harness"
                ))
            }
        };
        let reason = s("reason").ok_or(format!("{spec}: no reason"))?;
        let handlers = handlers_of(t, &spec)?;
        let message = s("message");
        let rule = s("rule");
        if kind == Kind::Rule && message.is_none() {
            return Err(format!(
                "{spec}: a rule's refusal names the message it gives"
            ));
        }
        if matches!(kind, Kind::Rule | Kind::Rewrite) && rule.is_none() {
            return Err(format!(
                "{spec}: a rule's refusal or rewrite names the rule"
            ));
        }
        if kind == Kind::Gvisor && !handlers.iter().any(|h| h == RUNSC_HANDLER) {
            return Err(format!(
                "{spec}: a gVisor limitation is one gVisor's own shim ({RUNSC_HANDLER}) fails too"
            ));
        }
        out.push(Failure {
            spec,
            handlers,
            kind,
            reason,
            rule,
            message,
        });
    }
    Ok(Expected {
        failures: out,
        skips,
    })
}

/// What differs between `report` and the list: unexpected failures, expected ones that did not
/// fail, rule refusals whose message does not name the rule.
pub fn differences(report: &Report, expected: &Expected) -> Vec<String> {
    let h = report.handler.as_str();
    let messages = &report.messages;
    let mut out = Vec::new();
    let listed: BTreeSet<&str> = expected
        .failures
        .iter()
        .filter(|f| f.handlers.iter().any(|x| x == h))
        .map(|f| f.spec.as_str())
        .collect();
    for failed in report.failed() {
        if !listed.contains(failed) {
            let why = messages
                .iter()
                .find(|(s, _)| s == failed)
                .map(|(_, m)| m.as_str())
                .unwrap_or_default();
            out.push(format!(
                "{h}: failed, not in the list: {failed}\n    {}",
                first_line(why)
            ));
        }
    }
    for f in expected
        .failures
        .iter()
        .filter(|f| f.handlers.iter().any(|x| x == h))
    {
        match report.specs.get(&f.spec) {
            Some(Outcome::Failed) => {}
            Some(other) => out.push(format!("{h}: listed as failing but {other:?}: {}", f.spec)),
            None => out.push(format!("{h}: listed spec not run: {}", f.spec)),
        }
        if let (Kind::Rule, Some(want)) = (f.kind, &f.message) {
            let got = messages
                .iter()
                .find(|(s, _)| *s == f.spec)
                .map(|(_, m)| m.as_str())
                .unwrap_or_default();
            if report.specs.get(&f.spec) == Some(&Outcome::Failed) && !got.contains(want.as_str()) {
                out.push(format!(
                    "{h}: {}: the failure does not say {want:?}: {}",
                    f.spec,
                    first_line(got)
                ));
            }
        }
    }
    out
}

/// The specs a handler skips while another handler of the same run ran them, with the suite's
/// reason: `(handler, spec, reason)`.
pub fn uneven_skips(reports: &[Report]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for r in reports {
        for (spec, outcome) in &r.specs {
            let ran_elsewhere = reports
                .iter()
                .any(|o| matches!(o.specs.get(spec), Some(Outcome::Passed | Outcome::Failed)));
            if *outcome == Outcome::Skipped && ran_elsewhere {
                let why = r
                    .messages
                    .iter()
                    .find(|(s, _)| s == spec)
                    .map(|(_, m)| first_line(m).to_string())
                    .unwrap_or_default();
                out.push((r.handler.clone(), spec.clone(), why));
            }
        }
    }
    out
}

/// What differs between the run's uneven skips and the listed ones: a skip not listed, a listed
/// skip that did not happen.
pub fn skip_differences(reports: &[Report], expected: &Expected) -> Vec<String> {
    let uneven = uneven_skips(reports);
    let listed = |h: &str, spec: &str| {
        expected
            .skips
            .iter()
            .any(|k| k.spec == spec && k.handlers.iter().any(|x| x == h))
    };
    let mut out: Vec<String> = uneven
        .iter()
        .filter(|(h, spec, _)| !listed(h, spec))
        .map(|(h, spec, why)| {
            format!("{h}: skipped while another handler ran it, not in the list: {spec}\n    {why}")
        })
        .collect();
    for k in &expected.skips {
        for h in &k.handlers {
            if let Some(r) = reports.iter().find(|r| &r.handler == h) {
                if !uneven.iter().any(|(uh, s, _)| uh == h && *s == k.spec) {
                    let got = r.specs.get(&k.spec);
                    out.push(format!(
                        "{h}: listed as skipped while another handler runs it, but {got:?}: {}",
                        k.spec
                    ));
                }
            }
        }
    }
    out
}

fn first_line(s: &str) -> &str {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    const LIST: &str = r#"
[[failure]]
spec = "a"
handlers = ["gvisor-hardened"]
kind = "rule"
rule = "namespaces"
message = "rejected by policy: namespaces"
reason = "host network refused"

[[failure]]
spec = "b"
handlers = ["runsc", "gvisor-hardened"]
kind = "gvisor"
reason = "no such /proc/sys entry"
"#;

    fn report(specs: &[(&str, Outcome)], messages: &[(&str, &str)]) -> Report {
        report_of("gvisor-hardened", specs, messages)
    }

    fn report_of(handler: &str, specs: &[(&str, Outcome)], messages: &[(&str, &str)]) -> Report {
        Report {
            handler: handler.into(),
            specs: specs
                .iter()
                .map(|(s, o)| (s.to_string(), *o))
                .collect::<BTreeMap<_, _>>(),
            duration: Duration::ZERO,
            messages: messages
                .iter()
                .map(|(s, m)| (s.to_string(), m.to_string()))
                .collect(),
            output: String::new(),
        }
    }

    #[test]
    fn a_run_that_fails_exactly_the_listed_specs_for_the_listed_reasons_has_no_difference() {
        let list = load(LIST).unwrap();
        let r = report(
            &[
                ("a", Outcome::Failed),
                ("b", Outcome::Failed),
                ("c", Outcome::Passed),
            ],
            &[("a", "rejected by policy: namespaces: x"), ("b", "no file")],
        );
        assert!(differences(&r, &list).is_empty());
    }

    #[test]
    fn an_unlisted_failure_a_listed_pass_and_an_unnamed_rule_are_differences() {
        let list = load(LIST).unwrap();
        let r = report(
            &[
                ("a", Outcome::Failed),
                ("b", Outcome::Passed),
                ("c", Outcome::Failed),
            ],
            &[("a", "permission denied"), ("c", "boom")],
        );
        let d = differences(&r, &list).join("\n");
        assert!(d.contains("failed, not in the list: c"), "{d}");
        assert!(d.contains("listed as failing but Passed: b"), "{d}");
        assert!(
            d.contains("does not say \"rejected by policy: namespaces\""),
            "{d}"
        );
    }

    #[test]
    fn a_gvisor_limitation_must_fail_under_gvisors_own_shim_too() {
        let bad = "[[failure]]\nspec = \"x\"\nhandlers = [\"gvisor-hardened\"]\nkind = \"gvisor\"\nreason = \"r\"\n";
        assert!(load(bad).unwrap_err().contains("gVisor's own shim"));
        let unnamed = "[[failure]]\nspec = \"x\"\nhandlers = [\"gvisor-hardened\"]\nkind = \"rewrite\"\nreason = \"r\"\n";
        assert!(load(unnamed).unwrap_err().contains("names the rule"));
    }

    #[test]
    fn a_spec_skipped_under_one_handler_while_another_ran_it_must_be_listed_as_a_skip() {
        let runsc = report_of(
            "runsc",
            &[
                ("d", Outcome::Passed),
                ("e", Outcome::Skipped),
                ("f", Outcome::Passed),
            ],
            &[("e", "AppArmor is disabled on this host")],
        );
        let ours = report(
            &[
                ("d", Outcome::Skipped),
                ("e", Outcome::Skipped),
                ("f", Outcome::Passed),
            ],
            &[("d", "runtime does not implement recursive readonly mounts")],
        );
        let reports = [runsc, ours];
        let none = Expected::default();
        let d = skip_differences(&reports, &none).join("\n");
        assert!(
            d.contains("gvisor-hardened: skipped while another handler ran it, not in the list: d"),
            "{d}"
        );
        assert!(d.contains("recursive readonly mounts"), "{d}");
        assert!(
            !d.contains(": e"),
            "skipped by every handler is not uneven: {d}"
        );
        let listed = load(
            "[[skip]]\nspec = \"d\"\nhandlers = [\"gvisor-hardened\"]\nreason = \"r\"\n\n[[skip]]\nspec = \"f\"\nhandlers = [\"gvisor-hardened\"]\nreason = \"r\"\n",
        )
        .unwrap();
        let d = skip_differences(&reports, &listed);
        assert_eq!(
            d,
            ["gvisor-hardened: listed as skipped while another handler runs it, but Some(Passed): f"],
        );
    }

    #[test]
    fn the_shipped_list_loads() {
        let list = load(include_str!("../../critest-expected.toml")).unwrap();
        assert!(list.failures.len() > 30);
    }
}
