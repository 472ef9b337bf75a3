//! Egress: a download and small requests through our proxy (the shim's forwarder and proxy, a
//! policy with an allowlist, the SNI check and the audit on) against the tinyproxy + socat
//! recipe (`egress_recipe.rs`), under the same runsc, to the same upstream (`egress_upstream.rs`),
//! with the same client (`sandbox-probe http-get` / `http-connect`, timed inside the sandbox),
//! interleaved measurement by measurement with the order flipped every round. Then the shim's
//! memory with egress off and on, and with 0, 10, 100 idle tunnels open through each path.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use gvisor_hardened_tests::egress::forwarder_binary;
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::probe::probe_path;
use gvisor_hardened_tests::{poll_until, unique_id, ProbeLine, Run};

use crate::contenders::{Bench, BenchResult, Contender};
use crate::egress_recipe::{Held, Recipe, LISTEN, TUNED_LISTEN};
use crate::egress_upstream::{
    Upstream, BIG_BYTES, BIG_PATH, HTTP_HOST, HTTP_PORT, SMALL_BYTES, SMALL_PATH, TLS_HOST,
    TLS_PORT,
};
use crate::procfs::{descendants, loadavg, mem_of, Mem};

/// Goals (issue 11): ours over the recipe.
pub const GOAL_THROUGHPUT: f64 = 1.5;
pub const GOAL_LATENCY: f64 = 0.25;
/// Memory samples per reading, a second apart; the median is reported.
const MEMORY_SAMPLES: usize = 3;
const EXEC_TIMEOUT: Duration = Duration::from_secs(300);

pub struct Options {
    pub rounds: usize,
    pub warmup: usize,
    /// Small requests per round and path.
    pub small: usize,
    pub tunnels: Vec<usize>,
}

/// A way out of the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Way {
    Ours,
    Recipe,
    /// The recipe with `socat -b 65536` at both ends (not part of the goals).
    RecipeTuned,
    /// The same client on the host, straight to tinyproxy: what tinyproxy alone can do.
    HostTinyproxy,
}

impl Way {
    pub const ALL: [Way; 4] = [Way::Ours, Way::Recipe, Way::RecipeTuned, Way::HostTinyproxy];

    pub fn label(self) -> &'static str {
        match self {
            Way::Ours => "gvisor-hardened egress (ours)",
            Way::Recipe => "tinyproxy + socat recipe",
            Way::RecipeTuned => "recipe, socat -b 65536 at both ends",
            Way::HostTinyproxy => "host client -> tinyproxy (no sandbox)",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Way::Ours => "ours",
            Way::Recipe => "recipe",
            Way::RecipeTuned => "recipe_socat_b65536",
            Way::HostTinyproxy => "host_tinyproxy",
        }
    }
}

/// What is measured, one probe run each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    BigGet,
    BigConnect,
    SmallGet,
    SmallConnect,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::BigGet,
        Kind::BigConnect,
        Kind::SmallGet,
        Kind::SmallConnect,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Kind::BigGet => "big_get",
            Kind::BigConnect => "big_connect",
            Kind::SmallGet => "small_get",
            Kind::SmallConnect => "small_connect",
        }
    }

    fn big(self) -> bool {
        matches!(self, Kind::BigGet | Kind::BigConnect)
    }

    /// The probe's arguments after the proxy.
    fn args(self, small: usize) -> String {
        let (host, port) = match self {
            Kind::BigGet | Kind::SmallGet => (HTTP_HOST, HTTP_PORT),
            Kind::BigConnect | Kind::SmallConnect => (TLS_HOST, TLS_PORT),
        };
        let (path, n) = if self.big() {
            (BIG_PATH, 1)
        } else {
            (SMALL_PATH, small)
        };
        format!("{host} {port} {path} {n}")
    }

    fn command(self) -> &'static str {
        match self {
            Kind::BigGet | Kind::SmallGet => "http-get",
            Kind::BigConnect | Kind::SmallConnect => "http-connect",
        }
    }

    /// The variable a proxy-aware client reads for this kind of URL.
    fn variable(self) -> &'static str {
        match self {
            Kind::BigGet | Kind::SmallGet => "http_proxy",
            Kind::BigConnect | Kind::SmallConnect => "https_proxy",
        }
    }

    /// Inside a sandbox: the probe, pointed at the proxy its environment names.
    fn script(self, small: usize) -> String {
        format!(
            "exec sandbox-probe {} \"${}\" {}",
            self.command(),
            self.variable(),
            self.args(small)
        )
    }

    fn expected_bytes(self, small: usize) -> usize {
        if self.big() {
            BIG_BYTES
        } else {
            SMALL_BYTES * small
        }
    }
}

/// Per-request times (µs) out of a probe line, checked against the bytes expected.
fn parse(out: &str, expected: usize) -> BenchResult<Vec<f64>> {
    let line = ProbeLine::parse_last(out)?;
    if !line.is_ok() {
        return Err(format!("the client failed: {}", out.trim()).into());
    }
    let bytes: usize = line.field("bytes").ok_or("no bytes=")?.parse()?;
    if bytes != expected {
        return Err(format!("the client got {bytes} bytes, {expected} expected").into());
    }
    line.field("us")
        .ok_or("no us=")?
        .split(',')
        .map(|x| Ok(x.parse::<f64>()?))
        .collect()
}

/// The container with the egress policy, through the shim.
struct Ours<'a> {
    b: &'a Bench,
    id: String,
    shim: i32,
    policy: TestPolicy,
}

impl<'a> Ours<'a> {
    fn start(b: &'a Bench, upstream: &Upstream) -> BenchResult<Ours<'a>> {
        // `max_bytes`: the default cap (1 GiB per sandbox) would cut the fifth round's
        // download; every byte is still counted against the larger cap.
        let policy = TestPolicy::builder(&b.c, "egress-bench")
            .extra(&format!(
                r#"[network.egress]
max_bytes = "1Ti"
allow = ["{HTTP_HOST}:{HTTP_PORT}", "{TLS_HOST}:{TLS_PORT}"]
allow_cidrs = ["{cidr}"]
hosts = {{ "{HTTP_HOST}" = "{addr}", "{TLS_HOST}" = "{addr}" }}
plain_http = true
require_sni = true
forwarder = "{fwd}"
"#,
                cidr = upstream.ns.cidr(),
                addr = upstream.addr(),
                fwd = forwarder_binary().display()
            ))
            .write()?;
        let id = unique_id("begress");
        b.c.run_output(
            &Run::new(&b.image, &id)
                .runtime(policy.runtime())
                .detach()
                .cmd(["sleep", "3600"]),
        )?
        .checked()?;
        let shim = b.shim_pid(&id)?;
        Ok(Ours {
            b,
            id,
            shim,
            policy,
        })
    }

    fn exec(&self, script: &str) -> BenchResult<String> {
        Ok(self
            .b
            .c
            .exec(&self.id, &[], ["/bin/sh", "-c", script])
            .timeout(EXEC_TIMEOUT)
            .checked()?
            .stdout)
    }

    fn exec_held(&self, script: &str) -> BenchResult<(Held, String)> {
        let mut cmd = self.b.c.exec(&self.id, &[], ["/bin/sh", "-c", script]);
        cmd.command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        Held::first_line(cmd.spawn()?)
    }

    /// Egress records of this container in the audit log, by verdict.
    fn audited(&self) -> BTreeMap<String, usize> {
        let mut by = BTreeMap::new();
        for r in self.policy.audit_lines() {
            if r["event"] == "egress-connection" && r["container_id"] == self.id.as_str() {
                let v = r["verdict"].as_str().unwrap_or("?").to_string();
                *by.entry(v).or_default() += 1;
            }
        }
        by
    }

    /// The proxy's own time for each small request (OPEN to close, the audit record's
    /// `duration_ms`, whole milliseconds), by method: what the shim side costs of the latency
    /// the client sees, the rest being the sandbox's side (loopback TCP, the forwarder).
    fn proxy_ms(&self) -> BTreeMap<String, Vec<f64>> {
        let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for r in self.policy.audit_lines() {
            let small = r["bytes_down"]
                .as_u64()
                .is_some_and(|b| b > 0 && b < (SMALL_BYTES * 4) as u64);
            if r["event"] == "egress-connection"
                && r["container_id"] == self.id.as_str()
                && r["verdict"] == "allowed"
                && small
            {
                if let (Some(m), Some(d)) = (r["method"].as_str(), r["duration_ms"].as_u64()) {
                    by.entry(m.to_string()).or_default().push(d as f64);
                }
            }
        }
        by
    }

    fn sandbox_memory(&self) -> Mem {
        sum(descendants(self.shim))
    }

    /// The sandbox's proxy process (the shim's child `gvh-egress`, one per sandbox).
    fn proxy_memory(&self) -> Mem {
        sum(gvisor_hardened_tests::inspect::children_named(
            self.shim,
            "gvh-egress",
        ))
    }
}

fn sum(pids: Vec<i32>) -> Mem {
    pids.into_iter()
        .filter_map(mem_of)
        .fold(Mem::default(), |a, m| a + m)
}

/// The median of `MEMORY_SAMPLES` readings, a second apart (by PSS).
fn settle(read: impl Fn() -> Mem) -> Mem {
    let mut v = Vec::new();
    for i in 0..MEMORY_SAMPLES {
        if i > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        v.push(read());
    }
    v.sort_by_key(|m| m.pss);
    v[v.len() / 2]
}

/// Memory with `tunnels` idle tunnels open through each path.
pub struct TunnelLevel {
    pub tunnels: usize,
    pub ours_shim: Mem,
    pub ours_proxy: Mem,
    pub ours_sandbox: Mem,
    pub recipe_host: Mem,
    pub recipe_sandbox: Mem,
}

pub struct EgressResults {
    /// Per way and kind: MiB/s per round (big), or ms per request (small).
    pub samples: BTreeMap<(Way, Kind), Vec<f64>>,
    pub rounds: usize,
    pub small: usize,
    pub shim_egress_off: Mem,
    pub shim_egress_on_fresh: Mem,
    pub shim_egress_on_after: Mem,
    /// The proxy process, idle before any traffic and after the rounds.
    pub proxy_fresh: Mem,
    pub proxy_after: Mem,
    pub tunnels: Vec<TunnelLevel>,
    pub audited: BTreeMap<String, usize>,
    /// [`Ours::proxy_ms`] after the rounds (warm-up included).
    pub proxy_small_ms: BTreeMap<String, Vec<f64>>,
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

fn host_run(kind: Kind, small: usize, tinyproxy_port: u16) -> BenchResult<String> {
    let out = Command::new(probe_path())
        .arg(kind.command())
        .arg(format!("127.0.0.1:{tinyproxy_port}"))
        .args(kind.args(small).split(' '))
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn measure(b: &Bench, o: &Options) -> BenchResult<EgressResults> {
    let upstream = Upstream::start()?;
    // The shim with egress off: the bench's default policy, same image and command.
    let off_id = unique_id("bnoegress");
    b.start_sleeper(Contender::Hardened, &off_id)?;
    let off_shim = b.shim_pid(&off_id)?;
    let ours = Ours::start(b, &upstream)?;
    let recipe = Recipe::start(&upstream)?;
    let shim_egress_off = settle(|| mem_of(off_shim).unwrap_or_default());
    let shim_egress_on_fresh = settle(|| mem_of(ours.shim).unwrap_or_default());
    let proxy_fresh = settle(|| ours.proxy_memory());
    b.remove(&off_id, Some(off_shim))?;

    let run = |way: Way, kind: Kind| -> BenchResult<Vec<f64>> {
        let out = match way {
            Way::Ours => ours.exec(&kind.script(o.small))?,
            Way::Recipe => recipe.exec(&kind.script(o.small), LISTEN)?,
            Way::RecipeTuned => recipe.exec(&kind.script(o.small), TUNED_LISTEN)?,
            Way::HostTinyproxy => host_run(kind, o.small, recipe.tinyproxy_port)?,
        };
        parse(&out, kind.expected_bytes(o.small))
            .map_err(|e| format!("{} {}: {e}", way.label(), kind.key()).into())
    };
    for _ in 0..o.warmup {
        for kind in Kind::ALL {
            for way in Way::ALL {
                run(way, kind)?;
            }
        }
    }
    let load_before = loadavg();
    let mut samples: BTreeMap<(Way, Kind), Vec<f64>> = BTreeMap::new();
    for round in 0..o.rounds {
        for kind in Kind::ALL {
            // Rotated every round, so no way always runs first or after the same one.
            for k in 0..Way::ALL.len() {
                let way = Way::ALL[(round + k) % Way::ALL.len()];
                let us = run(way, kind)?;
                let s = samples.entry((way, kind)).or_default();
                if kind.big() {
                    s.push(BIG_BYTES as f64 / (1 << 20) as f64 / (us[0] / 1e6));
                } else {
                    s.extend(us.iter().map(|u| u / 1000.0));
                }
            }
        }
        eprint!("\r  egress: round {}/{}", round + 1, o.rounds);
    }
    eprintln!();
    let load_after = loadavg();
    let shim_egress_on_after = settle(|| mem_of(ours.shim).unwrap_or_default());
    let proxy_after = settle(|| ours.proxy_memory());
    let proxy_small_ms = ours.proxy_ms();

    let mut tunnels = Vec::new();
    for &n in &o.tunnels {
        eprintln!("  egress: memory with {n} idle tunnels");
        let script =
            format!("exec sandbox-probe http-hold \"$https_proxy\" {TLS_HOST} {TLS_PORT} {n} 600");
        let hold = |exec: &dyn Fn(&str) -> BenchResult<(Held, String)>| -> BenchResult<Held> {
            let before = upstream.hellos();
            let (held, _) = exec(&script)?;
            // Open end to end: the upstream read each tunnel's ClientHello.
            poll_until(
                "the tunnels to reach the upstream",
                Duration::from_secs(60),
                || (upstream.hellos() >= before + n).then_some(()),
            )?;
            Ok(held)
        };
        let mut held = hold(&|s| ours.exec_held(s))?;
        let ours_shim = settle(|| mem_of(ours.shim).unwrap_or_default());
        let ours_proxy = settle(|| ours.proxy_memory());
        let ours_sandbox = settle(|| ours.sandbox_memory());
        held.finish()?;
        let mut held = hold(&|s| recipe.exec_held(s))?;
        let recipe_host = settle(|| recipe.host_memory());
        let recipe_sandbox = settle(|| recipe.sandbox_memory());
        held.finish()?;
        tunnels.push(TunnelLevel {
            tunnels: n,
            ours_shim,
            ours_proxy,
            ours_sandbox,
            recipe_host,
            recipe_sandbox,
        });
    }
    let audited = ours.audited();
    b.remove(&ours.id, Some(ours.shim))?;
    drop(recipe);
    Ok(EgressResults {
        samples,
        rounds: o.rounds,
        small: o.small,
        shim_egress_off,
        shim_egress_on_fresh,
        shim_egress_on_after,
        proxy_fresh,
        proxy_after,
        tunnels,
        audited,
        proxy_small_ms,
        load_before,
        load_after,
    })
}
