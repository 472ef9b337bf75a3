//! A coding agent's day, measured: the driver behind `hack/agent-bench.sh`.
//!
//! ```text
//! target/release/examples/agent_bench --image ARCHIVE --wheels DIR [OPTIONS]
//!   --image PATH       OCI archive of the Debian rootfs (hack/agent-bench.sh builds and caches it)
//!   --reference REF    the image's name in the archive (localhost/gvh-agent:bookworm)
//!   --wheels DIR       the wheels the index serves (hack/bench/agent/upstream.py wheels)
//!   --rounds N         timed rounds; every variant runs once per round, order rotated (3)
//!   --warmup N         untimed rounds first (1)
//!   --only KEYS        comma-separated variant keys (all of the stack's by default)
//!   --out DIR          where agent-<stack>.json and agent-<stack>.md go (target/agent-bench)
//!   --shim PATH        the shim binary (default: $GVH_SHIM_BINARY or next to this binary)
//! ```
//!
//! One private containerd on the stack `GVH_STACK` selects; the image imported; the upstreams
//! started ([`upstream`]); then per round and variant ([`variants`]) one `ctr run --rm` of
//! `hack/bench/agent/workload.sh` with a fresh workspace directory bound at /workspace and the
//! script and the test CA bound read-only at /bench. The steps are timed inside the sandbox;
//! `ctr run`'s own wall time is kept too. Needs root. Nothing here is a test: no figure is
//! asserted, a step that fails is reported as failed.

mod report;
mod upstream;
mod variants;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gvisor_hardened_tests::stack::Stack;
use gvisor_hardened_tests::{shim_binary, unique_id, Containerd, ContainerdOptions, Run};

use report::{Sample, Samples};
use upstream::{make_tls, BenchResult, ClientNet, Upstream, NAMES};
use variants::{Kind, Variant};

struct Args {
    image: PathBuf,
    reference: String,
    wheels: PathBuf,
    rounds: usize,
    warmup: usize,
    only: Option<Vec<String>>,
    out: PathBuf,
    shim: Option<PathBuf>,
}

fn parse_args() -> BenchResult<Args> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut a = Args {
        image: PathBuf::new(),
        reference: "localhost/gvh-agent:bookworm".into(),
        wheels: PathBuf::new(),
        rounds: 3,
        warmup: 1,
        only: None,
        out: workspace.join("target").join("agent-bench"),
        shim: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--image" => a.image = val()?.into(),
            "--reference" => a.reference = val()?,
            "--wheels" => a.wheels = val()?.into(),
            "--rounds" => a.rounds = val()?.parse()?,
            "--warmup" => a.warmup = val()?.parse()?,
            "--only" => a.only = Some(val()?.split(',').map(str::to_string).collect()),
            "--out" => a.out = val()?.into(),
            "--shim" => a.shim = Some(val()?.into()),
            other => {
                return Err(format!(
                    "unknown option {other} (see the top of tests/examples/agent_bench/main.rs)"
                )
                .into())
            }
        }
    }
    if a.image.as_os_str().is_empty() || a.wheels.as_os_str().is_empty() || a.rounds == 0 {
        return Err("--image and --wheels are required, --rounds must be positive".into());
    }
    Ok(a)
}

fn loadavg() -> [f64; 3] {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut it = text.split_whitespace().map(|x| x.parse().unwrap_or(0.0));
    [
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
        it.next().unwrap_or(0.0),
    ]
}

/// The bench's files next to the containerd's: `/bench` (script, CA), the site, the policies.
struct Setup {
    dir: PathBuf,
    bench: PathBuf,
    hosts: PathBuf,
    workspaces: PathBuf,
}

/// Returns the setup, the upstream script, the site directory and the server's certificate and
/// key.
fn prepare(c: &Containerd, args: &Args) -> BenchResult<(Setup, PathBuf, PathBuf, [PathBuf; 2])> {
    let hack = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/bench/agent");
    let dir = c.dir().join("agent");
    let bench = dir.join("bench");
    let workspaces = dir.join("ws");
    fs::create_dir_all(&bench)?;
    fs::create_dir_all(&workspaces)?;
    let (ca, cert, key) = make_tls(&dir.join("tls"))?;
    fs::copy(&ca, bench.join("ca.pem"))?;
    fs::copy(hack.join("workload.sh"), bench.join("workload.sh"))?;
    fs::set_permissions(bench.join("workload.sh"), fs::Permissions::from_mode(0o755))?;
    let site = dir.join("site");
    let out = Command::new("python3")
        .arg(hack.join("upstream.py"))
        .arg("site")
        .arg(&args.wheels)
        .arg(&site)
        .output()?;
    if !out.status.success() {
        return Err(format!("upstream.py site: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    // Everything under the bench's directory is readable by the sandboxes' users.
    Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&bench)
        .status()?;
    let setup = Setup {
        hosts: dir.join("hosts"),
        dir,
        bench,
        workspaces,
    };
    Ok((setup, hack.join("upstream.py"), site, [cert, key]))
}

/// One container of `var`: returns the sample (steps, wall time) or the reason it failed.
fn run_one(
    c: &Containerd,
    image: &str,
    setup: &Setup,
    var: &Variant,
    policy: Option<&Path>,
    wrapper: Option<&Path>,
    up: &Upstream,
) -> BenchResult<Sample> {
    let ws = setup.workspaces.join(unique_id(var.key));
    fs::create_dir_all(&ws)?;
    chown(&ws, Some(1000), Some(1000))?;
    fs::set_permissions(&ws, fs::Permissions::from_mode(0o777))?;
    let net = match var.kind {
        Kind::Hardened { .. } => None,
        _ => Some(ClientNet::create(up)?),
    };
    let (runtime, mut flags) = variants::runtime_and_flags(
        c,
        var,
        policy,
        wrapper,
        net.as_ref().map(|n| n.path()).as_deref(),
        &setup.hosts,
    );
    flags.push("--mount".into());
    flags.push(format!(
        "type=bind,src={},dst=/workspace,options=rbind:rw",
        ws.display()
    ));
    flags.push("--mount".into());
    flags.push(format!(
        "type=bind,src={},dst=/bench,options=rbind:ro",
        setup.bench.display()
    ));
    let id = unique_id("agent");
    let run = Run::new(image, &id)
        .runtime(runtime)
        .flags(flags)
        .cmd(["/bin/bash", "/bench/workload.sh"]);
    let load = loadavg();
    let t0 = Instant::now();
    let out = c
        .ctr()
        .args(run.ctr_args_for(c))
        .timeout(Duration::from_secs(1800))
        .output()?;
    let wall = t0.elapsed().as_secs_f64();
    drop(net);
    let sample = Sample::parse(&out.stdout, wall, out.code(), &out.stderr, load);
    let _ = fs::remove_dir_all(&ws);
    Ok(sample)
}

fn main() -> BenchResult<()> {
    let args = parse_args()?;
    let stack = Stack::selected();
    let shim = match &args.shim {
        Some(p) => p.clone(),
        None => shim_binary()?,
    };
    let mut vars = variants::for_stack(stack);
    if let Some(only) = &args.only {
        vars.retain(|v| only.iter().any(|o| o == v.key));
    }
    // containerd at "info", as on a node (at "debug" it starts every shim with -debug too).
    let c = Containerd::start(ContainerdOptions {
        log_level: "info".into(),
        ..ContainerdOptions::with_shim(&shim)
    })?;
    eprintln!(
        "agent-bench: {} stack, importing {}",
        stack.name(),
        args.image.display()
    );
    c.ctr()
        .args(["images", "import"])
        .arg(&args.image)
        .timeout(Duration::from_secs(900))
        .checked()?;
    let (setup, script, site, [cert, key]) = prepare(&c, &args)?;
    let up = Upstream::start(&script, &site, &cert, &key)?;
    let hosts: String = NAMES
        .iter()
        .map(|n| format!("{} {n}\n", up.client_side_addr()))
        .collect();
    fs::write(
        &setup.hosts,
        format!("127.0.0.1 localhost\n::1 localhost\n{hosts}"),
    )?;
    fs::set_permissions(&setup.hosts, fs::Permissions::from_mode(0o644))?;

    let mut policies = BTreeMap::new();
    let mut wrappers = BTreeMap::new();
    for v in &vars {
        match v.kind {
            Kind::Hardened {
                platform,
                extra_flags,
            } => {
                let p = variants::hardened_policy(
                    &setup.dir,
                    v.key,
                    platform,
                    extra_flags,
                    &setup.workspaces,
                    &up,
                )?;
                policies.insert(v.key, p);
            }
            Kind::PlainRunsc { platform, network } => {
                let w = variants::plain_runsc_wrapper(&setup.dir, v.key, platform, network)?;
                wrappers.insert(v.key, w);
            }
            Kind::Runc => {}
        }
    }

    let load_start = loadavg();
    let started = std::time::SystemTime::now();
    let mut samples = Samples::new(&vars);
    let total = args.warmup + args.rounds;
    for round in 0..total {
        let warm = round < args.warmup;
        for k in 0..vars.len() {
            let i = (round + k) % vars.len();
            let v = &vars[i];
            eprintln!(
                "agent-bench: round {}/{total}{} {}",
                round + 1,
                if warm { " (warm-up)" } else { "" },
                v.key
            );
            let s = run_one(
                &c,
                &args.reference,
                &setup,
                v,
                policies.get(v.key).map(PathBuf::as_path),
                wrappers.get(v.key).map(PathBuf::as_path),
                &up,
            )?;
            if !s.failures.is_empty() || s.exit != 0 {
                eprintln!(
                    "  {}: exit {}, failed steps {:?}\n{}",
                    v.key,
                    s.exit,
                    s.failures,
                    s.detail.trim()
                );
            }
            samples.push(i, s, warm);
        }
    }
    let load_end = loadavg();
    drop(up);
    let teardown = c.shutdown();
    let report = report::Report {
        stack,
        variants: &vars,
        samples: &samples,
        rounds: args.rounds,
        warmup: args.warmup,
        load_start,
        load_end,
        started,
        runsc: report::version(&gvisor_hardened_tests::stack::bin("runsc")?),
        containerd: report::version(&gvisor_hardened_tests::stack::bin("containerd")?),
        shutdown_clean: teardown.is_clean(),
    };
    let md = report.markdown();
    println!("\n{md}");
    fs::create_dir_all(&args.out)?;
    let base = args.out.join(format!("agent-{}", stack.name()));
    fs::write(base.with_extension("md"), &md)?;
    fs::write(
        base.with_extension("json"),
        serde_json::to_string_pretty(&report.to_json())? + "\n",
    )?;
    eprintln!("agent-bench: wrote {}.{{md,json}}", base.display());
    Ok(())
}
