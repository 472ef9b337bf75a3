//! Pieces for the egress tests that run runsc directly (no containerd): a network namespace
//! the test owns with upstream HTTP servers in it, a busybox bundle, and a runsc sandbox that
//! is deleted on drop. Traffic only goes to 127.0.0.0/8 and to this namespace's veth pair.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::poll::poll_until;

/// The static forwarder the shim's `build.rs` built (and the runtime embeds).
pub fn forwarder_binary() -> &'static Path {
    Path::new(gvisor_hardened_core::egress::install::EMBEDDED_BUILD_PATH)
}

fn run(program: &str, args: &[&str]) -> Result<Output> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| HarnessError::Spawn {
            program: program.into(),
            source,
        })?;
    if !out.status.success() {
        return Err(HarnessError::Shim {
            what: format!("{program} {}", args.join(" ")),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// The range the upstream namespaces' veth pairs take their /30s from.
pub const UPSTREAM_RANGE: (std::net::Ipv4Addr, u8) = (std::net::Ipv4Addr::new(10, 214, 0, 0), 16);

/// A network namespace with a veth pair to the host (`10.214.N.1` host side, `10.214.N.2`
/// inside, a /30 of its own) and HTTP servers (busybox httpd) inside it.
pub struct UpstreamNetns {
    pub name: String,
    pub n: u8,
    servers: Vec<Child>,
    dir: PathBuf,
}

impl UpstreamNetns {
    pub fn create() -> Result<UpstreamNetns> {
        let hex = random_hex(4);
        let name = format!("gvh-eg-{hex}");
        let dir = std::env::temp_dir().join(&name);
        fs::create_dir_all(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
        run("ip", &["netns", "add", &name])?;
        let mut ns = UpstreamNetns {
            name: name.clone(),
            n: 0,
            servers: Vec::new(),
            dir,
        };
        let (a, b) = (format!("gvhe{hex}a"), format!("gvhe{hex}b"));
        run(
            "ip",
            &[
                "link", "add", &a, "type", "veth", "peer", "name", &b, "netns", &name,
            ],
        )?;
        // Each namespace owns 10.214.N.0/24 (the agent bench puts a second /30 in it), with N
        // in 2..252 and taken by no host interface: two namespaces of one test, or of tests
        // running at once, never share an address.
        let block = crate::netns::claim_free_block(UPSTREAM_RANGE, 8, 2..252, |net| {
            let host = std::net::Ipv4Addr::from(u32::from(net) + 1);
            run("ip", &["addr", "add", &format!("{host}/30"), "dev", &a]).map(drop)
        })?;
        ns.n = block.octets()[2];
        run("ip", &["link", "set", &a, "up"])?;
        run(
            "ip",
            &[
                "-n",
                &name,
                "addr",
                "add",
                &format!("{}/30", ns.inside_addr()),
                "dev",
                &b,
            ],
        )?;
        run("ip", &["-n", &name, "link", "set", &b, "up"])?;
        run("ip", &["-n", &name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    pub fn host_addr(&self) -> String {
        format!("10.214.{}.1", self.n)
    }

    pub fn inside_addr(&self) -> String {
        format!("10.214.{}.2", self.n)
    }

    /// The /30 of the veth pair.
    pub fn cidr(&self) -> String {
        format!("10.214.{}.0/30", self.n)
    }

    /// Starts `busybox httpd` inside on `addr:port` serving `files` (name, content); returns
    /// once it answers.
    pub fn serve(&mut self, addr: &str, port: u16, files: &[(&str, &[u8])]) -> Result<()> {
        let root = self.dir.join(format!("www-{port}"));
        fs::create_dir_all(&root).map_err(|e| HarnessError::io("creating", &root, e))?;
        for (name, content) in files {
            let p = root.join(name);
            fs::write(&p, content).map_err(|e| HarnessError::io("writing", &p, e))?;
        }
        let listen = format!("{addr}:{port}");
        let root = root.display().to_string();
        self.spawn_inside(&["busybox", "httpd", "-f", "-p", &listen, "-h", &root])?;
        let url = format!("http://{addr}:{port}/{}", files[0].0);
        let path = self.path();
        poll_until(
            "the upstream httpd answers",
            Duration::from_secs(10),
            || {
                Command::new("nsenter")
                    .arg(format!("--net={}", path.display()))
                    .args(["busybox", "wget", "-q", "-O", "/dev/null", &url])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .ok()
                    .filter(|s| s.success())
            },
        )?;
        Ok(())
    }
}

impl UpstreamNetns {
    /// Starts `argv` inside the namespace, killed when the namespace goes.
    fn spawn_inside(&mut self, argv: &[&str]) -> Result<()> {
        let child = Command::new("nsenter")
            .arg(format!("--net={}", self.path().display()))
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: "nsenter".into(),
                source,
            })?;
        self.servers.push(child);
        Ok(())
    }

    /// Starts an upstream inside on `addr:port` that accepts every connection and never reads
    /// from it (a small receive buffer, so uploads block soon); returns once it accepts.
    pub fn serve_stalled(&mut self, addr: &str, port: u16) -> Result<()> {
        let script = "import socket, sys\n\
            s = socket.socket()\n\
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)\n\
            s.bind((sys.argv[1], int(sys.argv[2])))\n\
            s.listen(1024)\n\
            held = []\n\
            while True:\n    held.append(s.accept()[0])\n";
        self.spawn_inside(&["python3", "-c", script, addr, &port.to_string()])?;
        // The host reaches the inside address over the veth pair.
        let target: std::net::SocketAddr = format!("{addr}:{port}")
            .parse()
            .map_err(|_| HarnessError::Config(format!("{addr}:{port} is not an address")))?;
        poll_until(
            "the stalled upstream accepts",
            Duration::from_secs(10),
            || std::net::TcpStream::connect_timeout(&target, Duration::from_millis(200)).ok(),
        )?;
        Ok(())
    }
}

impl Drop for UpstreamNetns {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting the namespace removes both veth ends.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Busybox applets in the sandbox's rootfs.
const APPLETS: &[&str] = &[
    "sh", "sleep", "cat", "echo", "printf", "nc", "wget", "kill", "id", "ls", "grep",
];

/// A spec for a busybox sandbox (with the probe at /bin/sandbox-probe) whose init sleeps; the
/// caller hardens it.
pub fn busybox_spec() -> Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 65534, "gid": 65534},
            "args": ["/bin/sleep", "600"],
            "env": ["PATH=/bin"],
            "cwd": "/"
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "egress",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}
        ],
        "linux": {
            "namespaces": [
                {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                {"type": "network"}
            ]
        }
    })
}

/// A sandbox run with runsc directly; deleted (`--force`) on drop.
pub struct RunscSandbox {
    pub id: String,
    pub dir: PathBuf,
    pub global: Vec<String>,
}

impl RunscSandbox {
    /// Writes the bundle (busybox rootfs + `spec`) and runs `runsc create`.
    pub fn create(prefix: &str, spec: &Value, extra_flags: &[String]) -> Result<RunscSandbox> {
        Self::create_with_files(prefix, spec, extra_flags, &[])
    }

    /// [`create`](Self::create) with more host files copied into the rootfs first: each
    /// `(host path, absolute path inside)`, parent directories made as needed (e.g. a dynamic
    /// binary and the libraries `ldd` lists for it).
    pub fn create_with_files(
        prefix: &str,
        spec: &Value,
        extra_flags: &[String],
        files: &[(PathBuf, String)],
    ) -> Result<RunscSandbox> {
        let id = format!("{prefix}-{}", random_hex(4));
        let dir = std::env::temp_dir().join(format!("gvh-{id}"));
        let rootfs = dir.join("bundle/rootfs");
        for d in ["bin", "tmp", "etc"] {
            let p = rootfs.join(d);
            fs::create_dir_all(&p).map_err(|e| HarnessError::io("creating", &p, e))?;
        }
        let busybox = rootfs.join("bin/busybox");
        fs::copy("/usr/bin/busybox", &busybox)
            .map_err(|e| HarnessError::io("copying busybox to", &busybox, e))?;
        let probe = rootfs.join("bin/sandbox-probe");
        fs::copy(crate::probe::probe_path(), &probe)
            .map_err(|e| HarnessError::io("copying the probe to", &probe, e))?;
        for a in APPLETS {
            let link = rootfs.join("bin").join(a);
            std::os::unix::fs::symlink("busybox", &link)
                .map_err(|e| HarnessError::io("linking", &link, e))?;
        }
        for (host, inside) in files {
            let to = rootfs.join(inside.trim_start_matches('/'));
            if let Some(parent) = to.parent() {
                fs::create_dir_all(parent).map_err(|e| HarnessError::io("creating", parent, e))?;
            }
            fs::copy(host, &to)
                .map_err(|e| HarnessError::io("copying into the rootfs", host, e))?;
        }
        let state = dir.join("state");
        fs::create_dir_all(&state).map_err(|e| HarnessError::io("creating", &state, e))?;
        fs::set_permissions(&state, fs::Permissions::from_mode(0o700))
            .map_err(|e| HarnessError::io("chmod", &state, e))?;
        let config = dir.join("bundle/config.json");
        fs::write(&config, serde_json::to_vec_pretty(spec).expect("json"))
            .map_err(|e| HarnessError::io("writing", &config, e))?;
        let mut global = vec![
            "--root".to_string(),
            dir.join("runsc-root").display().to_string(),
            "--network=none".to_string(),
        ];
        global.extend(extra_flags.iter().cloned());
        let sb = RunscSandbox { id, dir, global };
        sb.create_sandbox()?;
        Ok(sb)
    }

    /// `runsc create`: the sandbox and gofer it forks inherit its stdio, so output goes to a
    /// file (reading a pipe to EOF would wait for the sandbox to end).
    fn create_sandbox(&self) -> Result<()> {
        let log = self.dir.join("create.log");
        let file = fs::File::create(&log).map_err(|e| HarnessError::io("creating", &log, e))?;
        let status = Command::new(crate::stack::bin("runsc")?)
            .args(&self.global)
            .arg("create")
            .arg("--bundle")
            .arg(self.dir.join("bundle"))
            .arg(&self.id)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .status()
            .map_err(|source| HarnessError::Spawn {
                program: "runsc".into(),
                source,
            })?;
        if !status.success() {
            return Err(HarnessError::Shim {
                what: format!("runsc create {}", self.id),
                reason: fs::read_to_string(&log).unwrap_or_default(),
            });
        }
        Ok(())
    }

    /// The directory for the forwarder's process JSON and pid file.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn runsc(&self, args: &[&str]) -> Result<Output> {
        let mut all: Vec<&str> = self.global.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        run(&crate::stack::bin("runsc")?.display().to_string(), &all)
    }

    pub fn start(&self) -> Result<()> {
        self.runsc(&["start", &self.id]).map(|_| ())
    }

    /// `runsc exec --process` with `process` (any exit status), bounded by `timeout`.
    pub fn exec(&self, process: &Value, timeout: Duration) -> Result<Output> {
        let path = self.dir.join(format!("exec-{}.json", random_hex(4)));
        fs::write(&path, serde_json::to_vec(process).expect("json"))
            .map_err(|e| HarnessError::io("writing", &path, e))?;
        let mut cmd = Command::new("timeout");
        cmd.arg("-s")
            .arg("KILL")
            .arg(timeout.as_secs().to_string())
            .arg(crate::stack::bin("runsc")?);
        cmd.args(&self.global)
            .arg("exec")
            .arg("--process")
            .arg(&path)
            .arg(&self.id);
        cmd.stdin(Stdio::null());
        let out = cmd.output().map_err(|source| HarnessError::Spawn {
            program: "runsc".into(),
            source,
        })?;
        let _ = fs::remove_file(&path);
        Ok(out)
    }
}

impl Drop for RunscSandbox {
    fn drop(&mut self) {
        let mut args: Vec<&str> = self.global.iter().map(String::as_str).collect();
        args.extend_from_slice(&["delete", "--force", &self.id]);
        if let Ok(runsc) = crate::stack::bin("runsc") {
            let _ = Command::new(runsc).args(&args).output();
        }
        crate::inspect::release_runsc_null_netns(&self.dir);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A `[network.egress]` section for tests: `allow`, the static `hosts` (name, address),
/// `allow_cidrs`, plain HTTP on, SNI not required (the upstreams serve plain HTTP), and the
/// forwarder `build.rs` made.
pub fn egress_section(allow: &[&str], hosts: &[(&str, String)], cidrs: &[String]) -> String {
    let list = |items: Vec<String>| items.join(", ");
    format!(
        "[network.egress]\nallow = [{}]\nallow_cidrs = [{}]\nhosts = {{ {} }}\nplain_http = true\nrequire_sni = false\nforwarder = \"{}\"\n",
        list(allow.iter().map(|a| format!("\"{a}\"")).collect()),
        list(cidrs.iter().map(|c| format!("\"{c}\"")).collect()),
        list(hosts.iter().map(|(n, a)| format!("\"{n}\" = \"{a}\"")).collect()),
        forwarder_binary().display()
    )
}

/// `section` (as [`egress_section`] writes it) without its `forwarder = ...` line: the policy's
/// default forwarder path, where the runtime writes its own embedded forwarder.
pub fn on_default_forwarder(section: &str) -> String {
    section
        .lines()
        .filter(|l| !l.starts_with("forwarder ="))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The allowlist the egress attacks and the shim test share: the upstream, and two names that
/// resolve where the guard must refuse them (cloud metadata, the node's loopback).
pub fn hostile_names_section(ns: &UpstreamNetns) -> String {
    egress_section(
        &[
            "upstream.example.test:8080",
            "metadata.example.test:8080",
            "loop.example.test:8080",
        ],
        &[
            ("upstream.example.test", ns.inside_addr()),
            // The guard must refuse it: nothing is ever sent there.
            ("metadata.example.test", "169.254.169.254".into()), // net-scan: data
            ("loop.example.test", "127.0.0.1".into()),
        ],
        &[ns.cidr()],
    )
}

/// The `key=count` fields of a sandbox-probe line such as http-flood's
/// `ok n=100 s200=20 ... silent=0` (anything before the first `key=` is ignored).
pub fn probe_counts(line: &str) -> std::collections::HashMap<String, usize> {
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

/// A container's `egress-connection` audit records, in log order.
#[derive(Debug)]
pub struct Connections(pub Vec<Value>);

impl Connections {
    /// Those of container `id` among `records`.
    pub fn of(records: &[Value], id: &str) -> Connections {
        Connections(
            records
                .iter()
                .filter(|r| r["event"] == "egress-connection" && r["container_id"] == id)
                .cloned()
                .collect(),
        )
    }

    /// The verdicts for `host`, in order.
    pub fn verdicts(&self, host: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|r| r["host"] == host)
            .map(|r| r["verdict"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

/// `policy` (a whole policy file) with every key of `section`'s `[network.egress]` (an
/// [`egress_section`]) set in its own `[network.egress]`, its other keys and comments kept: a
/// shipped policy that already has the table (the agent class's) gets the test's allowlist.
pub fn with_egress(policy: &str, section: &str) -> Result<String> {
    let parse = |text: &str, what: &str| {
        text.parse::<toml_edit::DocumentMut>()
            .map_err(|e| HarnessError::Config(format!("{what} is not TOML: {e}")))
    };
    let mut doc = parse(policy, "the policy")?;
    let add = parse(section, "the egress section")?;
    let from = add
        .get("network")
        .and_then(|n| n.get("egress"))
        .and_then(toml_edit::Item::as_table)
        .ok_or_else(|| HarnessError::Config("no [network.egress] in the section".into()))?;
    for (key, item) in from.iter() {
        doc["network"]["egress"][key] = item.clone();
    }
    Ok(doc.to_string())
}

/// busybox httpd on 127.0.0.1:8081 inside a pod's network namespace `netns`, serving `dir`
/// (which must hold `hello.txt`); killed on drop. Only a dial from inside that namespace
/// reaches it, as egress's proxy dials for a pod.
pub struct PodLocalServer(std::process::Child);

impl PodLocalServer {
    pub fn start(netns: &std::path::Path, dir: &std::path::Path) -> PodLocalServer {
        // nsenter, not `ip netns exec` (which remounts /sys); -f: stay in the foreground.
        let child = std::process::Command::new("nsenter")
            .arg(format!("--net={}", netns.display()))
            .args(["busybox", "httpd", "-f", "-p", "127.0.0.1:8081", "-h"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Reached from inside the namespace before the test relies on it.
        poll_until(
            "the pod-local httpd",
            std::time::Duration::from_secs(10),
            || {
                std::process::Command::new("nsenter")
                    .arg(format!("--net={}", netns.display()))
                    .args(["busybox", "wget", "-q", "-O", "/dev/null"])
                    .arg("http://127.0.0.1:8081/hello.txt")
                    .status()
                    .is_ok_and(|s| s.success())
                    .then_some(())
            },
        )
        .unwrap();
        PodLocalServer(child)
    }
}

impl Drop for PodLocalServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_egress_sets_the_sections_keys_and_keeps_the_rest() {
        let shipped = "version = 1\n[network]\nmode = \"none\"\n[network.egress]\n# kept\nallow = []\nmax_bytes = \"2Gi\"\nplain_http = false\n";
        let section = egress_section(
            &["up.example.test:8080"],
            &[("up.example.test", "10.0.0.2".into())], // net-scan: data
            &["10.0.0.2/32".into()],                   // net-scan: data
        );
        let out = with_egress(shipped, &section).unwrap();
        let doc: toml_edit::DocumentMut = out.parse().unwrap();
        let egress = &doc["network"]["egress"];
        assert_eq!(egress["allow"][0].as_str(), Some("up.example.test:8080"));
        assert_eq!(
            egress["hosts"]["up.example.test"].as_str(),
            Some("10.0.0.2") // net-scan: data
        );
        assert_eq!(egress["allow_cidrs"][0].as_str(), Some("10.0.0.2/32")); // net-scan: data
        assert_eq!(egress["plain_http"].as_bool(), Some(true));
        assert_eq!(egress["max_bytes"].as_str(), Some("2Gi"));
        assert_eq!(doc["network"]["mode"].as_str(), Some("none"));
        assert!(out.contains("# kept"), "{out}");
        assert_eq!(out.matches("[network.egress]").count(), 1, "{out}");
    }
}

/// A sandbox's proxy process as seen from /proc: who it runs as and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxySeen {
    pub pid: i32,
    pub uid: String,
    pub cap_eff: String,
    pub cap_bnd: String,
    pub no_new_privs: String,
    pub seccomp: String,
    /// Its memory cgroup (v1).
    pub memory_cgroup: String,
}

impl ProxySeen {
    /// Whether it runs as it must: a uid other than root's (all four the same), no
    /// capabilities, no_new_privs, seccomp filter mode.
    pub fn is_confined(&self) -> bool {
        let ids: Vec<&str> = self.uid.split_whitespace().collect();
        ids.len() == 4
            && ids.iter().all(|u| *u == ids[0] && *u != "0")
            && self.cap_eff == "0000000000000000"
            && self.cap_bnd == "0000000000000000"
            && self.no_new_privs == "1"
            && self.seccomp == "2"
    }
}

/// Every process named `gvh-egress` on the host now.
pub fn proxies_now() -> Vec<ProxySeen> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "gvh-egress")
        })
        .filter_map(|pid| {
            let field = |k: &str| crate::inspect::status_field(pid, k);
            Some(ProxySeen {
                pid,
                uid: field("Uid")?,
                cap_eff: field("CapEff")?,
                cap_bnd: field("CapBnd")?,
                no_new_privs: field("NoNewPrivs")?,
                seccomp: field("Seccomp")?,
                memory_cgroup: crate::inspect::cgroup_of(pid, "memory")?,
            })
        })
        .collect()
}

/// Watches for proxy processes while a one-shot container runs (`docker run --rm`, whose id
/// is known only once it returns): every distinct one seen, until [`ProxyWatch::stop`].
pub struct ProxyWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<ProxySeen>>,
}

impl ProxyWatch {
    pub fn start() -> ProxyWatch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen: Vec<ProxySeen> = Vec::new();
            while !stopping.load(std::sync::atomic::Ordering::Acquire) {
                for p in proxies_now() {
                    if !seen.contains(&p) {
                        seen.push(p);
                    }
                }
                // A sampling period, not a wait for something: the container's life is seconds.
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        });
        ProxyWatch { stop, thread }
    }

    /// Those seen whose memory cgroup names `id`.
    pub fn stop(self, id: &str) -> Vec<ProxySeen> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        let seen = self.thread.join().expect("the watch thread");
        seen.into_iter()
            .filter(|p| p.memory_cgroup.contains(id))
            .collect()
    }
}
