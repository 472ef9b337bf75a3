//! Measures `[mounts.workspace]` on one project: `workspace-cost PROJECT_DIR [ROUNDS]`. Runs
//! what a create does (the search, the pure rule, the staging copies) and what an exit does
//! (carry back, search, neutralise, remove the copies) with nothing changed in between, ROUNDS
//! times (default 5), and prints each step's median and range, the directories searched and the
//! repositories staged. The project is left as it was.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gvisor_hardened_core::workspace::{find, finish, stage, Ending, StageRequest};
use policy_injector::{harden, Context, Policy};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (ms(v[v.len() / 2]), ms(v[0]), ms(v[v.len() - 1]))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let project = PathBuf::from(
        args.next()
            .expect("usage: workspace-cost PROJECT_DIR [ROUNDS]"),
    );
    let rounds: usize = args.next().map_or(5, |s| s.parse().expect("a number"));
    let source = project.display().to_string();
    let mut policy = Policy::default();
    policy.mounts.writable_sources = vec![format!("{source}/**"), source.clone()];
    policy.mounts.denied_sources.clear();
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "user": {"uid": 1000, "gid": 1000}},
        "root": {"path": "rootfs", "readonly": true},
        "mounts": [{"destination": "/work", "type": "bind", "source": source, "options": ["rbind", "rw"]}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}]}
    });
    let bundle = tempfile::tempdir().expect("a bundle directory");
    let (mut finds, mut stages, mut exits) = (Vec::new(), Vec::new(), Vec::new());
    let (mut repos, mut dirs) = (0, 0);
    for round in 0..rounds {
        let id = format!("cost{round}");
        let t = Instant::now();
        let mut found =
            find(std::slice::from_ref(&source), &policy.mounts.workspace, &id).expect("the search");
        finds.push(t.elapsed());
        let t = Instant::now();
        let ctx = Context {
            container_id: id.clone(),
            git_tree: std::mem::take(&mut found.tree),
            ..Context::default()
        };
        let h = harden(&spec, &policy, &ctx).expect("hardened");
        stage(&StageRequest {
            container_id: &id,
            bundle: bundle.path(),
            policy: &policy,
            staged: &h.staged_git,
            writable: vec![(project.clone(), "/work".into())],
            host_tree: &ctx.host_tree,
            git: &found,
        })
        .expect("staged");
        stages.push(t.elapsed());
        repos = h.staged_git.len();
        let t = Instant::now();
        let report = finish(bundle.path(), Ending::Ran).expect("a state");
        exits.push(t.elapsed());
        dirs = report.dirs_searched;
        assert!(report.errors.is_empty(), "{report:?}");
    }
    let (f, s, e) = (median(finds), median(stages), median(exits));
    println!(
        "project {}: {repos} repositories staged, {dirs} directories searched at exit, {rounds} rounds\n\
         create: search {:.1} ms ({:.1}-{:.1}), staging copies {:.1} ms ({:.1}-{:.1})\n\
         exit:   conclude {:.1} ms ({:.1}-{:.1})",
        project.display(),
        f.0, f.1, f.2, s.0, s.1, s.2, e.0, e.1, e.2
    );
}
