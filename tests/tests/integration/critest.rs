//! The CRI validation suite (`critest`) against runc, gVisor's own shim and ours, offline
//! (`gvisor_hardened_tests::critest`), checked against `tests/critest-expected.toml`: every
//! failure is listed with who fails it and why, a rule's refusal names the rule, a gVisor
//! limitation fails under gVisor's own shim too; a spec one handler skips while another runs it
//! is listed as a skip with why. `GVH_CRITEST_FOCUS` runs only the specs
//! matching that regexp (for working on one).

use gvisor_hardened_tests::cri::{HARDENED_HANDLER, RUNC_HANDLER};
use gvisor_hardened_tests::critest::{expected, Outcome, Suite, RUNSC_HANDLER};
use gvisor_hardened_tests::shim_binary;

const EXPECTED: &str = include_str!("../../critest-expected.toml");

#[test]
fn the_cri_validation_suite_gives_only_the_listed_failures_under_each_handler() {
    let expected = expected::load(EXPECTED).unwrap();
    let focus = std::env::var("GVH_CRITEST_FOCUS").ok();
    // The three runs at once, each against a containerd of its own (one image store each):
    // each spends most of its time waiting on pods and timeouts.
    let shim = shim_binary().unwrap();
    let reports: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = [RUNC_HANDLER, RUNSC_HANDLER, HARDENED_HANDLER]
            .map(|handler| {
                let (shim, focus) = (shim.clone(), focus.as_deref());
                s.spawn(move || Suite::start(shim).unwrap().run(handler, focus))
            })
            .into_iter()
            .collect();
        runs.into_iter()
            .map(|r| r.join().unwrap().unwrap())
            .collect()
    });
    let mut differences = Vec::new();
    for report in &reports {
        let handler = &report.handler;
        eprintln!(
            "critest {handler}: {} passed, {} failed, {} skipped in {:.0?}",
            report.count(Outcome::Passed),
            report.count(Outcome::Failed),
            report.count(Outcome::Skipped),
            report.duration
        );
        for (spec, message) in &report.messages {
            if report.specs.get(spec) != Some(&Outcome::Failed) {
                continue;
            }
            let lines: Vec<&str> = message
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(6)
                .collect();
            eprintln!("  FAILED {spec}\n      {}", lines.join("\n      "));
        }
        if focus.is_none() {
            differences.extend(expected::differences(report, &expected));
        }
    }
    // Not a skip of this test: critest itself leaves out a spec when the runtime says it lacks
    // the feature. Where one handler's run left out what another's ran, the spec is named here
    // and must be listed in [[skip]] with its reason (`skip_differences` below fails otherwise).
    for (handler, spec, why) in expected::uneven_skips(&reports) {
        eprintln!(
            "critest {handler}: left out by critest (the runtime lacks it) while another handler ran it: {spec}\n      {why}"
        );
    }
    if focus.is_none() {
        differences.extend(expected::skip_differences(&reports, &expected));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
