//! Memory of processes, read from /proc: the shim, and everything below it (runsc-sandbox with
//! its ptrace stubs, runsc-gofer; for runc the container process itself).

use std::fs;
use std::ops::Add;

use gvisor_hardened_tests::inspect;
use serde_json::{json, Value};

/// Resident memory of one process or a sum of several, in KiB, from `smaps_rollup`.
///
/// RSS counts every resident page, shared ones in full (the binary's text in each process).
/// PSS charges a shared page to each sharer in proportion, so it depends on how many other
/// processes map the same binary at that moment: PSS summed over all sandboxes is what they cost
/// the node together. Private (clean + dirty) is what one more process of the kind adds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Mem {
    pub rss: u64,
    pub pss: u64,
    pub private: u64,
}

impl Add for Mem {
    type Output = Mem;
    fn add(self, o: Mem) -> Mem {
        Mem {
            rss: self.rss + o.rss,
            pss: self.pss + o.pss,
            private: self.private + o.private,
        }
    }
}

impl Mem {
    pub fn to_json(self) -> Value {
        json!({ "rss_kib": self.rss, "pss_kib": self.pss, "private_kib": self.private })
    }

    /// Per process (or per sandbox) when `self` is a sum over `n`.
    pub fn per(self, n: usize) -> MemF {
        let n = n.max(1) as f64;
        MemF {
            rss: self.rss as f64 / n,
            pss: self.pss as f64 / n,
            private: self.private as f64 / n,
        }
    }
}

/// [`Mem`] divided by a count.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemF {
    pub rss: f64,
    pub pss: f64,
    pub private: f64,
}

impl MemF {
    pub fn to_json(self) -> Value {
        json!({
            "rss_kib": self.rss.round(),
            "pss_kib": self.pss.round(),
            "private_kib": self.private.round(),
        })
    }
}

fn parse_rollup(text: &str) -> Mem {
    let mut m = Mem::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(key), Some(value)) = (it.next(), it.next()) else {
            continue;
        };
        let Ok(kib) = value.parse::<u64>() else {
            continue;
        };
        match key {
            "Rss:" => m.rss = kib,
            "Pss:" => m.pss = kib,
            "Private_Clean:" | "Private_Dirty:" => m.private += kib,
            _ => {}
        }
    }
    m
}

/// The memory of `pid`, or `None` if it is gone (or a zombie: its rollup is empty).
pub fn mem_of(pid: i32) -> Option<Mem> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let m = parse_rollup(&text);
    (m.rss > 0).then_some(m)
}

/// Live children of `pid` (every thread's children list: runsc reparents to the subreaper shim,
/// and a Go or tokio process adopts them on whichever thread).
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<i32> = tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Every descendant of `pid`, depth first.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut stack = children(pid);
    while let Some(p) = stack.pop() {
        out.push(p);
        stack.extend(children(p));
    }
    out
}

/// The pid of the shim server serving container `id`: containerd starts both our shim and its
/// Go shim as `containerd-shim-* -namespace NS -id ID -address ...` (the short-lived `start`
/// and `delete` invocations end with that word). The Go shim of containerd 1.6 writes no
/// `shim.pid` into the bundle, so the command line is the one thing both have.
pub fn shim_pid(namespace: &str, id: &str) -> Option<i32> {
    let ns = format!("-namespace {namespace} ");
    let id = format!(" -id {id} ");
    let found: Vec<i32> = inspect::processes()
        .into_iter()
        .filter(|p| {
            let argv0 = p.cmdline.split(' ').next().unwrap_or("");
            argv0.contains("containerd-shim")
                && p.cmdline.contains(&ns)
                && format!("{} ", p.cmdline).contains(&id)
                && !p.cmdline.ends_with(" start")
                && !p.cmdline.ends_with(" delete")
        })
        .map(|p| p.pid)
        .collect();
    match found.as_slice() {
        [pid] => Some(*pid),
        _ => None,
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> [f64; 3] {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut v = text.split_whitespace().filter_map(|x| x.parse().ok());
    [
        v.next().unwrap_or(f64::NAN),
        v.next().unwrap_or(f64::NAN),
        v.next().unwrap_or(f64::NAN),
    ]
}
