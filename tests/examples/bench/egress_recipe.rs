//! The baseline egress path: the recipe people build by hand today (see
//! `/work/shared/notes/egress.md`). On the host, Debian's tinyproxy (`Listen 127.0.0.1`, a
//! `Filter` with `FilterDefaultDeny Yes`, `ConnectPort` for the tunnel port, logging each
//! connection at `Info`) and `socat UNIX-LISTEN:proxy.sock,fork TCP:127.0.0.1:PORT`; the socket's
//! directory bind-mounted into a sandbox run with plain runsc and `--host-uds=open` (the recipe
//! needs it; our runtime never grants it), where `socat TCP-LISTEN:3128,bind=127.0.0.1,fork
//! UNIX-CONNECT:/hostsock/proxy.sock` is the sandbox's init.
//!
//! The recipe runs socat with its defaults, as written down; its 8 KiB transfer buffer means
//! one ptrace-trapped read and write per 8 KiB inside the sandbox. A tuned copy beside it
//! (`-b 65536` at both ends, its own socket, listening on [`TUNED_LISTEN`]) shows what the
//! recipe reaches with larger buffers, through the same tinyproxy and the same sandbox.
//!
//! The in-sandbox socat is Debian's own binary, copied into the sandbox's rootfs with the
//! libraries `ldd` lists (Debian has no static socat): the recipe's users run their distribution's
//! socat in their image, and a dynamic binary loads its libraries once at start, so the copy is
//! what they would run. tinyproxy resolves the upstream's names through `/etc/hosts`, bound over
//! the host's only in tinyproxy's own mount namespace (the host's file is never touched), as our
//! proxy resolves them through the policy's static `hosts`.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use gvisor_hardened_tests::egress::{busybox_spec, RunscSandbox};
use gvisor_hardened_tests::{fault, poll_until, unique_id};
use serde_json::{json, Value};

use crate::contenders::BenchResult;
use crate::egress_upstream::{Upstream, HTTP_HOST, TLS_HOST, TLS_PORT};
use crate::procfs::{descendants, mem_of, Mem};

/// Where the in-sandbox socat listens: the proxy address the workload's variables name.
pub const LISTEN: &str = "127.0.0.1:3128";
/// The tuned copy's address inside.
pub const TUNED_LISTEN: &str = "127.0.0.1:3129";
/// socat's transfer buffer in the tuned copy (the default is 8192).
const TUNED_BUFFER: &str = "65536";
const SOCAT: &str = "/usr/bin/socat";
const READY: Duration = Duration::from_secs(30);

/// A host process started in its own process group, killed with the group on drop (socat forks
/// a child per connection).
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) of the process group this child leads.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

fn spawn_group(cmd: &mut Command, what: &str) -> BenchResult<Group> {
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {what}: {e}"))?;
    Ok(Group(child))
}

pub struct Recipe {
    dir: PathBuf,
    pub sandbox: RunscSandbox,
    socat: Group,
    _tuned_socat: Group,
    tinyproxy: Group,
    pub tinyproxy_port: u16,
}

/// The shared objects a dynamic binary loads, from `ldd`: absolute paths, the loader included.
fn libraries(binary: &str) -> BenchResult<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output()?;
    if !out.status.success() {
        return Err(format!("ldd {binary}: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = match l.split_once("=>") {
                Some((_, right)) => right.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

fn free_port() -> BenchResult<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Recipe {
    pub fn start(upstream: &Upstream) -> BenchResult<Recipe> {
        let dir = std::env::temp_dir().join(unique_id("gvh-ebench-recipe"));
        let sock_dir = dir.join("sock");
        fs::create_dir_all(&sock_dir)?;
        let port = free_port()?;
        let hosts = dir.join("hosts");
        fs::write(
            &hosts,
            format!(
                "127.0.0.1 localhost\n{} {HTTP_HOST} {TLS_HOST}\n",
                upstream.addr()
            ),
        )?;
        let filter = dir.join("filter");
        let re = |h: &str| format!("^{}$", h.replace('.', "\\."));
        fs::write(&filter, format!("{}\n{}\n", re(HTTP_HOST), re(TLS_HOST)))?;
        let conf = dir.join("tinyproxy.conf");
        fs::write(
            &conf,
            format!(
                "Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 400\n\
                 LogFile \"{log}\"\nLogLevel Info\n\
                 Filter \"{filter}\"\nFilterDefaultDeny Yes\n\
                 ConnectPort 443\nConnectPort {TLS_PORT}\n",
                log = dir.join("tinyproxy.log").display(),
                filter = filter.display(),
            ),
        )?;
        // unshare without --fork and `exec`: the child's pid ends up being tinyproxy's own.
        let tinyproxy = spawn_group(
            Command::new("unshare")
                .args(["--mount", "--propagation", "private", "sh", "-c"])
                .arg(format!(
                    "mount --bind {} /etc/hosts && exec tinyproxy -d -c {}",
                    hosts.display(),
                    conf.display()
                ))
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.join("tinyproxy.stderr"))?),
            "tinyproxy",
        )?;
        poll_until("tinyproxy to listen", READY, || {
            TcpStream::connect(("127.0.0.1", port)).ok()
        })?;
        let host_socat = |name: &str, buffer: Option<&str>| -> BenchResult<Group> {
            let sock = sock_dir.join(format!("{name}.sock"));
            let mut cmd = Command::new(SOCAT);
            if let Some(b) = buffer {
                cmd.args(["-b", b]);
            }
            let g = spawn_group(
                cmd.arg(format!("UNIX-LISTEN:{},fork,mode=666", sock.display()))
                    .arg(format!("TCP:127.0.0.1:{port}"))
                    .stdout(Stdio::null())
                    .stderr(fs::File::create(dir.join(format!("{name}.stderr")))?),
                "the host socat",
            )?;
            poll_until("the host socat's socket", READY, || {
                sock.exists().then_some(())
            })?;
            Ok(g)
        };
        let socat = host_socat("proxy", None)?;
        let tuned_socat = host_socat("proxy-tuned", Some(TUNED_BUFFER))?;

        let mut files = vec![(PathBuf::from(SOCAT), SOCAT.to_string())];
        for lib in libraries(SOCAT)? {
            let inside = lib.display().to_string();
            files.push((lib, inside));
        }
        let mut spec = busybox_spec();
        let listen = |addr: &str| {
            let (ip, port) = addr.rsplit_once(':').expect("host:port");
            format!("TCP-LISTEN:{port},bind={ip},fork,reuseaddr")
        };
        spec["process"]["args"] = json!([
            "/bin/sh",
            "-c",
            format!(
                "{SOCAT} -b {TUNED_BUFFER} {} UNIX-CONNECT:/hostsock/proxy-tuned.sock & \
                 exec {SOCAT} {} UNIX-CONNECT:/hostsock/proxy.sock",
                listen(TUNED_LISTEN),
                listen(LISTEN)
            )
        ]);
        spec["mounts"].as_array_mut().expect("mounts").push(json!({
            "destination": "/hostsock", "type": "bind", "source": sock_dir,
            "options": ["rbind", "ro"]
        }));
        let sandbox = RunscSandbox::create_with_files(
            "ebench-recipe",
            &spec,
            &["--host-uds=open".to_string()],
            &files,
        )?;
        sandbox.start()?;
        let recipe = Recipe {
            dir,
            sandbox,
            socat,
            _tuned_socat: tuned_socat,
            tinyproxy,
            tinyproxy_port: port,
        };
        for addr in [LISTEN, TUNED_LISTEN] {
            let (ip, lport) = addr.rsplit_once(':').expect("host:port");
            poll_until("the sandbox's socat to listen", READY, || {
                recipe
                    .exec(
                        &format!("exec sandbox-probe connect {ip} {lport} 1000"),
                        addr,
                    )
                    .ok()
                    .filter(|o| o.starts_with("ok"))
            })?;
        }
        Ok(recipe)
    }

    /// The client process inside the sandbox, with the proxy variables the recipe's users set.
    fn process(script: &str, listen: &str) -> Value {
        let proxy = format!("http://{listen}");
        json!({
            "terminal": false,
            "user": {"uid": 65534, "gid": 65534},
            "args": ["/bin/sh", "-c", script],
            "env": [
                "PATH=/bin",
                format!("http_proxy={proxy}"), format!("HTTP_PROXY={proxy}"),
                format!("https_proxy={proxy}"), format!("HTTPS_PROXY={proxy}"),
                "NO_PROXY=localhost,127.0.0.1,::1",
            ],
            "cwd": "/"
        })
    }

    /// Runs `sh -c script` inside with `runsc exec`, the proxy variables naming `listen`; its
    /// stdout (an error if it failed).
    pub fn exec(&self, script: &str, listen: &str) -> BenchResult<String> {
        let out = self
            .sandbox
            .exec(&Self::process(script, listen), Duration::from_secs(300))?;
        if !out.status.success() {
            return Err(format!(
                "runsc exec {script:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Starts `sh -c script` inside and returns once it printed its first line (which it
    /// returns); the process then waits for a line on stdin (`http-hold`).
    pub fn exec_held(&self, script: &str) -> BenchResult<(Held, String)> {
        let path = self.dir.join(format!("{}.json", unique_id("hold")));
        fs::write(&path, serde_json::to_vec(&Self::process(script, LISTEN))?)?;
        // The stack's runsc, the one that made the sandbox (on the current stack, `runsc` in
        // PATH is Debian's 20221219, which cannot read its state).
        let child = Command::new(gvisor_hardened_tests::stack::bin("runsc")?)
            .args(&self.sandbox.global)
            .arg("exec")
            .arg("--process")
            .arg(&path)
            .arg(&self.sandbox.id)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        Held::first_line(child)
    }

    /// Host memory of the recipe's host side: tinyproxy and the (default) host socat with its
    /// children.
    pub fn host_memory(&self) -> Mem {
        let mut pids = vec![self.tinyproxy.0.id() as i32, self.socat.0.id() as i32];
        pids.extend(descendants(self.socat.0.id() as i32));
        pids.into_iter()
            .filter_map(mem_of)
            .fold(Mem::default(), |a, m| a + m)
    }

    /// Host memory of the sandbox: runsc's sandbox and gofer processes and their children.
    pub fn sandbox_memory(&self) -> Mem {
        let root = Path::new(&self.sandbox.global[1]);
        let mut pids: Vec<i32> = fault::runsc_processes(root, &self.sandbox.id)
            .iter()
            .map(|p| p.pid)
            .collect();
        for p in pids.clone() {
            pids.extend(descendants(p));
        }
        pids.sort_unstable();
        pids.dedup();
        pids.into_iter()
            .filter_map(mem_of)
            .fold(Mem::default(), |a, m| a + m)
    }
}

impl Drop for Recipe {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A client process that holds its connections until told to finish.
pub struct Held {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Held {
    /// Takes over `child` (stdin and stdout piped) once it printed its first line.
    pub fn first_line(mut child: Child) -> BenchResult<(Held, String)> {
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take();
        let mut held = Held { child, stdin };
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if !line.starts_with("ok") {
            let _ = held.finish();
            return Err(format!("the holding client said {line:?}").into());
        }
        Ok((held, line))
    }

    /// Tells the client to close its connections and waits for it.
    pub fn finish(&mut self) -> BenchResult<()> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("the holding client exited {status}").into());
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.finish();
        }
    }
}
