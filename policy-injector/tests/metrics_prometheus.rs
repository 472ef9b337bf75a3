//! `policy-injector audit metrics` scraped by a real Prometheus (Debian's `prometheus` package,
//! installed by hack/lib.sh; run as a plain process with its own config, data directory and
//! loopback port, never the system service). A log is written as the shim's writer writes it
//! (chained records shaped like the shim's, a rotation in the middle); the counts are read back
//! through Prometheus's query API, deploy/prometheus/rules.yml is loaded and its alerts are
//! provoked: a refusal spike, OOM exits, and a replayed line that breaks the chain.
//! A missing `prometheus` or `promtool` fails the test; it is never skipped.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use policy_injector::audit_chain::{self, Origin, Tail};
use serde_json::Value;

mod exporter;
use exporter::Killed;
// The tests crate's GET and query encoding (that crate depends on this one).
#[path = "../../tests/src/http_get.rs"]
mod http_get;

const POLICY: &str = "/etc/gvisor-hardened/policy.toml";
const AGENT: &str = "gvisor-hardened-agent";

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// Appends records to a log the way the shim's writer does: linked to the live file's last line,
/// a genesis first in a new file, one `O_APPEND` write per record.
struct Log {
    path: PathBuf,
    lines: u64,
}

impl Log {
    fn append(&mut self, record: &str) {
        let live = std::fs::read(&self.path).unwrap_or_default();
        let last_line = |bytes: &[u8]| -> Option<Vec<u8>> {
            let body = bytes.strip_suffix(b"\n")?;
            Some(body.rsplit(|c| *c == b'\n').next().unwrap().to_vec())
        };
        let live_last = last_line(&live);
        let rotated_last = last_line(&std::fs::read(self.rotated()).unwrap_or_default());
        let tail = match &live_last {
            Some(l) => Tail::Line(l),
            None => Tail::Empty,
        };
        let next = audit_chain::next(tail, rotated_last.as_deref());
        let origin = Origin {
            time: "2026-12-03T08:00:00.000Z",
            node: "node-a",
            policy_sha256: "",
        };
        let out = audit_chain::compose(tail, next, &origin, record.as_bytes(), None).unwrap();
        self.lines += out.bytes.iter().filter(|b| **b == b'\n').count() as u64;
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .unwrap();
        f.write_all(&out.bytes).unwrap();
    }

    fn rotated(&self) -> PathBuf {
        let mut p = self.path.as_os_str().to_owned();
        p.push(".1");
        PathBuf::from(p)
    }

    /// What the writer does when the live file is full: shift the rotated files up by one and
    /// rename the live one to PATH.1; the next record begins a new file with a genesis linked
    /// to the old file's last line.
    fn rotate(&self) {
        let mut older = self.path.as_os_str().to_owned();
        older.push(".2");
        if self.rotated().exists() {
            std::fs::rename(self.rotated(), older).unwrap();
        }
        std::fs::rename(&self.path, self.rotated()).unwrap();
    }
}

fn lifecycle(event: &str, id: &str, time: &str, extra: &str) -> String {
    format!(
        r#"{{"time":"{time}","event":"{event}","namespace":"k8s.io","container_id":"{id}","policy":{{"path":"{POLICY}","sha256":"3efb4f1727e9920fe46b05d10be3f62f93558b9eecefa4048b8762bfed437463","mode":"enforce"}},"oom":false,"timed_out":false,"process_limit_exceeded":false{extra}}}"#
    )
}

fn create(id: &str, time: &str) -> String {
    lifecycle(
        "create",
        id,
        time,
        r#","decisions":[{"rule":"root","field":"root.readonly","action":"set","before":null,"after":true,"reason":"the root filesystem is read-only; scratch tmpfs mounts give writable space"}],"config_sha256":"9110efafa3d8acd33c79a01c4121f8949c52d9a46a683c79db001785e9124626""#,
    )
}

fn refusal(id: &str) -> String {
    lifecycle(
        "create-rejected",
        id,
        "2026-12-03T08:01:00.000Z",
        r#","error":"rejected by policy: mounts: mounts[/host]: bind of denied host path: source /etc matches or contains \"/etc/**\"""#,
    )
}

fn exit(id: &str, cause: &str, status: u32) -> String {
    lifecycle(
        "exit",
        id,
        "2026-12-03T08:02:00.000Z",
        &format!(r#","pid":30399,"exit_status":{status},"exit_cause":"{cause}""#),
    )
}

fn connection(verdict: &str, host: &str, rule: &str, up: u64, down: u64) -> String {
    format!(
        r#"{{"time":"2026-12-03T08:00:05.000Z","namespace":"k8s.io","sandbox_id":"a","container_id":"a","policy":"{AGENT}","event":"egress-connection","peer":"10.88.0.2:40000","method":"CONNECT","host":"{host}","port":443,"verdict":"{verdict}","rule":"{rule}","bytes_up":{up},"bytes_down":{down},"duration_ms":12}}"# // net-scan: data
    )
}

/// GET over loopback, HTTP/1.0 (the whole body until close); the status and the body.
fn get(addr: SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
    http_get::get(addr, target, None)
}

use http_get::encode;

/// The value of an instant query with one result, or None while Prometheus has none.
fn query(prom: SocketAddr, q: &str) -> Option<f64> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}", encode(q))).ok()?;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let result = v.pointer("/data/result")?.as_array()?;
    match result.as_slice() {
        [one] => one.pointer("/value/1")?.as_str()?.parse().ok(),
        _ => None,
    }
}

/// Polls until every query has its expected value (or the deadline passes, naming what was
/// last seen).
fn wait_for(prom: SocketAddr, expect: &[(&str, f64)]) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let seen: Vec<Option<f64>> = expect.iter().map(|(q, _)| query(prom, q)).collect();
        if seen
            .iter()
            .zip(expect)
            .all(|(s, (_, want))| *s == Some(*want))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never showed the expected values: {:?}",
            expect
                .iter()
                .zip(&seen)
                .map(|((q, want), s)| format!("{q}: want {want}, seen {s:?}"))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The names of the alerts Prometheus has firing.
fn firing(prom: SocketAddr) -> Vec<String> {
    let Ok((200, body)) = get(prom, "/api/v1/alerts") else {
        return Vec::new();
    };
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    v.pointer("/data/alerts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a["state"] == "firing")
        .filter_map(|a| a.pointer("/labels/alertname")?.as_str().map(String::from))
        .collect()
}

fn wait_firing(prom: SocketAddr, alerts: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = firing(prom);
        if alerts.iter().all(|a| now.iter().any(|f| f == a)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "alerts {alerts:?} never all fired; firing: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn the_rules_file_passes_promtool_check_and_its_unit_tests() {
    let rules = repo_file("deploy/prometheus/rules.yml");
    let out = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&rules)
        .output()
        .expect("promtool (Debian's prometheus package; hack/lib.sh installs it)");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(repo_file("deploy/prometheus/rules_test.yml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn prometheus_scrapes_the_counts_of_a_known_log_and_the_alerts_fire() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log {
        path: dir.path().join("audit.jsonl"),
        lines: 0,
    };
    // Before the exporter starts: two sandboxes created and started, one refused, one exited.
    log.append(&create("a", "2026-12-03T08:00:00.000Z"));
    log.append(&lifecycle(
        "start",
        "a",
        "2026-12-03T08:00:00.300Z",
        r#","pid":30399"#,
    ));
    log.append(&create("b", "2026-12-03T08:00:01.000Z"));
    log.append(&lifecycle(
        "start",
        "b",
        "2026-12-03T08:00:03.000Z",
        r#","pid":30400"#,
    ));
    log.append(&refusal("r0"));
    log.append(&exit("b", "oom", 137));
    log.rotate();
    log.append(&connection(
        "allowed",
        "api.example.test",
        "api.example.test:443",
        100,
        2000,
    ));
    log.append(&connection("denied", "evil.test", "not-allowed", 0, 0));

    let (_exporter, addr) = exporter::start(&log.path, &["--poll-ms", "50"]);

    // The exposition itself is what promtool calls valid.
    let (status, body) = get(addr, "/metrics").unwrap();
    assert_eq!(status, 200);
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian's prometheus package; hack/lib.sh installs it)");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(get(addr, "/nothing").unwrap().0, 404);
    assert_eq!(get(addr, "/").unwrap().0, 404);

    let prom_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: gvisor-hardened-audit\n    static_configs:\n      - targets: ['{addr}']\n",
            rules = repo_file("deploy/prometheus/rules.yml").display()
        ),
    )
    .unwrap();
    let prom_log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let prometheus = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={prom_addr}"))
        .stdout(prom_log.try_clone().unwrap())
        .stderr(prom_log)
        .spawn()
        .expect("prometheus (Debian's prometheus package; hack/lib.sh installs it)");
    let _prometheus = Killed(prometheus);

    let p = format!(r#"policy="{POLICY}""#);
    wait_for(
        prom_addr,
        &[
            (&format!("gvh_sandboxes_created_total{{{p}}}"), 2.0),
            (&format!("gvh_sandboxes_running{{{p}}}"), 1.0),
            (
                &format!(r#"gvh_refusals_total{{{p},rule="mounts",stage="create"}}"#),
                1.0,
            ),
            (&format!(r#"gvh_exits_total{{{p},cause="oom"}}"#), 1.0),
            (&format!("gvh_start_latency_seconds_count{{{p}}}"), 2.0),
            (
                &format!(r#"gvh_start_latency_seconds_bucket{{{p},le="0.5"}}"#),
                1.0,
            ),
            (&format!("gvh_start_latency_seconds_sum{{{p}}}"), 2.3),
            (
                &format!(
                    r#"gvh_egress_connections_total{{policy="{AGENT}",verdict="allowed",rule="api.example.test:443",host="api.example.test"}}"#
                ),
                1.0,
            ),
            (
                &format!(
                    r#"gvh_egress_connections_total{{policy="{AGENT}",verdict="denied",rule="not-allowed"}}"#
                ),
                1.0,
            ),
            (
                &format!(r#"gvh_egress_bytes_total{{policy="{AGENT}",direction="down"}}"#),
                2000.0,
            ),
            ("gvh_audit_chain_intact", 1.0),
            ("gvh_exporter_read_lines_total", log.lines as f64),
            ("gvh_exporter_files_opened_total", 2.0),
            // Denied hosts never become label values.
            (
                r#"count(gvh_egress_connections_total{host="evil.test"}) or vector(0)"#,
                0.0,
            ),
        ],
    );
    assert!(firing(prom_addr).is_empty(), "{:?}", firing(prom_addr));

    // A refusal spike and OOM exits, after Prometheus has seen their counters: alerts on
    // increase() need a sample from before.
    for i in 0..12 {
        log.append(&refusal(&format!("r{}", i + 1)));
    }
    // A rotation while the exporter follows the live file.
    log.rotate();
    for i in 0..4 {
        let id = format!("o{i}");
        log.append(&create(&id, "2026-12-03T08:03:00.000Z"));
        log.append(&exit(&id, "oom", 137));
    }
    wait_for(
        prom_addr,
        &[
            (
                &format!(r#"gvh_refusals_total{{{p},rule="mounts",stage="create"}}"#),
                13.0,
            ),
            (&format!(r#"gvh_exits_total{{{p},cause="oom"}}"#), 5.0),
            ("gvh_exporter_read_lines_total", log.lines as f64),
            ("gvh_exporter_files_opened_total", 3.0),
            ("gvh_audit_chain_intact", 1.0),
        ],
    );
    wait_firing(prom_addr, &["GvhRefusalSpike", "GvhOomRate"]);
    assert!(!firing(prom_addr).contains(&"GvhAuditChainBroken".to_string()));

    // Tampering: an earlier record replayed at the end of the live file (seq does not grow).
    let live = std::fs::read_to_string(&log.path).unwrap();
    let replayed = live.lines().nth(1).unwrap().to_string();
    OpenOptions::new()
        .append(true)
        .open(&log.path)
        .unwrap()
        .write_all(format!("{replayed}\n").as_bytes())
        .unwrap();
    wait_for(prom_addr, &[("gvh_audit_chain_intact", 0.0)]);
    wait_firing(prom_addr, &["GvhAuditChainBroken"]);
    // The offline verifier agrees that the chain is broken.
    let verify = Command::new(env!("CARGO_BIN_EXE_policy-injector"))
        .args(["audit", "verify", "--log"])
        .arg(&log.path)
        .output()
        .unwrap();
    assert_eq!(verify.status.code(), Some(3), "{verify:?}");
}
