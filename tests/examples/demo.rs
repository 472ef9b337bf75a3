//! The demo behind `hack/demo.sh`: one hardened sandbox on the embedded default policy, what it
//! can and cannot do from the inside, and the audit record of what was enforced; then the audit
//! chain: a log verified intact by `policy-injector audit verify`, and tampered copies of it
//! (a record edited, a record deleted, the file cut mid-line) failing verification.
//!
//! Uses a private containerd (its own directory, sockets and namespace) and stops it at the end;
//! the system containerd, if any, is never touched. The network checks aim at live servers the
//! demo starts itself (the host's loopback, and a network namespace of its own over a veth),
//! reached from the host first: nothing is sent anywhere else.

use gvisor_hardened_tests::audit_tools::policy_injector_audit;
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::netns::{LoopbackTarget, TestNetns};
use gvisor_hardened_tests::*;

const AUDIT_LOG: &str = "/var/log/gvisor-hardened/audit.jsonl";

/// Each line: what is shown, then the shell that shows it (run inside the sandbox). `@LO@` and
/// `@NET@` become the demo's own live targets (`IP PORT`).
const CHECKS: &[(&str, &str)] = &[
    ("kernel", "head -c 60 /proc/version"),
    ("user", "id"),
    ("capabilities", "sandbox-probe caps"),
    ("no_new_privs", "sandbox-probe nnp"),
    ("write /srv (on the root fs)", "sandbox-probe write /srv/x"),
    ("write /etc/passwd", "sandbox-probe write /etc/passwd"),
    ("write /tmp (tmpfs scratch)", "sandbox-probe write /tmp/x"),
    ("/tmp size", "df -h /tmp | tail -1"),
    (
        "fill /tmp with 2 GiB",
        "sandbox-probe fill /tmp/big 2147483648",
    ),
    ("network interfaces", "echo $(ls /sys/class/net)"),
    (
        "connect host loopback server",
        "sandbox-probe connect @LO@ 1000",
    ),
    (
        "connect test-netns server",
        "sandbox-probe connect @NET@ 1000",
    ),
    ("raw socket", "sandbox-probe socket-raw"),
    ("become root: setuid(0)", "sandbox-probe setuid 0"),
    ("user namespace", "sandbox-probe unshare user"),
    ("keyctl (seccomp)", "sandbox-probe keyctl"),
    ("mount tmpfs", "sandbox-probe mount-tmpfs /mnt"),
    ("service-account token", "ls /var/run/secrets 2>&1"),
    ("open files limit", "ulimit -n"),
];

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary()?))?;
    println!(
        "private containerd: {} (namespace {})",
        c.dir().display(),
        c.namespace()
    );
    let image = TestImage::ensure()?;
    c.import(&image)?;
    let lo = LoopbackTarget::start()?;
    let net = TestNetns::create()?;
    let ip_port = |a: std::net::SocketAddr| format!("{} {}", a.ip(), a.port());
    println!(
        "network targets, live and reached from the host first: {} (host loopback), {} (netns {})",
        lo.addr(),
        net.ns_tcp(),
        net.name()
    );
    let id = unique_id("demo");
    let script: String = CHECKS
        .iter()
        .map(|(what, cmd)| {
            let cmd = cmd
                .replace("@LO@", &ip_port(lo.addr()))
                .replace("@NET@", &ip_port(net.ns_tcp()));
            format!("printf '  %-30s ' '{what}:'; {{ {cmd}; }} 2>&1 | head -1\n")
        })
        .collect();
    println!(
        "\n$ ctr run --runtime io.containerd.gvisor-hardened.v1 {} {id} sh -c '...'\n",
        image.reference()
    );
    let out = c.run_output(&Run::new(image.reference(), &id).sh(script))?;
    print!("{}", out.stdout);
    if !out.stderr.trim().is_empty() {
        println!("  (stderr) {}", out.stderr.trim());
    }
    println!("  exit status: {}", out.code());
    println!(
        "  the targets saw a connection from the sandbox: loopback {}, netns {}",
        if lo.untouched() { "no" } else { "YES" },
        if net.ns_tcp_untouched() { "no" } else { "YES" }
    );

    println!("\naudit log {AUDIT_LOG}, lines for {id}:");
    let text = std::fs::read_to_string(AUDIT_LOG).unwrap_or_default();
    for line in text.lines().filter(|l| l.contains(&format!("\"{id}\""))) {
        let v: serde_json::Value = serde_json::from_str(line)?;
        println!(
            "  {} {:<7} policy={} ({}) exit={}",
            v["time"].as_str().unwrap_or(""),
            v["event"].as_str().unwrap_or(""),
            v["policy"]["path"].as_str().unwrap_or(""),
            v["policy"]["mode"].as_str().unwrap_or(""),
            v.get("exit_status")
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
        );
        if let Some(decisions) = v["decisions"].as_array() {
            println!(
                "    {} decisions, {} config sha256 {}",
                decisions.len(),
                v["event"],
                v["config_sha256"]
            );
            for d in decisions {
                println!(
                    "    - {:<13} {:<8} {:<44} {}",
                    d["rule"].as_str().unwrap_or(""),
                    d["action"].as_str().unwrap_or(""),
                    d["field"].as_str().unwrap_or(""),
                    d["reason"].as_str().unwrap_or(""),
                );
            }
        }
    }
    refused(&c, &image)?;
    chain(&c, &image)?;
    let report = c.shutdown();
    println!("\nprivate containerd stopped: {report}");
    Ok(())
}

/// What the policy refuses outright: the container never starts, and ctr shows why (the rule,
/// the field, the reason) with containerd's "failed precondition".
fn refused(
    c: &Containerd,
    image: &TestImage,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    println!("\n== refused before anything runs ==");
    for (flags, what) in [
        (
            vec![
                "--mount",
                "type=bind,src=/var/run,dst=/host-run,options=rbind:ro",
            ],
            "the host's /var/run (container engine sockets) bind-mounted",
        ),
        (vec!["--privileged"], "a privileged container"),
    ] {
        let id = unique_id("refused");
        println!(
            "\n$ ctr run --runtime io.containerd.gvisor-hardened.v1 {} {} {id} true    # {what}",
            flags.join(" "),
            image.reference()
        );
        let out = c.run_output(&Run::new(image.reference(), &id).flags(flags).cmd(["true"]))?;
        println!("  {}", out.stderr.trim());
        println!("  exit status: {}", out.code());
        let _ = c.ctr().args(["container", "delete", &id]).output();
    }
    Ok(())
}

/// Runs `policy-injector audit verify FILE` and shows the command, its verdict and exit code.
fn show_verify(file: &std::path::Path) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let out = policy_injector_audit(&["verify", &file.display().to_string()])?;
    println!("\n$ policy-injector audit verify {}", file.display());
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        println!("  {line}");
    }
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        println!("  (stderr) {line}");
    }
    println!("  exit code {}", out.status.code().unwrap_or(-1));
    Ok(())
}

/// The audit chain: three sandboxes on a policy with its own log, the log verified, then three
/// tampered copies.
fn chain(c: &Containerd, image: &TestImage) -> std::result::Result<(), Box<dyn std::error::Error>> {
    println!("\n== the audit chain ==");
    let policy = TestPolicy::builder(c, "demo-chain").write()?;
    for n in 1..=3 {
        let id = unique_id(&format!("chain{n}"));
        c.run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh(format!("exit {n}")),
        )?;
    }
    let log = &policy.audit_path;
    let text = std::fs::read_to_string(log)?;
    println!(
        "\n{} ({} lines); the chain fields of each line:",
        log.display(),
        text.lines().count()
    );
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        println!(
            "  seq {:>2}  prev {}...  {:<8} {}",
            v["seq"].as_u64().unwrap_or_default(),
            &v["prev"].as_str().unwrap_or("")[..16],
            v["event"].as_str().unwrap_or(""),
            v["container_id"]
                .as_str()
                .or(v["node"].as_str())
                .unwrap_or(""),
        );
    }
    show_verify(log)?;

    let lines: Vec<&str> = text.lines().collect();
    let exit_line = lines
        .iter()
        .position(|l| l.contains("\"event\":\"exit\""))
        .unwrap_or(1);
    let copy =
        |name: &str, body: String| -> std::result::Result<std::path::PathBuf, std::io::Error> {
            let path = c.dir().join(name);
            std::fs::write(&path, body)?;
            Ok(path)
        };
    let edited: String = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let l = if i == exit_line {
                l.replacen("\"exit_status\":1", "\"exit_status\":0", 1)
            } else {
                l.to_string()
            };
            format!("{l}\n")
        })
        .collect();
    println!(
        "\ntampered copy 1: line {} edited (exit_status 1 -> 0)",
        exit_line + 1
    );
    show_verify(&copy("edited.jsonl", edited)?)?;
    let deleted: String = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    println!("\ntampered copy 2: line 4 deleted");
    show_verify(&copy("deleted.jsonl", deleted)?)?;
    println!("\ntampered copy 3: the file cut 20 bytes before its end");
    show_verify(&copy("cut.jsonl", text[..text.len() - 20].to_string())?)?;
    Ok(())
}
