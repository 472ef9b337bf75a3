//! Hostile workloads through `docker run --runtime gvisor-hardened` on a private Docker daemon:
//! a representative subset of the catalogue (one or two per category, chosen for what Docker
//! changes on the way: its flags, its default capabilities and seccomp profile, its own OOM and
//! pids accounting), each with its promised outcome, nothing left behind and an unchanged host.
//! The whole catalogue runs through containerd; running it all again through Docker would
//! double the red-team time for what the spec the runtime sees already covers.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use super::host::{HostSnapshot, Scope, FULL_TREES, QUICK_TREES};
use super::{ensure, panic_text, selected, AttackResult, Category, Failed, Outcome};
use crate::docker::{DockerOptions, Dockerd};
use crate::engine::{container_leaks, read_cidfile, HARDENED};
use crate::ids::unique_id;
use crate::image::TEST_IMAGE_REF;
use crate::leaks::LEAK_GRACE;
use crate::netns::LoopbackTarget;
use crate::poll::poll_until;
use crate::probe::ProbeLine;
use crate::process::CommandOutput;

struct DockerAttack {
    name: &'static str,
    expected: &'static str,
    run: fn(&Lab) -> Outcome,
}

/// The daemon and the container ids each attack used.
pub struct Lab {
    d: Dockerd,
    used: std::cell::RefCell<Vec<String>>,
}

impl Lab {
    /// `docker run [--rm] --runtime gvisor-hardened ARGS IMAGE sh -c SCRIPT`.
    fn run(
        &self,
        rm: bool,
        args: &[&str],
        script: &str,
    ) -> Result<(CommandOutput, String), Failed> {
        let cid = self.d.dir().path().join(format!("cid-{}", unique_id("a")));
        let mut cmd = self.d.docker().arg("run");
        if rm {
            cmd = cmd.arg("--rm");
        }
        let out = cmd
            .args(["--runtime", HARDENED, "--cidfile"])
            .arg(&cid)
            .args(args)
            .args([TEST_IMAGE_REF, "sh", "-c", script])
            .output()?;
        let id = read_cidfile(&cid).unwrap_or_default();
        if !id.is_empty() {
            self.used.borrow_mut().push(id.clone());
        }
        Ok((out, id))
    }

    fn probe_errno(&self, args: &[&str], probe: &str, errno: &str) -> Outcome {
        let (out, _) = self.run(true, args, &format!("sandbox-probe {probe}"))?;
        let line = ProbeLine::parse_last(&out.stdout).map_err(|e| Failed(format!("{e}: {out}")))?;
        ensure(line.errno() == Some(errno), || {
            format!("expected {errno}: {out}")
        })?;
        Ok(format!("errno {errno}"))
    }

    fn audit(&self, id: &str, event: &str) -> Result<serde_json::Value, Failed> {
        poll_until(
            &format!("the audit line {event} of {id}"),
            LEAK_GRACE,
            || self.d.dir().audit_record(id, event),
        )
        .map_err(Failed::from)
    }
}

fn attacks() -> Vec<DockerAttack> {
    let a = |name, expected, run| DockerAttack {
        name,
        expected,
        run,
    };
    vec![
        a(
            "docker: write the image's /srv",
            "EROFS (root read-only)",
            |l| l.probe_errno(&[], "write /srv/x", "EROFS"),
        ),
        a("docker: remount / read-write", "EPERM", |l| {
            l.probe_errno(&[], "remount-root-rw", "EPERM")
        }),
        a(
            "docker: mknod a block device with --cap-add ALL",
            "EPERM (no capability survives)",
            |l| l.probe_errno(&["--cap-add", "ALL"], "mknod /tmp/sda b 8 0", "EPERM"),
        ),
        a(
            "docker: capabilities with --cap-add ALL",
            "all sets empty",
            |l| {
                let (out, _) = l.run(true, &["--cap-add", "ALL"], "sandbox-probe caps")?;
                let caps = ProbeLine::parse_last(&out.stdout)
                    .map_err(|e| Failed(format!("{e}: {out}")))?;
                ensure(
                    caps.field("CapEff") == Some("0000000000000000")
                        && caps.field("CapBnd") == Some("0000000000000000"),
                    || format!("{out}"),
                )?;
                Ok("CapEff 0, CapBnd 0".into())
            },
        ),
        a(
            "docker: unshare a user namespace with seccomp=unconfined",
            "EPERM (the policy's seccomp profile stays)",
            |l| {
                l.probe_errno(
                    &["--security-opt", "seccomp=unconfined"],
                    "unshare user",
                    "EPERM",
                )
            },
        ),
        a("docker: keyctl", "EPERM", |l| {
            l.probe_errno(&[], "keyctl", "EPERM")
        }),
        a(
            "docker: connect to a live host loopback server",
            "ECONNREFUSED; the server saw nothing",
            |l| {
                let listener = LoopbackTarget::start().map_err(|e| Failed(e.to_string()))?;
                let port = listener.addr().port().to_string();
                let outcome = l.probe_errno(
                    &[],
                    &format!("connect 127.0.0.1 {port} 2000"),
                    "ECONNREFUSED",
                )?;
                ensure(listener.untouched(), || {
                    "the host listener accepted a connection".into()
                })?;
                Ok(format!("{outcome}; host listener untouched"))
            },
        ),
        a(
            "docker: fork bomb under --pids-limit 16",
            "the sandbox dies at its ceiling; audit process_limit_exceeded",
            |l| {
                let (out, id) = l.run(
                    true,
                    &["--pids-limit", "16"],
                    "b() { b | b & }; b; sleep 120",
                )?;
                ensure(!out.success(), || {
                    format!("the bomb's sandbox survived: {out}")
                })?;
                let exit = l.audit(&id, "exit")?;
                ensure(exit["process_limit_exceeded"] == true, || {
                    format!("audit exit line: {exit}")
                })?;
                Ok(format!("exit {}; audit process_limit_exceeded", out.code()))
            },
        ),
        a(
            "docker: memory bomb under --memory 64m",
            "exit 137; Docker's OOMKilled and the audit's oom both true",
            |l| {
                let (out, id) = l.run(false, &["--memory", "64m"], "sandbox-probe mem 1024")?;
                // Docker learns the OOM kill from containerd's TaskOOM event, which may be
                // handled after the exit that ended `docker run`: wait for it, bounded.
                let mut last = String::new();
                let seen = crate::poll_until(
                    "Docker's OOMKilled",
                    std::time::Duration::from_secs(10),
                    || {
                        let inspect =
                            l.d.docker()
                                .args(["inspect", "-f", "{{.State.OOMKilled}}", &id])
                                .output()
                                .ok()?;
                        last = inspect.to_string();
                        (inspect.stdout_trimmed() == "true").then_some(())
                    },
                );
                let _ = l.d.docker().args(["rm", "-f", &id]).output();
                ensure(out.code() == 137, || format!("expected exit 137: {out}"))?;
                ensure(seen.is_ok(), || format!("docker inspect: {last}"))?;
                let exit = l.audit(&id, "exit")?;
                ensure(exit["oom"] == true, || format!("audit exit line: {exit}"))?;
                Ok("exit 137; OOMKilled true; audit oom true".into())
            },
        ),
        a(
            "docker: --tmpfs /big:size=100g",
            "capped at the policy's scratch.max_tmpfs: 1 GiB seen by statfs inside; audit mounts clamped",
            |l| {
                let (out, id) = l.run(
                    true,
                    &["--tmpfs", "/big:size=100g"],
                    "sandbox-probe statfs /big",
                )?;
                let line =
                    ProbeLine::parse_last(&out.stdout).map_err(|e| Failed(format!("{e}: {out}")))?;
                let bytes = line
                    .field("bsize")
                    .and_then(|b| b.parse::<u64>().ok())
                    .zip(line.field("blocks").and_then(|b| b.parse::<u64>().ok()))
                    .map(|(b, n)| b * n);
                ensure(bytes == Some(1 << 30), || format!("statfs /big: {out}"))?;
                let create = l.audit(&id, "create")?.to_string();
                ensure(
                    create.contains("size=100g") && create.contains("max_tmpfs"),
                    || format!("audit create: {create}"),
                )?;
                Ok("statfs /big: 1073741824 bytes; audit: size=100g clamped to max_tmpfs".into())
            },
        ),
        a(
            "docker: --oom-kill-disable --memory 64m, then a memory bomb",
            "the OOM killer stays on: oom_kill_disable 0 in the host cgroup, the bomb exits 137 with the audit's oom true",
            |l| {
                let flags = ["--oom-kill-disable", "--memory", "64m"];
                let (out, id) = l.run(false, &flags, "sandbox-probe mem 1024")?;
                let exit = l.audit(&id, "exit");
                let create = l.audit(&id, "create")?.to_string();
                let _ = l.d.docker().args(["rm", "-f", &id]).output();
                ensure(out.code() == 137, || format!("expected exit 137, not a stall: {out}"))?;
                let exit = exit?;
                ensure(exit["oom"] == true, || format!("audit exit line: {exit}"))?;
                ensure(create.contains("disableOOMKiller"), || {
                    format!("audit create: {create}")
                })?;
                // And while one runs: the host cgroup runsc configured has the killer on.
                let (_, id) = l.run(false, &["-d", flags[0], flags[1], flags[2]], "sleep 60")?;
                let control = crate::inspect::cgroup_dirs(&l.d.cgroup_parent())
                    .into_iter()
                    .filter(|d| d.starts_with("/sys/fs/cgroup/memory"))
                    .map(|d| d.join(&id).join("memory.oom_control"))
                    .find(|f| f.exists());
                let text = control
                    .as_ref()
                    .map(|f| std::fs::read_to_string(f).unwrap_or_default())
                    .unwrap_or_default();
                let _ = l.d.docker().args(["rm", "-f", &id]).output();
                ensure(text.contains("oom_kill_disable 0"), || {
                    format!("memory.oom_control of {id} ({control:?}): {text}")
                })?;
                Ok("exit 137; audit oom true; host memory.oom_control oom_kill_disable 0".into())
            },
        ),
        a(
            "docker: secret in -e",
            "the audit names GITHUB_TOKEN, never its value",
            |l| {
                let (out, id) = l.run(true, &["-e", "GITHUB_TOKEN=ghp_s3cr3t-docker"], "true")?;
                ensure(out.success(), || format!("{out}"))?;
                let create = l.audit(&id, "create")?.to_string();
                ensure(
                    create.contains("GITHUB_TOKEN") && !create.contains("s3cr3t"),
                    || create.clone(),
                )?;
                let all = std::fs::read_to_string(l.d.dir().audit_log()).unwrap_or_default();
                ensure(!all.contains("s3cr3t"), || {
                    "the value reached the audit log".into()
                })?;
                Ok("named in the audit, value absent".into())
            },
        ),
        a(
            "docker: bind the daemon's own socket",
            "rejected by policy: mounts",
            |l| {
                let bind = format!(
                    "{}:/run/docker.sock",
                    l.d.dir().path().join("docker.sock").display()
                );
                let (out, id) = l.run(true, &["-v", &bind], "echo must-not-run")?;
                let _ = l.d.docker().args(["rm", "-f", &id]).output();
                ensure(
                    !out.stdout.contains("must-not-run")
                        && out.stderr.contains("rejected by policy: mounts"),
                    || format!("{out}"),
                )?;
                Ok("rejected by policy: mounts".into())
            },
        ),
        a(
            "docker: share the host's pid namespace",
            "rejected by policy: namespaces",
            |l| {
                let (out, id) = l.run(true, &["--pid", "host"], "echo must-not-run")?;
                let _ = l.d.docker().args(["rm", "-f", &id]).output();
                ensure(
                    !out.stdout.contains("must-not-run")
                        && out.stderr.contains("rejected by policy: namespaces"),
                    || format!("{out}"),
                )?;
                Ok("rejected by policy: namespaces".into())
            },
        ),
    ]
}

fn leftovers(lab: &Lab, ids: &[String]) -> Option<String> {
    let runsc_root = lab.d.dir().runsc_root();
    let state_root = lab.d.state_root();
    let mut last = Vec::new();
    let clean = poll_until("the attack's containers to go", LEAK_GRACE, || {
        last = ids
            .iter()
            .map(|id| (id, container_leaks(id, &runsc_root, &state_root)))
            .filter(|(_, l)| !l.is_empty())
            .map(|(id, l)| format!("{id}: {}", l.to_string().trim().replace('\n', ";")))
            .collect();
        last.is_empty().then_some(())
    });
    clean.is_err().then(|| last.join("; "))
}

fn scope(lab: &Lab, ids: &[String]) -> Scope {
    Scope {
        names: ids.to_vec(),
        cgroups: ids.to_vec(),
        runsc_roots: vec![lab.d.dir().runsc_root()],
    }
}

/// Runs the selected Docker attacks on one private daemon, then the category's whole-host
/// check; emits a line per result.
pub fn run_through_docker() -> Vec<AttackResult> {
    let attacks: Vec<DockerAttack> = attacks().into_iter().filter(|a| selected(a.name)).collect();
    let mut results = Vec::new();
    if attacks.is_empty() {
        return results;
    }
    let category = Category::Docker;
    let t0 = Instant::now();
    let whole_before = HostSnapshot::take(FULL_TREES, &Scope::default());
    let lab = match Dockerd::start(DockerOptions::default())
        .and_then(|d| d.import_test_image().map(|()| d))
    {
        Ok(d) => Lab {
            d,
            used: Default::default(),
        },
        Err(e) => {
            let r = AttackResult::lab_failed(
                category,
                "docker lab",
                "a private dockerd with runsc-hardened",
                e,
                t0,
            );
            r.emit();
            return vec![r];
        }
    };
    // A first container makes runsc's state root for the namespace, which stays: make it
    // before the first snapshot, so it is not counted as an attack's change to the host.
    if let Err(e) = lab.run(true, &[], "true") {
        eprintln!("gvh harness: docker warm-up run: {e}");
    }
    lab.used.borrow_mut().clear();
    for attack in &attacks {
        let t = Instant::now();
        let before = HostSnapshot::take(QUICK_TREES, &scope(&lab, &[]));
        let outcome = catch_unwind(AssertUnwindSafe(|| (attack.run)(&lab)))
            .unwrap_or_else(|p| Err(Failed(format!("panicked: {}", panic_text(p)))));
        let ids = std::mem::take(&mut *lab.used.borrow_mut());
        let leaks = leftovers(&lab, &ids);
        let diff = before.diff(&HostSnapshot::take(QUICK_TREES, &scope(&lab, &ids)));
        let (mut passed, mut observed) = match outcome {
            Ok(seen) => (true, seen),
            Err(f) => (false, format!("FAILED: {f}")),
        };
        if let Some(l) = leaks {
            passed = false;
            observed.push_str(&format!("; LEFT BEHIND: {l}"));
        }
        if diff.is_empty() {
            observed.push_str("; host unchanged");
        } else {
            passed = false;
            observed.push_str(&format!("; HOST CHANGED: {diff}"));
        }
        let r = AttackResult {
            category,
            name: attack.name.to_string(),
            expected: attack.expected.to_string(),
            observed,
            passed,
            seconds: t.elapsed().as_secs_f64(),
        };
        r.emit();
        results.push(r);
    }
    let t1 = Instant::now();
    let dir = lab.d.dir().path().to_path_buf();
    let forced = lab.d.shutdown();
    let whole_after = HostSnapshot::take(
        FULL_TREES,
        &Scope {
            names: vec![dir.to_string_lossy().into_owned()],
            ..Scope::default()
        },
    );
    let diff = whole_before.diff(&whole_after);
    let mut problems = Vec::new();
    if !forced.is_clean() {
        problems.push(format!("unclean daemon shutdown: {forced}"));
    }
    if !diff.is_empty() {
        problems.push(format!("HOST CHANGED: {diff}"));
    }
    let r = AttackResult::host_after(
        category,
        "docker-engine: host after the category".into(),
        "no watched host file changed; clean daemon shutdown, nothing left",
        &problems,
        whole_after.file_count(),
        t1,
    );
    r.emit();
    results.push(r);
    results
}
