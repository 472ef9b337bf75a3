//! The README's "For platform teams" picture, from a real run: a private containerd, our shim,
//! real runsc, five sandboxes under two policies that end differently (a normal exit, a non-zero
//! exit, the wall-clock limit, an OOM kill, egress through the shim's proxy up to its byte cap)
//! and two creates the policy refuses, all writing one audit log. Then `policy-injector audit
//! metrics` serves that log, Debian's Prometheus (hack/lib.sh installs it; never skipped)
//! scrapes it, the test checks the known counts through Prometheus's query API and draws what
//! the queries return as an SVG (`platform_metrics/chart.rs`). On the way, the log exports to
//! OCSF events its schema accepts, its signatures verify, and the finished sandbox's run is
//! attested and the attestation verified against the file it wrote, with the commands the
//! README gives.
//!
//! The picture is written to `$CARGO_TARGET_TMPDIR/platform-metrics.svg` on every run and checked
//! to show each queried value; with `GVH_UPDATE_DOCS=1` it is also written to
//! `docs/platform-metrics.svg`, the copy the README embeds. Start latencies differ from run to
//! run, so the committed copy is not compared with a new run.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gvisor_hardened_tests::audit_tools::{
    assert_chain_intact_and_records_fit_the_schema, policy_injector_binary, validate_ocsf,
};
use gvisor_hardened_tests::egress::{egress_section, UpstreamNetns};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;
use serde_json::Value;

mod chart;
use chart::{bar_title, Panel};
mod idle_connections;

/// A process killed (and waited for) when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn get(addr: SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
    gvisor_hardened_tests::http_get::get(addr, target, None)
}

use gvisor_hardened_tests::http_get::encode;

/// An instant query's result vector: each series' value of `label` ("" when absent) and its
/// value, sorted by label; `None` while Prometheus cannot answer.
fn query(prom: SocketAddr, q: &str, label: &str) -> Option<Vec<(String, f64)>> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}", encode(q))).ok()?;
    if status != 200 {
        return None;
    }
    let v: Value = serde_json::from_str(&body).ok()?;
    let mut out = Vec::new();
    for series in v.pointer("/data/result")?.as_array()? {
        let name = series["metric"][label].as_str().unwrap_or("").to_string();
        let value = series.pointer("/value/1")?.as_str()?.parse().ok()?;
        out.push((name, value));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Some(out)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `policy-injector audit metrics` over `log` on a free loopback port (with `extra` arguments),
/// and where it serves.
fn start_exporter(log: &Path, extra: &[&str]) -> (Killed, SocketAddr) {
    let child = Command::new(policy_injector_binary().unwrap())
        .args(["audit", "metrics", "--listen", "127.0.0.1:0", "--log"])
        .arg(log)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut exporter = Killed(child);
    let mut first = String::new();
    BufReader::new(exporter.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // "serving http://127.0.0.1:PORT/metrics from PATH"
    let addr = first
        .strip_prefix("serving http://") // net-scan: data
        .and_then(|r| r.split_once("/metrics"))
        .map(|(a, _)| a.parse().unwrap())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    (exporter, addr)
}

/// Prometheus as a plain process: its own config, data directory and loopback port, scraping
/// `target` every second with the project's rules loaded.
fn start_prometheus(dir: &Path, target: SocketAddr) -> (Killed, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\n\
             scrape_configs:\n  - job_name: gvisor-hardened-audit\n    static_configs:\n      - targets: ['{target}']\n",
            rules = repo_file("deploy/prometheus/rules.yml").display()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("prometheus (Debian's prometheus package; hack/lib.sh installs it)");
    (Killed(child), addr)
}

/// The policy's file name: the `policy` label is the file's path, which is a temporary
/// directory here; the picture shows the name.
fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// The per-bucket counts of a cumulative histogram (`le` → count), up to the first bucket
/// that holds every observation; labels read "≤ 0.5 s".
fn buckets(cumulative: &[(String, f64)]) -> Vec<(String, f64)> {
    let mut by_le: Vec<(f64, f64)> = cumulative
        .iter()
        .map(|(le, n)| (le.parse::<f64>().unwrap_or(f64::INFINITY), *n))
        .collect();
    by_le.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = by_le.last().map(|b| b.1).unwrap_or(0.0);
    let mut out = Vec::new();
    let mut below = 0.0;
    for (le, n) in by_le {
        let label = if le.is_infinite() {
            "> last bucket".to_string()
        } else {
            format!("≤ {le} s")
        };
        out.push((label, n - below));
        below = n;
        if n >= total {
            break;
        }
    }
    out
}

const STEPS: &str = r#"
step() { name=$1; shift; out=$("$@" 2>&1); echo "$name rc=$? $(echo "$out" | head -1)"; }
step allowed wget -q -O - http://upstream.example.test:8080/hello.txt
step not-listed wget -q -O - http://elsewhere.example.test:8080/x
step big sh -c 'wget -q -O - http://upstream.example.test:8080/big.bin 2>/dev/null | wc -c'
step after-cap wget -q -O - http://upstream.example.test:8080/hello.txt
"#;

#[test]
fn prometheus_shows_a_real_runs_sandboxes_exits_refusals_and_egress_and_the_test_draws_it() {
    const CAP: usize = 64 * 1024;
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let big = vec![b'x'; 4 * CAP];
    ns.serve(&inside, 8080, &[("hello.txt", b"hello"), ("big.bin", &big)])
        .unwrap();
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();

    // Two policies, one audit log: the node's log, as every policy on a node shares it.
    let log = c.dir().join("node-audit.jsonl");
    // One signing key for the node: every sandbox's final record is signed, so a run can be
    // attested. `signing_key` comes first in the extra TOML: it lands in the `[audit]` table the
    // builder opened.
    let keys = c.dir().join("audit-signing");
    let pi = |args: &[&std::ffi::OsStr]| {
        let o = Command::new(policy_injector_binary().unwrap())
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "policy-injector {args:?}: {o:?}");
        o
    };
    pi(&[
        "audit".as_ref(),
        "keygen".as_ref(),
        "--out".as_ref(),
        keys.as_os_str(),
    ]);
    let (key, public) = (keys.with_extension("key"), keys.with_extension("pub"));
    let signing = format!("signing_key = {:?}\n", key.display().to_string());
    // The finished sandbox's volume, under a directory standing for its root (what
    // `verify-attestation --artifacts` takes).
    let root = c.dir().join("ok-root");
    let volume = root.join("data");
    std::fs::create_dir_all(&volume).unwrap();
    // The sandbox runs as 65534.
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777)).unwrap();
    let agent = TestPolicy::builder(&c, "agent")
        .audit_path(&log)
        .extra(&format!(
            "{signing}{}max_bytes = \"{CAP}\"\n",
            egress_section(
                &["upstream.example.test:8080"],
                &[("upstream.example.test", inside.clone())],
                &[ns.cidr()],
            )
        ))
        .write()
        .unwrap();
    let batch = TestPolicy::builder(&c, "batch")
        .audit_path(&log)
        .extra(&format!(
            "{signing}[lifetime]\nmax_runtime = \"3s\"\ngrace_period = \"1s\"\n\
             [mounts]\nwritable_sources = [\"{}/**\"]\n",
            root.display()
        ))
        .write()
        .unwrap();

    let mut ids = Vec::new();
    let mut run = |policy: &TestPolicy, prefix: &str, r: &dyn Fn(Run) -> Run| {
        let id = unique_id(prefix);
        let out = c
            .run_output(&r(
                Run::new(image.reference(), &id).runtime(policy.runtime())
            ))
            .unwrap();
        ids.push((id.clone(), policy.runtime()));
        (id, out)
    };
    let (_, out) = run(&agent, "egress", &|r| r.sh(STEPS));
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("allowed rc=0 hello"), "{out}");
    let mount = format!(
        "type=bind,src={},dst=/data,options=rbind:rw",
        volume.display()
    );
    let (ok_id, out) = run(&batch, "ok", &|r| {
        r.flags(["--mount", mount.as_str()])
            .sh("echo result > /data/out.txt")
    });
    assert_eq!(out.code(), 0, "{out}");
    let (_, out) = run(&batch, "fails", &|r| r.sh("exit 3"));
    assert_eq!(out.code(), 3, "{out}");
    // sh ignores SIGTERM as pid 1 while `sleep` runs in the foreground: the limit's SIGKILL
    // ends it.
    let (_, out) = run(&batch, "slow", &|r| r.sh("trap '' TERM; sleep 600"));
    assert!(out.code() == 137 || out.code() == 143, "{out}");
    // Under the policy without a wall-clock limit, so the OOM kill never races the limit on a
    // loaded machine.
    let (_, out) = run(&agent, "greedy", &|r| {
        r.flags(["--annotation", "gvisor-hardened.dev/memory=64Mi"])
            .probe(["mem", "1024", "60"])
    });
    assert_eq!(out.code(), 137, "the sandbox is OOM-killed: {out}");
    for flag in ["--privileged", "--net-host"] {
        let (_, out) = run(&batch, "refused", &|r| {
            r.flags([flag]).sh("echo must-not-run")
        });
        assert!(!out.success(), "{flag}: {out}");
    }
    for (id, runtime) in &ids {
        let _ = c.ctr().args(["container", "delete", id]).output();
        assert_nothing_left(&c, id, runtime);
    }
    assert_chain_intact_and_records_fit_the_schema(&log);
    let lines = std::fs::read_to_string(&log).unwrap().lines().count();
    // The log as a pipeline takes it: every real record, the proxy's lookups, forwarder and
    // byte cap among them, is an OCSF event that OCSF's schema accepts.
    let o = pi(&[
        "audit".as_ref(),
        "export".as_ref(),
        "--format".as_ref(),
        "ocsf".as_ref(),
        "--log".as_ref(),
        log.as_os_str(),
    ]);
    let events = String::from_utf8(o.stdout).unwrap();
    assert_eq!(events.lines().count(), lines, "one event per record");
    for class in [1007, 1008, 2004, 4001, 4003, 6002] {
        assert!(
            events.contains(&format!("\"class_uid\":{class},")),
            "no OCSF class {class} in the export of the run"
        );
    }
    let ocsf = c.dir().join("run.ocsf.jsonl");
    std::fs::write(&ocsf, &events).unwrap();
    let checked = validate_ocsf("1.8.0", &ocsf).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", checked.trim());
    // The finished sandbox's run, attested and verified as the README's commands do it; the
    // log's signatures verify with the public key.
    let envelope = c.dir().join(format!("{ok_id}.intoto.json"));
    let o = pi(&[
        "audit".as_ref(),
        "verify".as_ref(),
        "--log".as_ref(),
        log.as_os_str(),
        "--public-key".as_ref(),
        public.as_os_str(),
    ]);
    println!(
        "audit verify: {}",
        String::from_utf8_lossy(&o.stdout).trim()
    );
    pi(&[
        "audit".as_ref(),
        "attest".as_ref(),
        "--log".as_ref(),
        log.as_os_str(),
        "--container".as_ref(),
        ok_id.as_ref(),
        "--key".as_ref(),
        key.as_os_str(),
        "--out".as_ref(),
        envelope.as_os_str(),
    ]);
    let o = pi(&[
        "audit".as_ref(),
        "verify-attestation".as_ref(),
        "--public-key".as_ref(),
        public.as_os_str(),
        envelope.as_os_str(),
        "--artifacts".as_ref(),
        root.as_os_str(),
    ]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains(", 1 subject(s), ") && said.contains("artifacts: all 1 subject(s)"),
        "{said}"
    );
    // The same check refuses the file once it changed.
    std::fs::write(volume.join("out.txt"), b"edited\n").unwrap();
    let o = Command::new(policy_injector_binary().unwrap())
        .args(["audit", "verify-attestation", "--public-key"])
        .args([public.as_os_str(), envelope.as_os_str()])
        .arg("--artifacts")
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{o:?}");

    let dir = tempfile::tempdir().unwrap();
    let (_exporter, exporter_addr) = start_exporter(&log, &[]);
    let (_prometheus, prom) = start_prometheus(dir.path(), exporter_addr);

    // Prometheus has scraped the whole log once it reports every line read.
    poll_until(
        "Prometheus to have scraped the whole log",
        Duration::from_secs(90),
        || {
            let read = query(prom, "gvh_exporter_read_lines_total", "")?;
            (read.first()?.1 == lines as f64).then_some(())
        },
    )
    .unwrap();

    let (agent_path, batch_path) = (
        agent.path.display().to_string(),
        batch.path.display().to_string(),
    );
    let q = |expr: &str, label: &str| {
        query(prom, expr, label).unwrap_or_else(|| panic!("no answer to {expr}"))
    };
    let created: Vec<(String, f64)> = q("sum by (policy) (gvh_sandboxes_created_total)", "policy")
        .into_iter()
        .map(|(p, n)| (file_name(&p), n))
        .collect();
    let exits = q("sum by (cause) (gvh_exits_total)", "cause");
    let refusals = q("sum by (rule) (gvh_refusals_total)", "rule");
    let egress = q("sum by (verdict) (gvh_egress_connections_total)", "verdict");
    let latency = buckets(&q("sum by (le) (gvh_start_latency_seconds_bucket)", "le"));
    let one = |expr: &str| q(expr, "").first().map(|s| s.1).unwrap_or(0.0);
    let evidence = vec![
        (
            "audit chain intact".to_string(),
            one("gvh_audit_chain_intact"),
        ),
        (
            "egress byte cap crossings".to_string(),
            one("sum(gvh_egress_byte_cap_crossings_total)"),
        ),
        (
            "forwarder deaths".to_string(),
            one("sum(gvh_egress_forwarder_deaths_total)"),
        ),
        (
            "audit records read".to_string(),
            one("gvh_exporter_read_lines_total"),
        ),
    ];

    // The known run, as Prometheus has it.
    let agent_name = file_name(&agent_path);
    let batch_name = file_name(&batch_path);
    assert_eq!(
        created,
        [(agent_name, 2.0), (batch_name, 3.0)],
        "sandboxes created"
    );
    assert_eq!(
        exits,
        [
            ("exited".to_string(), 3.0),
            ("oom".to_string(), 1.0),
            ("timeout".to_string(), 1.0)
        ],
        "exits"
    );
    assert_eq!(
        refusals,
        [
            ("devices".to_string(), 1.0),
            ("namespaces".to_string(), 1.0)
        ],
        "refusals"
    );
    // The small download, the big one cut at the cap, a host not listed and a request after
    // the cap.
    assert_eq!(
        egress,
        [
            ("allowed".to_string(), 1.0),
            ("cut".to_string(), 1.0),
            ("denied".to_string(), 2.0)
        ],
        "egress"
    );
    assert_eq!(latency.iter().map(|b| b.1).sum::<f64>(), 5.0, "{latency:?}");
    assert_eq!(evidence[0].1, 1.0, "chain intact");
    assert_eq!(evidence[1].1, 1.0, "byte cap crossed once");
    assert_eq!(evidence[2].1, 0.0, "no forwarder death");
    assert_eq!(evidence[3].1, lines as f64, "records read");

    let panels = vec![
        Panel {
            title: "Sandboxes created, by policy".into(),
            note: "sum by (policy) (gvh_sandboxes_created_total)".into(),
            color: Some("#0969da"),
            rows: created,
        },
        Panel {
            title: "Exits, by cause".into(),
            note: "sum by (cause) (gvh_exits_total)".into(),
            color: Some("#8250df"),
            rows: exits,
        },
        Panel {
            title: "Refused creates, by policy rule".into(),
            note: "sum by (rule) (gvh_refusals_total)".into(),
            color: Some("#cf222e"),
            rows: refusals,
        },
        Panel {
            title: "Egress connections, by verdict".into(),
            note: "sum by (verdict) (gvh_egress_connections_total)".into(),
            color: Some("#1a7f37"),
            rows: egress,
        },
        Panel {
            title: "Start latency, create to start".into(),
            note: "sum by (le) (gvh_start_latency_seconds_bucket)".into(),
            color: Some("#bf8700"),
            rows: latency,
        },
        Panel {
            title: "Audit chain and egress limits".into(),
            note: "gvh_audit_chain_intact, gvh_egress_*_total, gvh_exporter_*".into(),
            color: None,
            rows: evidence,
        },
    ];
    let svg = chart::render(
        "gvisor-hardened: what Prometheus shows after a test run",
        "5 sandboxes under 2 policies and 2 refused creates (real containerd, shim, runsc), \
         scraped from `policy-injector audit metrics`",
        &panels,
    );
    for p in &panels {
        for (label, value) in &p.rows {
            let title = format!("<title>{}</title>", bar_title(&p.title, label, *value));
            assert!(svg.contains(&title), "the picture lacks {title}");
        }
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("platform-metrics.svg");
    std::fs::write(&out, &svg).unwrap();
    println!("picture: {}", out.display());
    if std::env::var_os("GVH_UPDATE_DOCS").is_some_and(|v| v == "1") {
        let docs = repo_file("docs/platform-metrics.svg");
        std::fs::create_dir_all(docs.parent().unwrap()).unwrap();
        std::fs::write(&docs, &svg).unwrap();
        println!("updated {}", docs.display());
    }
    drop(_prometheus);
    drop(_exporter);
    assert_clean_shutdown(c);
}
