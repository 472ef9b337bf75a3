//! Every runsc flag that weakens the sandbox (`policy_injector::policy::runsc_flags`, the
//! `Weakens` rows, and `--network=host`), tried through every way a caller can reach runsc's
//! command line, against the current runsc (`hack/deps.sh --print`, named in the policy's
//! `[runsc] path`). One row per flag; each row checks all paths:
//!
//! 1. the spec: `ctr run --annotation dev.gvisor.flag.FLAG=VALUE` (current runsc honours some of
//!    these even without `--allow-flag-override`, host-uds among them: the control in the
//!    host-uds row shows it). The container runs, the audit record says the annotation was
//!    removed, runsc's arguments carry no such flag (or only its closed value), and where the
//!    flag has a visible effect the workload checks it did not happen;
//! 2. the runtime options: a policy file naming the flag in `[runsc] extra_flags`, sent as
//!    `ctr run --runtime-config-path`: Create fails naming `runsc.extra_flags.FLAG`;
//! 3. the same options file written for gVisor's own shim (`[runsc_config] FLAG = VALUE`):
//!    Create fails naming `runsc_config`;
//! 4. runsc-hardened's command line, where Docker's `runtimeArgs` and Podman's `--runtime-flag`
//!    put it (`runsc-hardened --FLAG=VALUE create ...`): refused with an error naming the flag,
//!    before anything exists;
//! 5. the spec through runsc-hardened: a bundle carrying the annotation, created by
//!    runsc-hardened: the annotation is removed, runsc's arguments are clean, and `delete
//!    --force` leaves nothing.

use std::fs;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::lab::{Job, Lab, Ran};
use super::{ensure, Attack, Category, Failed, Outcome};
use crate::ids::unique_id;
use crate::probe::{ProbeLine, PROBE_IN_IMAGE, PROBE_SUID_IN_IMAGE};
use crate::process::output_with_deadline;
use crate::stack::Stack;

mod oci;

/// What the workload checks inside the sandbox, for flags with a visible effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inside {
    /// Nothing to see from inside: the arguments and the audit record are the evidence.
    Nothing,
    /// A raw socket is refused (EPERM).
    RawSocket,
    /// Only the loopback interface exists.
    LoopbackOnly,
    /// A host Unix socket bound into the sandbox cannot be connected to, and its listener sees
    /// nothing; the control run through plain runsc shows that the annotation alone opens it.
    HostSocket,
    /// A setuid-root binary runs with the caller's ids.
    Setuid,
}

/// One row: the flag and the value an attacker would want.
pub struct FlagCase {
    pub flag: &'static str,
    pub value: &'static str,
    inside: Inside,
    /// The argument runsc gets instead, for flags the runtime pins to their closed value.
    pinned: Option<&'static str>,
}

const fn case(flag: &'static str, value: &'static str) -> FlagCase {
    FlagCase {
        flag,
        value,
        inside: Inside::Nothing,
        pinned: None,
    }
}

const fn seen(flag: &'static str, value: &'static str, inside: Inside) -> FlagCase {
    FlagCase {
        flag,
        value,
        inside,
        pinned: None,
    }
}

const fn pinned(
    flag: &'static str,
    value: &'static str,
    inside: Inside,
    arg: &'static str,
) -> FlagCase {
    FlagCase {
        flag,
        value,
        inside,
        pinned: Some(arg),
    }
}

/// Every weakening flag of the decision table (a test keeps the two in step) and
/// `--network=host`, in table order.
pub const CASES: &[FlagCase] = &[
    case("EXPERIMENTAL-afxdp", "true"),
    case("EXPERIMENTAL-xdp", "redirect:eth0"),
    case("EXPERIMENTAL-xdp-need-wakeup", "true"),
    case("TESTONLY-afs-syscall-panic", "true"),
    case("TESTONLY-allow-packet-endpoint-write", "true"),
    case("TESTONLY-autosave-image-path", "/tmp/gvh-autosave"),
    case("TESTONLY-autosave-resume", "true"),
    case("TESTONLY-nftables", "true"),
    case("TESTONLY-test-name-env", "GVH"),
    case("TESTONLY-unsafe-nonroot", "true"),
    // With the override switch on, any dev.gvisor.flag.* would apply: this row sends net-raw
    // along with it and checks raw sockets stay refused.
    seen("allow-flag-override", "true", Inside::RawSocket),
    case("allow-packet-socket-write", "true"),
    case("allow-rootfs-tar-annotation", "true"),
    seen("allow-suid", "true", Inside::Setuid),
    pinned(
        "character-device-policy",
        "passthrough",
        Inside::Nothing,
        "--character-device-policy=emulated-only",
    ),
    pinned(
        "fsgofer-host-uds",
        "true",
        Inside::HostSocket,
        "--host-uds=none",
    ),
    case("gofer-network-namespace", "host"),
    pinned("host-fifo", "open", Inside::Nothing, "--host-fifo=none"),
    case("host-settings", "enforce"),
    pinned("host-uds", "all", Inside::HostSocket, "--host-uds=none"),
    case("ignore-cgroups", "true"),
    case("iouring", "true"),
    case("metric-server", ":9999"),
    pinned("net-raw", "true", Inside::RawSocket, "--net-raw=false"),
    pinned("network", "host", Inside::LoopbackOnly, "--network=none"),
    case("nvproxy", "true"),
    case("nvproxy-allow-unsupported-driver", "true"),
    case("nvproxy-allowed-driver-capabilities", "all"),
    case("nvproxy-docker", "true"),
    case("nvproxy-driver-version", "latest"),
    case("platform_device_path", "/dev/kvm"),
    case("pod-init-config", "/etc/shadow"),
    case("profile", "true"),
    case("rdmaproxy", "true"),
    case("reproduce-nat", "true"),
    case("reproduce-nftables", "true"),
    case("rootless", "true"),
    case("tpuproxy", "true"),
];

const EXPECTED: &str = "annotation stripped (audit) and absent from runsc's arguments; refused in [runsc] extra_flags, in a [runsc_config] options file and on runsc-hardened's command line; stripped through runsc-hardened too";

/// The row's name: what runsc would have been given.
fn name(c: &FlagCase) -> &'static str {
    let extra = if c.flag == "allow-flag-override" {
        " (+ dev.gvisor.flag.net-raw=true)"
    } else {
        ""
    };
    // Attack names are static; these few strings live as long as the process anyway.
    Box::leak(format!("runsc --{}={}{extra}", c.flag, c.value).into_boxed_str())
}

/// One row per case: `check` of `CASES[i]`, as the plain function an [`Attack`] holds.
macro_rules! rows {
    ($($i:literal),* $(,)?) => {
        /// The rows, in `CASES` order.
        pub fn attacks() -> Vec<Attack> {
            vec![$(Attack {
                name: name(&CASES[$i]),
                category: Category::RunscFlags,
                expected: EXPECTED,
                run: |lab| check(lab, &CASES[$i]),
            }),*]
        }
    };
}

rows!(
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
    26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37,
);

fn fail(e: impl std::fmt::Display) -> Failed {
    Failed(e.to_string())
}

/// `[runsc] path = <the current runsc>`, the section every policy here starts from.
fn current_runsc_section() -> Result<String, Failed> {
    let runsc = Stack::Current.binary("runsc")?;
    Ok(format!(
        "[runsc]\npath = {:?}\n",
        runsc.display().to_string()
    ))
}

fn check(lab: &Lab, c: &FlagCase) -> Outcome {
    let mut seen = vec![through_ctr_annotation(lab, c)?];
    seen.push(through_extra_flags(lab, c)?);
    seen.push(through_gvisor_options(lab, c)?);
    seen.push(oci::through_engine_args(lab, c)?);
    seen.push(oci::through_runsc_hardened_annotation(lab, c)?);
    Ok(seen.join("; "))
}

/// The annotations a row sends: the flag, plus net-raw with the override switch.
fn annotations(c: &FlagCase) -> Vec<(String, String)> {
    let mut a = vec![(format!("dev.gvisor.flag.{}", c.flag), c.value.to_string())];
    if c.flag == "allow-flag-override" {
        a.push(("dev.gvisor.flag.net-raw".into(), "true".into()));
    }
    a
}

/// runsc's arguments carry the flag only as its pinned closed value, if at all.
fn args_clean(args: &[String], c: &FlagCase) -> Result<(), Failed> {
    let spelled =
        |a: &String| a == &format!("--{}", c.flag) || a.starts_with(&format!("--{}=", c.flag));
    let bad: Vec<&String> = args
        .iter()
        .filter(|a| spelled(a) || a.contains("allow-flag-override"))
        .filter(|a| Some(a.as_str()) != c.pinned)
        .collect();
    ensure(bad.is_empty(), || {
        format!("runsc got {bad:?} (all: {args:?})")
    })?;
    if let Some(pin) = c.pinned {
        ensure(args.iter().any(|a| a == pin), || {
            format!("runsc's arguments lack {pin}: {args:?}")
        })?;
    }
    Ok(())
}

/// The `create` audit record removed every annotation, and its runsc arguments are clean.
fn record_clean(create: &Value, c: &FlagCase) -> Result<(), Failed> {
    let decisions = create["decisions"].as_array().cloned().unwrap_or_default();
    for (key, _) in annotations(c) {
        let removed = decisions.iter().any(|d| {
            d["action"] == "removed" && d["field"].as_str() == Some(&format!("annotations.{key}"))
        });
        ensure(removed, || format!("no removal of {key} in {create}"))?;
    }
    let args: Vec<String> = create["runsc_args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    ensure(!args.is_empty(), || format!("no runsc_args in {create}"))?;
    args_clean(&args, c)
}

/// A host Unix socket in a directory the sandbox gets read-only, and its listener.
struct HostSocket {
    dir: PathBuf,
    listener: UnixListener,
}

impl HostSocket {
    fn new(under: &Path) -> Result<HostSocket, Failed> {
        let dir = under.join(format!("hostsock-{}", crate::ids::random_hex(4)));
        fs::create_dir_all(&dir).map_err(fail)?;
        let path = dir.join("live.sock");
        let listener = UnixListener::bind(&path).map_err(fail)?;
        listener.set_nonblocking(true).map_err(fail)?;
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .map_err(fail)?;
        Ok(HostSocket { dir, listener })
    }

    fn mount(&self) -> String {
        format!(
            "type=bind,src={},dst=/hostsock,options=rbind:ro",
            self.dir.display()
        )
    }

    fn connected(&self) -> bool {
        self.listener.accept().is_ok()
    }
}

impl Drop for HostSocket {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn probe_commands(inside: Inside) -> Vec<&'static str> {
    match inside {
        Inside::Nothing => vec!["ids"],
        Inside::RawSocket => vec!["socket-raw"],
        Inside::LoopbackOnly => vec!["ifaces"],
        Inside::HostSocket => vec!["connect-unix /hostsock/live.sock"],
        Inside::Setuid => vec![],
    }
}

fn through_ctr_annotation(lab: &Lab, c: &FlagCase) -> Outcome {
    let policy = lab.write_policy("runsc-current", &current_runsc_section()?)?;
    let socket = match c.inside {
        Inside::HostSocket => Some(HostSocket::new(lab.dir())?),
        _ => None,
    };
    let mut job = match c.inside {
        Inside::Setuid => Job::cmd("rf-ann", [PROBE_SUID_IN_IMAGE, "ids"]),
        other => Job::probes("rf-ann", &probe_commands(other)),
    }
    .policy(policy);
    for (k, v) in annotations(c) {
        job = job.flags(["--annotation".to_string(), format!("{k}={v}")]);
    }
    if let Some(s) = &socket {
        job = job.flags(["--mount".to_string(), s.mount()]);
    }
    let ran = lab.run(job)?;
    ensure(ran.started && ran.code() == 0, || {
        format!("the annotated container did not run: {}", ran.summary())
    })?;
    record_clean(&lab.audit_event(&ran.id, "create")?, c)?;
    let mut inside = inside_held(&ran, c, socket.as_ref())?;
    if let Some(s) = socket.as_ref().filter(|_| c.flag == "host-uds") {
        control_plain_runsc_opens_the_socket(lab, c, s)?;
        inside.push_str(" (control: plain runsc given the same annotation, without --allow-flag-override, connected)");
    }
    Ok(format!("ctr annotation stripped{inside}"))
}

/// What the workload saw, checked against the flag's effect; a short note for the row.
fn inside_held(ran: &Ran, c: &FlagCase, socket: Option<&HostSocket>) -> Result<String, Failed> {
    let line = || {
        ProbeLine::parse_last(&ran.out.stdout).map_err(|e| fail(format!("{e}: {}", ran.summary())))
    };
    Ok(match c.inside {
        Inside::Nothing => String::new(),
        Inside::RawSocket => {
            let l = line()?;
            ensure(l.errno() == Some("EPERM"), || {
                format!("raw socket: {}", ran.summary())
            })?;
            ", raw socket EPERM".into()
        }
        Inside::LoopbackOnly => {
            let l = line()?;
            ensure(l.field("ifaces") == Some("lo"), || {
                format!("interfaces: {}", ran.summary())
            })?;
            ", only lo".into()
        }
        Inside::Setuid => {
            let l = line()?;
            ensure(l.field("euid") == Some("65534"), || {
                format!("setuid: {}", ran.summary())
            })?;
            ", setuid-root binary runs as euid 65534".into()
        }
        Inside::HostSocket => {
            let l = line()?;
            let socket = socket.expect("a host socket for this case");
            ensure(!l.is_ok() && !socket.connected(), || {
                format!("the host socket was reached: {}", ran.summary())
            })?;
            format!(", host socket {}", l.errno().unwrap_or("refused"))
        }
    })
}

/// The control: the same annotation given to plain current runsc (no runtime, no
/// `--allow-flag-override`) does open the host socket, so stripping it is what holds.
fn control_plain_runsc_opens_the_socket(
    lab: &Lab,
    c: &FlagCase,
    s: &HostSocket,
) -> Result<(), Failed> {
    if c.flag != "host-uds" {
        return Ok(());
    }
    let runsc = Stack::Current.binary("runsc")?;
    let id = unique_id("rf-control");
    let dir = lab.dir().join(&id);
    let rootfs = dir.join("rootfs");
    crate::direct::make_busybox_rootfs(&rootfs)?;
    fs::create_dir_all(rootfs.join("hostsock")).map_err(fail)?;
    fs::copy(crate::probe::probe_path(), rootfs.join("bin/sandbox-probe")).map_err(fail)?;
    let spec = json!({
        "ociVersion": "1.0.2",
        "process": {"args": [PROBE_IN_IMAGE, "connect-unix", "/hostsock/live.sock"], "cwd": "/",
                    "env": ["PATH=/bin"], "user": {"uid": 65534, "gid": 65534}},
        "root": {"path": "rootfs", "readonly": true},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/hostsock", "type": "bind", "source": s.dir, "options": ["rbind", "ro"]}],
        "annotations": {"dev.gvisor.flag.host-uds": c.value},
        "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}],
                  "cgroupsPath": format!("/{id}")},
    });
    fs::write(dir.join("config.json"), spec.to_string()).map_err(fail)?;
    let state = dir.join("state");
    let mut cmd = Command::new(&runsc);
    cmd.arg(format!("--root={}", state.display()))
        .args(["--network=none", "run", "--bundle"])
        .arg(&dir)
        .arg(&id)
        .stdin(Stdio::null());
    let out = output_with_deadline(&mut cmd, None, std::time::Duration::from_secs(60))?;
    let connected = s.connected();
    let _ = Command::new(&runsc)
        .arg(format!("--root={}", state.display()))
        .args(["delete", "--force", &id])
        .output();
    let _ = fs::remove_dir_all(&dir);
    ensure(connected, || {
        format!("control: plain runsc with the annotation did not reach the socket either: {out}")
    })
}

/// Create through ctr with `options` as the runtime options' ConfigPath; it must fail with every
/// needle in ctr's message.
fn refused_create(lab: &Lab, options: &Path, needles: &[String]) -> Result<(), Failed> {
    let ran = lab.run(Job::probe("rf-opt", &["ids"]).policy(options).ungated())?;
    ensure(!ran.started && ran.code() != 0, || {
        format!("not refused: {}", ran.summary())
    })?;
    for n in needles {
        ensure(ran.out.stderr.contains(n.as_str()), || {
            format!("the refusal does not name {n:?}: {}", ran.summary())
        })?;
    }
    Ok(())
}

fn through_extra_flags(lab: &Lab, c: &FlagCase) -> Outcome {
    let extra = format!(
        "{}\n[runsc.extra_flags]\n{:?} = {:?}\n",
        current_runsc_section()?,
        c.flag,
        c.value
    );
    let policy = lab.write_policy("runsc-extra-flag", &extra)?;
    refused_create(
        lab,
        &policy,
        &[
            format!("runsc.extra_flags.{}", c.flag),
            "is not allowed".into(),
        ],
    )?;
    Ok("extra_flags refused".into())
}

fn through_gvisor_options(lab: &Lab, c: &FlagCase) -> Outcome {
    let path = lab.dir().join("gvisor-shim-options.toml");
    let text = format!("[runsc_config]\n{:?} = {:?}\n", c.flag, c.value);
    fs::write(&path, text).map_err(fail)?;
    refused_create(lab, &path, &["runsc_config".into()])?;
    Ok("[runsc_config] refused".into())
}
