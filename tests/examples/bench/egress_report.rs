//! The egress section's tables and JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::egress::{EgressResults, Kind, Way, GOAL_LATENCY, GOAL_THROUGHPUT};
use crate::egress_upstream::{BIG_BYTES, SMALL_BYTES};
use crate::procfs::Mem;
use crate::stats::{ratio, round3, Summary};

fn load(l: [f64; 3]) -> String {
    format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "meets"
    } else {
        "misses"
    }
}

impl EgressResults {
    pub fn summary(&self, way: Way, kind: Kind) -> Option<Summary> {
        self.samples.get(&(way, kind)).and_then(|s| Summary::of(s))
    }

    /// Ours over the recipe, by median.
    pub fn ratio(&self, kind: Kind) -> Option<f64> {
        let a = self.summary(Way::Ours, kind)?;
        let b = self.summary(Way::Recipe, kind)?;
        ratio(a.median, b.median)
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "**Egress** (our forwarder and proxy, allowlist + SNI check + audit on, against the tinyproxy + socat recipe; \
             same runsc `--network=none`, same upstream in a test network namespace, same client timed inside the sandbox; \
             {} interleaved rounds, each: one {} MiB download and {} small ({} B) requests per way, GET via `http_proxy` \
             and CONNECT via `https_proxy`, a ClientHello with the host's SNI at the start of each tunnel). Load during: {} -> {}.\n",
            self.rounds,
            BIG_BYTES >> 20,
            self.small,
            SMALL_BYTES,
            load(self.load_before),
            load(self.load_after)
        );
        let _ = writeln!(
            o,
            "| way | 100 MiB GET, MiB/s median (min-max) | 100 MiB CONNECT, MiB/s | small GET, ms median / p95 | small CONNECT, ms median / p95 |\n|---|---:|---:|---:|---:|"
        );
        for way in Way::ALL {
            let big = |k| {
                self.summary(way, k).map_or("-".into(), |s| {
                    format!("{:.0} ({:.0}-{:.0})", s.median, s.min, s.max)
                })
            };
            let small = |k| {
                self.summary(way, k)
                    .map_or("-".into(), |s| format!("{:.2} / {:.2}", s.median, s.p95))
            };
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                way.label(),
                big(Kind::BigGet),
                big(Kind::BigConnect),
                small(Kind::SmallGet),
                small(Kind::SmallConnect)
            );
        }
        let _ = writeln!(
            o,
            "\nOurs / recipe (medians): throughput GET **{}**, CONNECT **{}** (goal >= {GOAL_THROUGHPUT}); \
             small-request latency GET **{}**, CONNECT **{}** (goal <= {GOAL_LATENCY}).",
            self.ratio_text(Kind::BigGet, true),
            self.ratio_text(Kind::BigConnect, true),
            self.ratio_text(Kind::SmallGet, false),
            self.ratio_text(Kind::SmallConnect, false),
        );
        let audited: Vec<String> = self
            .audited
            .iter()
            .map(|(v, n)| format!("{n} {v}"))
            .collect();
        let _ = writeln!(
            o,
            "Audit records of our container's connections: {}.\n",
            if audited.is_empty() {
                "none".to_string()
            } else {
                audited.join(", ")
            }
        );
        let proxy: Vec<String> = self
            .proxy_small_ms
            .iter()
            .filter_map(|(m, v)| {
                Summary::of(v).map(|s| {
                    format!(
                        "{m} median {:.0} ms (p95 {:.0}, n={})",
                        s.median,
                        s.p95,
                        v.len()
                    )
                })
            })
            .collect();
        if !proxy.is_empty() {
            let _ = writeln!(
                o,
                "Of our small-request latency, the shim's proxy itself (OPEN to close, the audit record's `duration_ms`, whole ms): {}.\n",
                proxy.join("; ")
            );
        }
        self.memory_markdown(&mut o);
        o
    }

    fn ratio_text(&self, kind: Kind, higher_is_better: bool) -> String {
        match self.ratio(kind) {
            Some(r) => {
                let ok = if higher_is_better {
                    r >= GOAL_THROUGHPUT
                } else {
                    r <= GOAL_LATENCY
                };
                format!("{r:.2}x, {}", verdict(ok))
            }
            None => "-".into(),
        }
    }

    fn memory_markdown(&self, o: &mut String) {
        let m = |x: Mem| format!("{} / {}", mib(x.pss), mib(x.private));
        let _ = writeln!(
            o,
            "Shim memory, PSS / private MiB: egress off {}; egress on, before any traffic {}; after the rounds {}.\n",
            m(self.shim_egress_off),
            m(self.shim_egress_on_fresh),
            m(self.shim_egress_on_after)
        );
        let _ = writeln!(
            o,
            "The sandbox's proxy process (its own, confined; code pages shared with the shim's binary), PSS / private MiB: \
             idle before any traffic {}; after the rounds {}.\n",
            m(self.proxy_fresh),
            m(self.proxy_after)
        );
        if self.tunnels.is_empty() {
            return;
        }
        let _ = writeln!(
            o,
            "Idle tunnels held open (CONNECT + ClientHello, upstream reached), PSS / private MiB. Ours: the shim, its proxy \
             process, and everything below the shim (the proxy process, runsc sandbox, gofer, the forwarder's `runsc exec`); recipe: tinyproxy and the host socat \
             with its children, and runsc's processes. Both sandbox columns include the holding client's `runsc exec`.\n"
        );
        let _ = writeln!(
            o,
            "| tunnels | ours: shim | ours: proxy process | ours: sandbox | recipe: tinyproxy + socat | recipe: sandbox |\n|---:|---:|---:|---:|---:|---:|"
        );
        for l in &self.tunnels {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} |",
                l.tunnels,
                m(l.ours_shim),
                m(l.ours_proxy),
                m(l.ours_sandbox),
                m(l.recipe_host),
                m(l.recipe_sandbox)
            );
        }
        if let (Some(a), Some(z)) = (self.tunnels.first(), self.tunnels.last()) {
            let n = z.tunnels.saturating_sub(a.tunnels);
            if n > 0 {
                let per = |hi: Mem, lo: Mem| {
                    format!(
                        "{:.1} / {:.1}",
                        (hi.pss as f64 - lo.pss as f64) / n as f64,
                        (hi.private as f64 - lo.private as f64) / n as f64
                    )
                };
                let _ = writeln!(
                    o,
                    "| per tunnel, KiB ({} -> {}) | {} | {} | {} | {} | {} |",
                    a.tunnels,
                    z.tunnels,
                    per(z.ours_shim, a.ours_shim),
                    per(z.ours_proxy, a.ours_proxy),
                    per(z.ours_sandbox, a.ours_sandbox),
                    per(z.recipe_host, a.recipe_host),
                    per(z.recipe_sandbox, a.recipe_sandbox)
                );
            }
        }
        o.push('\n');
    }

    pub fn to_json(&self) -> Value {
        let mut ways = serde_json::Map::new();
        for way in Way::ALL {
            let mut kinds = serde_json::Map::new();
            for kind in Kind::ALL {
                let s = self.samples.get(&(way, kind));
                kinds.insert(
                    kind.key().into(),
                    json!({
                        "unit": if matches!(kind, Kind::BigGet | Kind::BigConnect) { "MiB/s per round" } else { "ms per request" },
                        "samples": s.map(|v| v.iter().map(|x| round3(*x)).collect::<Vec<_>>()),
                        "summary": self.summary(way, kind).map(|s| s.to_json()),
                    }),
                );
            }
            ways.insert(way.key().into(), Value::Object(kinds));
        }
        let ratios: serde_json::Map<String, Value> = Kind::ALL
            .iter()
            .map(|k| (k.key().to_string(), json!(self.ratio(*k).map(round3))))
            .collect();
        json!({
            "rounds": self.rounds,
            "small_requests_per_round": self.small,
            "big_bytes": BIG_BYTES,
            "small_bytes": SMALL_BYTES,
            "ways": ways,
            "ratio_ours_over_recipe_median": ratios,
            "goals": {"throughput_at_least": GOAL_THROUGHPUT, "latency_at_most": GOAL_LATENCY},
            "audited_connections": self.audited,
            "proxy_small_request_ms_by_method": self.proxy_small_ms,
            "shim_memory_kib": {
                "egress_off": self.shim_egress_off.to_json(),
                "egress_on_fresh": self.shim_egress_on_fresh.to_json(),
                "egress_on_after_rounds": self.shim_egress_on_after.to_json(),
            },
            "proxy_process_memory_kib": {
                "idle_before_traffic": self.proxy_fresh.to_json(),
                "after_rounds": self.proxy_after.to_json(),
            },
            "idle_tunnels": self.tunnels.iter().map(|l| json!({
                "tunnels": l.tunnels,
                "ours_shim_kib": l.ours_shim.to_json(),
                "ours_proxy_kib": l.ours_proxy.to_json(),
                "ours_sandbox_kib": l.ours_sandbox.to_json(),
                "recipe_host_kib": l.recipe_host.to_json(),
                "recipe_sandbox_kib": l.recipe_sandbox.to_json(),
            })).collect::<Vec<_>>(),
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
        })
    }
}
