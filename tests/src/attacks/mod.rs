//! The attack catalogue: hostile workloads run in hardened sandboxes through the real
//! containerd, shim and runsc, each with the outcome the policy promises and a check that the
//! host is unchanged afterwards.
//!
//! `tests/tests/integration/attacks.rs` runs one category per test; `hack/redteam.sh` runs them
//! all and prints the table. Each finished attack prints one machine-readable line (see
//! [`AttackResult::line`]) on stdout and, when `GVH_REDTEAM_OUT` names a file, appends it there.
//! `GVH_ATTACKS=name,name` runs only the attacks whose name contains one of the words.

pub mod docker;
pub mod egress;
pub mod filesystem;
pub mod host;
pub mod lab;
pub mod network;
pub mod privileges;
pub mod resources;
pub mod runsc_flags;
pub mod secrets;
pub mod smuggling;

use std::fmt;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::error::HarnessError;
use crate::leaks::container_leaks;
use crate::poll::poll_until;
use host::{HostSnapshot, Scope, FULL_TREES, QUICK_TREES};
use lab::Lab;

/// Why an attack did not hold (or could not be run): what was observed and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed(pub String);

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<HarnessError> for Failed {
    fn from(e: HarnessError) -> Self {
        Failed(format!("harness: {e}"))
    }
}

/// What an attack returns: what it observed (the attack held) or why it failed.
pub type Outcome = Result<String, Failed>;

/// Fails with `why` unless `cond`.
pub fn ensure(cond: bool, why: impl FnOnce() -> String) -> Result<(), Failed> {
    if cond {
        Ok(())
    } else {
        Err(Failed(why()))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Filesystem,
    Privileges,
    Resources,
    Network,
    Secrets,
    Smuggling,
    /// A representative subset through `docker run --runtime gvisor-hardened`.
    Docker,
    /// A sandbox with an egress allowlist trying to get anywhere else.
    Egress,
    /// Each runsc flag that weakens the sandbox, through every path to runsc's command line.
    RunscFlags,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Filesystem => "filesystem",
            Category::Privileges => "privileges",
            Category::Resources => "resources",
            Category::Network => "network",
            Category::Secrets => "secrets",
            Category::Smuggling => "spec-smuggling",
            Category::Docker => "docker-engine",
            Category::Egress => "egress",
            Category::RunscFlags => "runsc-flags",
        }
    }
}

/// One hostile workload.
pub struct Attack {
    pub name: &'static str,
    pub category: Category,
    /// The promised outcome, for the table.
    pub expected: &'static str,
    pub run: fn(&Lab) -> Outcome,
}

/// Every attack, in table order.
pub fn catalogue() -> Vec<Attack> {
    let mut all = Vec::new();
    all.extend(filesystem::attacks());
    all.extend(privileges::attacks());
    all.extend(resources::attacks());
    all.extend(network::attacks());
    all.extend(secrets::attacks());
    all.extend(smuggling::attacks());
    all.extend(egress::attacks());
    all.extend(runsc_flags::attacks());
    all
}

/// How one attack (or a category-level check) ended.
#[derive(Debug, Clone)]
pub struct AttackResult {
    pub category: Category,
    pub name: String,
    pub expected: String,
    pub observed: String,
    pub passed: bool,
    pub seconds: f64,
}

impl AttackResult {
    /// The one row of a category whose lab could not be set up.
    pub fn lab_failed(
        category: Category,
        name: &str,
        expected: &str,
        error: impl std::fmt::Display,
        started: Instant,
    ) -> AttackResult {
        AttackResult {
            category,
            name: name.into(),
            expected: expected.into(),
            observed: format!("FAILED: {error}"),
            passed: false,
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// The row that closes a category: the whole watched host compared with before, and what
    /// the teardown found (`problems`, empty when clean).
    pub fn host_after(
        category: Category,
        name: String,
        expected: &str,
        problems: &[String],
        entries: usize,
        started: Instant,
    ) -> AttackResult {
        AttackResult {
            category,
            name,
            expected: expected.into(),
            passed: problems.is_empty(),
            observed: if problems.is_empty() {
                format!("{entries} entries unchanged; clean shutdown; nothing left")
            } else {
                format!("FAILED: {}", problems.join("; "))
            },
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// `GVH-REDTEAM<TAB>category<TAB>name<TAB>PASS|FAIL<TAB>seconds<TAB>expected<TAB>observed`,
    /// with tabs and newlines inside the texts turned into spaces.
    pub fn line(&self) -> String {
        let clean = |s: &str| s.replace(['\t', '\n', '\r'], " ");
        format!(
            "GVH-REDTEAM\t{}\t{}\t{}\t{:.1}\t{}\t{}",
            self.category.as_str(),
            clean(&self.name),
            if self.passed { "PASS" } else { "FAIL" },
            self.seconds,
            clean(&self.expected),
            clean(&self.observed)
        )
    }

    pub(crate) fn emit(&self) {
        let line = self.line();
        println!("{line}");
        if let Some(path) = std::env::var_os("GVH_REDTEAM_OUT") {
            // One write per line on an O_APPEND file: concurrent categories never interleave.
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = f.write_all(format!("{line}\n").as_bytes());
            }
        }
    }
}

pub(crate) fn selected(name: &str) -> bool {
    match std::env::var("GVH_ATTACKS") {
        Ok(filter) if !filter.trim().is_empty() => filter
            .split(',')
            .map(str::trim)
            .any(|w| !w.is_empty() && name.contains(w)),
        _ => true,
    }
}

pub(crate) fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}

/// What the attack's containers left behind, after containerd's asynchronous cleanup had
/// [`crate::leaks::LEAK_GRACE`] to finish.
fn leftovers(lab: &Lab, ids: &[String]) -> Option<String> {
    let runtime = crate::run::Runtime::hardened();
    let mut last = Vec::new();
    let clean = poll_until(
        "the attack's containers to go",
        crate::leaks::LEAK_GRACE,
        || {
            last = ids
                .iter()
                .map(|id| (id, container_leaks(&lab.c, id, &runtime)))
                .filter(|(_, l)| !l.is_empty())
                .map(|(id, l)| format!("{id}: {}", l.to_string().trim().replace('\n', ";")))
                .collect();
            last.is_empty().then_some(())
        },
    );
    clean.is_err().then(|| last.join("; "))
}

fn scope(lab: &Lab, ids: &[String]) -> Scope {
    let mut names = vec![lab.c.namespace().to_string()];
    names.extend(ids.iter().cloned());
    Scope {
        names,
        cgroups: ids.to_vec(),
        runsc_roots: lab
            .c
            .runtime_root(&crate::run::Runtime::hardened())
            .into_iter()
            .collect(),
    }
}

fn run_one(lab: &Lab, attack: &Attack) -> AttackResult {
    let t0 = Instant::now();
    let before = HostSnapshot::take(QUICK_TREES, &scope(lab, &[]));
    let outcome = catch_unwind(AssertUnwindSafe(|| (attack.run)(lab)))
        .unwrap_or_else(|p| Err(Failed(format!("panicked: {}", panic_text(p)))));
    let ids = lab.take_used();
    let leaks = leftovers(lab, &ids);
    let diff = before.diff(&HostSnapshot::take(QUICK_TREES, &scope(lab, &ids)));
    let (mut passed, mut observed) = match outcome {
        Ok(seen) => (true, seen),
        Err(f) => (false, format!("FAILED: {f}")),
    };
    if let Some(l) = leaks {
        passed = false;
        observed.push_str(&format!("; LEFT BEHIND: {l}"));
    }
    if !diff.is_empty() {
        passed = false;
        observed.push_str(&format!("; HOST CHANGED: {diff}"));
    } else {
        observed.push_str("; host unchanged");
    }
    AttackResult {
        category: attack.category,
        name: attack.name.to_string(),
        expected: attack.expected.to_string(),
        observed,
        passed,
        seconds: t0.elapsed().as_secs_f64(),
    }
}

/// Runs every selected attack of `category` in one lab, one after the other, and the
/// category-level checks: the whole watched host (all of /usr too) unchanged from before the
/// first attack to after the lab's shutdown, and a shutdown that had nothing to force. Emits a
/// line per result and returns them all.
pub fn run_category(category: Category) -> Vec<AttackResult> {
    let attacks: Vec<Attack> = catalogue()
        .into_iter()
        .filter(|a| a.category == category && selected(a.name))
        .collect();
    let mut results = Vec::new();
    if attacks.is_empty() {
        return results;
    }
    let t0 = Instant::now();
    let whole_before = HostSnapshot::take(FULL_TREES, &Scope::default());
    let lab = match Lab::start() {
        Ok(lab) => lab,
        Err(e) => {
            let r = AttackResult::lab_failed(
                category,
                "lab",
                "a private containerd with the hardened shim",
                e,
                t0,
            );
            r.emit();
            return vec![r];
        }
    };
    let lab_dir = lab.c.dir().to_path_buf();
    let namespace = lab.c.namespace().to_string();
    let runsc_root = lab.c.runtime_root(&crate::run::Runtime::hardened());
    for attack in &attacks {
        let r = run_one(&lab, attack);
        r.emit();
        results.push(r);
    }
    let t1 = Instant::now();
    let shutdown = lab.shutdown();
    let whole_scope = Scope {
        names: vec![namespace.clone(), lab_dir.to_string_lossy().into_owned()],
        cgroups: vec![namespace],
        runsc_roots: runsc_root.into_iter().collect(),
    };
    let whole_after = HostSnapshot::take(FULL_TREES, &whole_scope);
    let diff = whole_before.diff(&whole_after);
    let mut problems = Vec::new();
    if let Err(e) = shutdown {
        problems.push(e.to_string());
    }
    if !diff.is_empty() {
        problems.push(format!("HOST CHANGED: {diff}"));
    }
    let r = AttackResult::host_after(
        category,
        format!("{}: host after the category", category.as_str()),
        "no file under /etc /root /home /usr /var/lib /boot /opt /srv changed; clean shutdown, no process, mount, cgroup or runsc state left",
        &problems,
        whole_after.file_count(),
        t1,
    );
    r.emit();
    results.push(r);
    results
}

/// Panics listing the failures, if any (the end of each category's test).
#[track_caller]
pub fn assert_all_held(results: &[AttackResult]) {
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.passed)
        .map(|r| format!("{}: expected {}; {}", r.name, r.expected, r.observed))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} attacks did not hold:\n{}",
        failed.len(),
        results.len(),
        failed.join("\n")
    );
}

/// Polls `f` for up to `timeout`, for attack code that waits on an outside condition.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    f: impl FnMut() -> Option<T>,
) -> Result<T, Failed> {
    Ok(poll_until(what, timeout, f)?)
}
