use super::*;
use crate::audit_chain::{genesis_line, with_link, GenesisReason, Link, Origin};

const POLICY: &str = r#"{"path":"/etc/gvh/policy.toml","sha256":"","mode":"enforce"}"#;

/// A chained log: a genesis, then each body (a JSON object without `seq`/`prev`) linked in turn.
fn chained(bodies: &[String]) -> Vec<Vec<u8>> {
    let origin = Origin {
        time: "2026-12-03T08:00:00.000Z",
        node: "node",
        policy_sha256: "",
    };
    let mut lines = vec![genesis_line(Link::origin(), GenesisReason::New, &origin)];
    for body in bodies {
        let link = Link::after(lines.last().unwrap()).unwrap();
        lines.push(with_link(link, body.as_bytes()).unwrap());
    }
    lines
}

fn lifecycle(event: &str, id: &str, time: &str, extra: &str) -> String {
    format!(
        r#"{{"time":"{time}","event":"{event}","namespace":"k8s.io","container_id":"{id}","policy":{POLICY},"oom":false,"timed_out":false,"process_limit_exceeded":false{extra}}}"#
    )
}

fn egress(event: &str, extra: &str) -> String {
    format!(
        r#"{{"time":"2026-12-03T08:00:09.000Z","namespace":"k8s.io","sandbox_id":"sb","container_id":"sb","policy":"gvisor-hardened-agent","event":"{event}"{extra}}}"#
    )
}

fn fold(bodies: &[String]) -> Metrics {
    let mut m = Metrics::new();
    m.begin_file("audit.jsonl");
    for line in chained(bodies) {
        m.line(&line, true);
    }
    m
}

const PATH: &str = "/etc/gvh/policy.toml";

#[test]
fn a_sandbox_runs_from_its_create_to_its_exit() {
    let t0 = "2026-12-03T08:00:00.000Z";
    let m = fold(&[
        lifecycle("create", "a", t0, ""),
        lifecycle("start", "a", "2026-12-03T08:00:00.300Z", ""),
        lifecycle("create", "b", t0, ""),
    ]);
    assert_eq!(m.sandboxes_created.get(&[PATH]), 2.0);
    assert_eq!(m.sandboxes_running.get(&[PATH]), 2.0);
    let m2 = fold(&[
        lifecycle("create", "a", t0, ""),
        lifecycle("exit", "a", t0, r#","exit_cause":"exited""#),
        lifecycle("delete", "a", t0, ""),
    ]);
    assert_eq!(m2.sandboxes_running.get(&[PATH]), 0.0);
    assert_eq!(m2.exits.get(&[PATH, "exited"]), 1.0);
}

#[test]
fn a_container_joining_a_pod_sandbox_is_a_container_not_a_sandbox() {
    let t = "2026-12-03T08:00:00.000Z";
    let m = fold(&[
        lifecycle("create", "pause", t, r#","pod":{"sandbox_id":"pause"}"#),
        lifecycle("create", "app", t, r#","pod":{"sandbox_id":"pause"}"#),
    ]);
    assert_eq!(m.containers_created.get(&[PATH]), 2.0);
    assert_eq!(m.sandboxes_created.get(&[PATH]), 1.0);
    assert_eq!(m.sandboxes_running.get(&[PATH]), 1.0);
}

#[test]
fn start_latency_is_create_to_start_of_the_same_container() {
    let m = fold(&[
        lifecycle("create", "a", "2026-12-03T08:00:00.000Z", ""),
        lifecycle("create", "b", "2026-12-03T08:00:00.100Z", ""),
        lifecycle("start", "b", "2026-12-03T08:00:03.100Z", ""),
        lifecycle("start", "a", "2026-12-03T08:00:00.200Z", ""),
        // A second start record of the same container is not a second start.
        lifecycle("start", "a", "2026-12-03T08:00:09.000Z", ""),
    ]);
    assert_eq!(m.start_latency.count(&[PATH]), 2);
    let text = m.render();
    assert!(
        text.contains(
            r#"gvh_start_latency_seconds_bucket{policy="/etc/gvh/policy.toml",le="0.25"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"gvh_start_latency_seconds_bucket{policy="/etc/gvh/policy.toml",le="5"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"gvh_start_latency_seconds_sum{policy="/etc/gvh/policy.toml"} 3.2"#),
        "{text}"
    );
}

#[test]
fn refusals_count_by_the_rule_named_in_the_error() {
    let t = "2026-12-03T08:00:00.000Z";
    let m = fold(&[
        lifecycle(
            "create-rejected",
            "a",
            t,
            r#","error":"rejected by policy: mounts: mounts[/host]: bind of denied host path""#,
        ),
        lifecycle(
            "exec-rejected",
            "b",
            t,
            r#","error":"rejected by policy: capabilities: process.capabilities: no""#,
        ),
        lifecycle("create-rejected", "c", t, r#","error":"something new""#),
        lifecycle(
            "update-rejected",
            "d",
            t,
            r#","error":"rejected by policy: resources: resources.memory.limit: cannot change""#,
        ),
    ]);
    assert_eq!(m.refusals.get(&[PATH, "resources", "update"]), 1.0);
    assert_eq!(m.refusals.get(&[PATH, "mounts", "create"]), 1.0);
    assert_eq!(m.refusals.get(&[PATH, "capabilities", "exec"]), 1.0);
    assert_eq!(m.refusals.get(&[PATH, "other", "create"]), 1.0);
    // A refused container never ran.
    assert_eq!(m.sandboxes_running.get(&[PATH]), 0.0);
}

#[test]
fn exits_count_by_cause_and_unknown_causes_by_other() {
    let t = "2026-12-03T08:00:00.000Z";
    let exit =
        |id: &str, cause: &str| lifecycle("exit", id, t, &format!(r#","exit_cause":"{cause}""#));
    let m = fold(&[
        exit("a", "oom"),
        exit("b", "oom"),
        exit("c", "process-limit"),
        exit("d", "idle-timeout"),
        exit("e", "martian"),
        lifecycle("exec-exit", "f", t, r#","exit_cause":"signaled""#),
        lifecycle("oom", "a", t, ""),
    ]);
    assert_eq!(m.exits.get(&[PATH, "oom"]), 2.0);
    assert_eq!(m.exits.get(&[PATH, "process-limit"]), 1.0);
    assert_eq!(m.exits.get(&[PATH, "idle-timeout"]), 1.0);
    assert_eq!(m.exits.get(&[PATH, "other"]), 1.0);
    assert_eq!(m.exec_exits.get(&[PATH, "signaled"]), 1.0);
    assert_eq!(m.limit_events.get(&[PATH, "oom"]), 1.0);
}

#[test]
fn output_truncations_count_exits_whose_output_was_cut() {
    let t = "2026-12-03T08:00:00.000Z";
    let m = fold(&[
        lifecycle(
            "exit",
            "a",
            t,
            r#","exit_cause":"exited","output_truncated":true"#,
        ),
        lifecycle(
            "exit",
            "b",
            t,
            r#","exit_cause":"exited","output_truncated":false"#,
        ),
        lifecycle(
            "exec-exit",
            "a",
            t,
            r#","exit_cause":"exited","output_truncated":true"#,
        ),
    ]);
    assert_eq!(m.output_truncations.get(&[PATH]), 2.0);
}

#[test]
fn egress_host_is_a_label_only_when_an_allowlist_entry_names_it() {
    let conn = |verdict: &str, host: &str, rule: &str, up: u64| {
        egress(
            "egress-connection",
            &format!(
                r#","peer":"10.0.0.2:4000","method":"CONNECT","host":"{host}","port":443,"verdict":"{verdict}","rule":"{rule}","bytes_up":{up},"bytes_down":7,"duration_ms":1"#
            ),
        )
    };
    let m = fold(&[
        conn("allowed", "api.example.test", "api.example.test:443", 10),
        conn("allowed", "x.cdn.test", "*.cdn.test:443", 5),
        conn("denied", "evil.test", "not-allowed", 0),
        conn("cut", "api.example.test", "api.example.test:443", 100),
    ]);
    let policy = "gvisor-hardened-agent";
    let c = &m.egress_connections;
    assert_eq!(
        c.get(&[
            policy,
            "allowed",
            "api.example.test:443",
            "api.example.test"
        ]),
        1.0
    );
    assert_eq!(c.get(&[policy, "allowed", "*.cdn.test:443", ""]), 1.0);
    assert_eq!(c.get(&[policy, "denied", "not-allowed", ""]), 1.0);
    assert_eq!(
        c.get(&[policy, "cut", "api.example.test:443", "api.example.test"]),
        1.0
    );
    assert_eq!(m.egress_bytes.get(&[policy, "up"]), 115.0);
    assert_eq!(m.egress_bytes.get(&[policy, "down"]), 28.0);
    assert!(!m.render().contains("evil.test"));
}

#[test]
fn forwarder_restarts_are_ready_records_after_the_first_attempt() {
    let m = fold(&[
        egress(
            "egress-forwarder-ready",
            r#","listen":"127.0.0.1:1","attempt":1"#,
        ),
        egress("egress-forwarder-died", r#","reason":"killed","attempt":1"#),
        egress(
            "egress-forwarder-ready",
            r#","listen":"127.0.0.1:1","attempt":2"#,
        ),
        egress("egress-byte-cap-crossed", r#","max_bytes":10,"used":11"#),
    ]);
    let p = ["gvisor-hardened-agent"];
    assert_eq!(m.forwarder_deaths.get(&p), 1.0);
    assert_eq!(m.forwarder_restarts.get(&p), 1.0);
    assert_eq!(m.egress_byte_cap_crossings.get(&p), 1.0);
}

#[test]
fn the_chain_gauge_turns_zero_at_an_altered_line_and_stays_zero() {
    let t = "2026-12-03T08:00:00.000Z";
    let mut lines = chained(&[
        lifecycle("create", "a", t, ""),
        lifecycle("start", "a", t, ""),
        lifecycle("exit", "a", t, r#","exit_cause":"exited""#),
    ]);
    let mut m = Metrics::new();
    m.begin_file("audit.jsonl");
    m.line(&lines[0], true);
    m.line(&lines[1], true);
    assert_eq!(m.chain_intact.get(&[]), 1.0);
    // Line 2 edited after it was written: the next line's prev no longer matches it.
    lines[2] = String::from_utf8(lines[2].clone())
        .unwrap()
        .replace(r#""event":"start""#, r#""event":"update""#)
        .into_bytes();
    m.line(&lines[2], true);
    m.line(&lines[3], true);
    assert_eq!(m.chain_intact.get(&[]), 0.0);
    // The records still count: the gauge says whether to trust them.
    assert_eq!(m.exits.get(&[PATH, "exited"]), 1.0);
}

#[test]
fn a_deleted_line_breaks_the_chain_at_once() {
    let t = "2026-12-03T08:00:00.000Z";
    let lines = chained(&[
        lifecycle("create", "a", t, ""),
        lifecycle("start", "a", t, ""),
        lifecycle("exit", "a", t, r#","exit_cause":"exited""#),
    ]);
    let mut m = Metrics::new();
    m.begin_file("audit.jsonl");
    for (i, l) in lines.iter().enumerate() {
        if i != 2 {
            m.line(l, true);
        }
    }
    assert_eq!(m.chain_intact.get(&[]), 0.0);
}

#[test]
fn read_position_counts_bytes_with_their_newlines_and_lines() {
    let lines = chained(&[lifecycle("create", "a", "2026-12-03T08:00:00.000Z", "")]);
    let m = fold(&[lifecycle("create", "a", "2026-12-03T08:00:00.000Z", "")]);
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    assert_eq!(m.read_bytes.get(&[]), bytes as f64);
    assert_eq!(m.read_lines.get(&[]), 2.0);
    assert_eq!(m.files_opened.get(&[]), 1.0);
    assert_eq!(m.records.get(&["genesis"]), 1.0);
}

#[test]
fn a_line_that_is_not_json_counts_as_unparsed_and_breaks_the_chain() {
    let mut m = Metrics::new();
    m.begin_file("audit.jsonl");
    m.line(b"hello", true);
    assert_eq!(m.unparsed_lines.get(&[]), 1.0);
    assert_eq!(m.chain_intact.get(&[]), 0.0);
}

#[test]
fn label_sets_beyond_the_bound_fold_into_one_overflow_series() {
    let t = "2026-12-03T08:00:00.000Z";
    let bodies: Vec<String> = (0..MAX_SERIES + 10)
        .map(|i| {
            lifecycle("create", &format!("c{i}"), t, "").replace(PATH, &format!("/policy/{i}.toml"))
        })
        .collect();
    let m = fold(&bodies);
    assert_eq!(m.containers_created.get(&[OVERFLOW]), 10.0);
    let samples = m
        .render()
        .lines()
        .filter(|l| l.starts_with("gvh_containers_created_total{"))
        .count();
    assert_eq!(samples, MAX_SERIES + 1);
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn the_exposition_declares_every_family_once() {
    let text = Metrics::new().render();
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let mut names: Vec<&str> = types.iter().map(|l| l.split(' ').nth(2).unwrap()).collect();
    let n = names.len();
    names.dedup();
    assert_eq!(names.len(), n);
    assert!(text.contains("\ngvh_audit_chain_intact 1\n"), "{text}");
    assert!(text.ends_with('\n'));
}

#[test]
fn rfc3339_millis_parses_the_writers_times() {
    assert_eq!(millis("1970-01-01T00:00:00.000Z"), Some(0));
    assert_eq!(millis("1970-01-02T00:00:01.5Z"), Some(86_401_500));
    assert_eq!(millis("2026-12-03T08:22:42.619Z"), Some(1_796_286_162_619));
    assert_eq!(millis("2026-12-03T08:22:42Z"), Some(1_796_286_162_000));
    assert_eq!(millis("2026-13-03T08:22:42.619Z"), None);
    assert_eq!(millis("yesterday"), None);
}

#[test]
fn a_rejection_error_names_a_known_rule_or_other() {
    assert_eq!(
        rejected_rule(Some(
            "rejected by policy: devices: linux.devices[/dev/bt]: no"
        )),
        "devices"
    );
    assert_eq!(rejected_rule(Some("rejected by policy: bogus: x")), "other");
    assert_eq!(rejected_rule(None), "other");
}

#[test]
fn a_skipped_line_is_counted_read_and_breaks_the_chain() {
    let mut m = fold(&[lifecycle("create", "a", "2026-12-03T08:00:01.000Z", "")]);
    assert!(m
        .render()
        .contains("\ngvh_exporter_skipped_lines_total 0\n"));
    let (lines, bytes) = (m.read_lines.get(&[]), m.read_bytes.get(&[]));
    m.skipped_line(70 << 20);
    assert_eq!(m.skipped_lines.get(&[]), 1.0);
    assert_eq!(m.read_lines.get(&[]), lines + 1.0);
    assert_eq!(m.read_bytes.get(&[]), bytes + (70 << 20) as f64);
    assert_eq!(
        m.unparsed_lines.get(&[]),
        0.0,
        "a skipped line is not an unparsed one"
    );
    assert!(!m.intact());
    let text = m.render();
    assert!(
        text.contains("\ngvh_exporter_skipped_lines_total 1\n"),
        "{text}"
    );
    assert!(text.contains("\ngvh_audit_chain_intact 0\n"), "{text}");
}
