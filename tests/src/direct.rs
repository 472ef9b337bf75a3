//! Driving the real shim binary the way containerd does, without containerd in between: the
//! `start` action (legacy flags, or containerd 2.x's bootstrap protocol on stdin), then the task
//! service over ttrpc. For what `ctr` cannot send (malformed bundles, bad fifo paths) and for
//! the containerd 2.x `containerd.task.v3.Task` service, which containerd 1.6 never calls.
//!
//! The shim still talks to a real private containerd: its events go to that containerd's ttrpc
//! socket, and its socket lives where containerd would look for it.

use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use containerd_shim_protos::api::{CreateTaskRequest, ShutdownRequest};
use containerd_shim_protos::bootstrap_api::{BootstrapParams, BootstrapResult};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::{Message, MessageField};
use containerd_shim_protos::shim::shim_ttrpc::TaskClient;
use containerd_shim_protos::ttrpc;
use containerd_shim_protos::types::mount::Mount;
use serde_json::{json, Value};

use crate::containerd::{Containerd, SHIM_BINARY_NAME};
use crate::error::{HarnessError, Result};
use crate::fault::read_pid;
use crate::inspect;
use crate::poll::poll_until;

/// Deadline of each ttrpc call.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the shim may take to exit after Shutdown.
const EXIT_TIMEOUT: Duration = Duration::from_secs(20);
/// Applets linked into the hand-made rootfs (Debian's busybox-static).
const APPLETS: &[&str] = &["sh", "sleep", "echo", "cat", "true", "false", "id", "ls"];

/// How the `start` action is invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartProtocol {
    /// containerd 1.6/1.7 (and 2.x with a legacy shim): flags and `TTRPC_ADDRESS` in the
    /// environment; the reply is the bare socket address.
    Legacy,
    /// containerd 2.x's bootstrap protocol: `BootstrapParams` on stdin, a `BootstrapResult`
    /// (version 3, ttrpc) on stdout.
    Bootstrap,
}

/// What the `start` action answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReply {
    pub address: String,
    /// 3 with the bootstrap protocol; `None` for a bare address.
    pub version: Option<i32>,
    pub protocol: Option<String>,
}

/// A shim server started through `start`, with a ttrpc connection to it.
pub struct DirectShim {
    pub id: String,
    pub reply: StartReply,
    pub pid: i32,
    client: ttrpc::Client,
}

impl DirectShim {
    /// Runs `<shim> -namespace NS -address A -publish-binary containerd -id ID start` in
    /// `bundle`'s directory, as containerd does, and connects to the address it prints.
    pub fn start(c: &Containerd, bundle: &DirectBundle, protocol: StartProtocol) -> Result<Self> {
        let shim = c.bin_dir().join(SHIM_BINARY_NAME);
        let address = c.address().to_string_lossy().into_owned();
        let ttrpc_address = c.ttrpc_address().to_string_lossy().into_owned();
        let stdin = match protocol {
            StartProtocol::Legacy => Vec::new(),
            StartProtocol::Bootstrap => {
                let mut p = BootstrapParams::new();
                p.containerd_version = "2.1.0".into();
                p.instance_id = bundle.id.clone();
                p.namespace = c.namespace().to_string();
                p.containerd_grpc_address = address.clone();
                p.containerd_ttrpc_address = ttrpc_address.clone();
                p.containerd_binary = "containerd".into();
                p.write_to_bytes().map_err(|e| shim_err("encoding", e))?
            }
        };
        let mut child = Command::new(&shim)
            .args(["-namespace", c.namespace(), "-address", &address])
            .args(["-publish-binary", "containerd", "-id", &bundle.id, "start"])
            .current_dir(&bundle.dir)
            .env("PATH", c.path_env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .envs(
                // The bootstrap protocol carries containerd's ttrpc address in its parameters;
                // the legacy one in the environment.
                (protocol == StartProtocol::Legacy).then_some(("TTRPC_ADDRESS", &ttrpc_address)),
            )
            .spawn()
            .map_err(|source| HarnessError::Spawn {
                program: shim.display().to_string(),
                source,
            })?;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(&stdin)
            .map_err(|e| HarnessError::io("writing start parameters to", &shim, e))?;
        let out = child
            .wait_with_output()
            .map_err(|e| HarnessError::io("waiting for", &shim, e))?;
        if !out.status.success() {
            return Err(HarnessError::Shim {
                what: "start".into(),
                reason: format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        let reply = match protocol {
            StartProtocol::Legacy => StartReply {
                address: String::from_utf8_lossy(&out.stdout).trim().to_string(),
                version: None,
                protocol: None,
            },
            StartProtocol::Bootstrap => {
                let r = BootstrapResult::parse_from_bytes(&out.stdout)
                    .map_err(|e| shim_err("decoding the BootstrapResult", e))?;
                StartReply {
                    address: r.address,
                    version: Some(r.version),
                    protocol: Some(r.protocol),
                }
            }
        };
        let pid = read_pid(&bundle.dir.join("shim.pid"))?;
        let client = ttrpc::Client::connect(&reply.address)
            .map_err(|e| shim_err(&format!("connecting to {}", reply.address), e))?;
        Ok(DirectShim {
            id: bundle.id.clone(),
            reply,
            pid,
            client,
        })
    }

    /// The generated client of `containerd.task.v3.Task` (the shim serves the same handlers
    /// under v2 and v3).
    pub fn task(&self) -> TaskClient {
        TaskClient::new(self.client.clone())
    }

    /// The raw connection, to call a method under any service name.
    pub fn raw(&self) -> &ttrpc::Client {
        &self.client
    }

    /// Calls `/<service>/<method>` with `req` and decodes the answer: the same bytes containerd
    /// sends, under a service name of the caller's choice.
    pub fn call<Req: Message, Resp: Message>(
        &self,
        service: &str,
        method: &str,
        req: &Req,
    ) -> ttrpc::Result<Resp> {
        let mut r = ttrpc::Request::new();
        r.service = service.to_string();
        r.method = method.to_string();
        r.timeout_nano = CALL_TIMEOUT.as_nanos() as i64;
        r.payload = req
            .write_to_bytes()
            .map_err(|e| ttrpc::Error::Others(e.to_string()))?;
        let resp = self.client.request(r)?;
        Resp::parse_from_bytes(&resp.payload).map_err(|e| ttrpc::Error::Others(e.to_string()))
    }

    /// The socket path behind the address.
    pub fn socket_path(&self) -> PathBuf {
        PathBuf::from(
            self.reply
                .address
                .strip_prefix("unix://")
                .unwrap_or(&self.reply.address),
        )
    }

    /// Shutdown, then waits for the server to exit and its socket to go.
    pub fn shutdown(self) -> Result<()> {
        let mut req = ShutdownRequest::new();
        req.id = self.id.clone();
        // The server may close the connection before it answers: either outcome is an exit.
        let _ = self.task().shutdown(ctx(), &req);
        self.wait_exit()
    }

    /// Waits for the server to exit and its socket to disappear.
    pub fn wait_exit(&self) -> Result<()> {
        let pid = self.pid;
        poll_until(&format!("shim {pid} to exit"), EXIT_TIMEOUT, || {
            (!inspect::is_alive(pid)).then_some(())
        })?;
        let socket = self.socket_path();
        poll_until("the shim socket to go", EXIT_TIMEOUT, || {
            (!socket.exists()).then_some(())
        })
    }
}

/// A test that failed before [`DirectShim::shutdown`] leaves a server running: it is killed,
/// and its socket (which a killed server cannot remove) goes with it, so a failing test does
/// not litter the host-global socket directory.
impl Drop for DirectShim {
    fn drop(&mut self) {
        if inspect::is_alive(self.pid) {
            // SAFETY: kill(2) of the server this handle started.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            let pid = self.pid;
            let _ = poll_until("the killed shim to exit", EXIT_TIMEOUT, || {
                (!inspect::is_alive(pid)).then_some(())
            });
            let _ = fs::remove_file(self.socket_path());
        }
    }
}

/// A ttrpc context with [`CALL_TIMEOUT`].
pub fn ctx() -> ttrpc::context::Context {
    ttrpc::context::with_timeout(CALL_TIMEOUT.as_nanos() as i64)
}

fn shim_err(what: &str, e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Shim {
        what: what.to_string(),
        reason: e.to_string(),
    }
}

/// `runtimeoptions.v1.Options{config_path}`, the Any containerd's CRI (and `ctr run
/// --runtime-config-path`) attaches to CreateTask. Encoded by hand: field 2, a string.
pub fn runtime_options(config_path: &Path) -> Any {
    let path = config_path.to_string_lossy();
    let mut value = vec![0x12];
    let mut len = path.len();
    while len >= 0x80 {
        value.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    value.push(len as u8);
    value.extend_from_slice(path.as_bytes());
    let mut any = Any::new();
    any.type_url = "runtimeoptions.v1.Options".into();
    any.value = value;
    any
}

/// A bundle made by hand (what containerd would have written), in `<containerd dir>/direct/`:
/// `config.json` from `ctr oci spec`, a busybox root filesystem that Create bind-mounts on
/// `rootfs/`, and stdout/stderr fifos whose read ends the bundle holds open.
pub struct DirectBundle {
    pub id: String,
    pub dir: PathBuf,
    /// The directory Create bind-mounts on `<dir>/rootfs`.
    pub rootfs_source: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// What the shim logged through `<bundle>/log` (containerd copies it into its own log).
    pub log: PathBuf,
    stdout_reader: File,
}

impl DirectBundle {
    /// A bundle for container `id` running `args`, with a root filesystem of its own.
    pub fn new(c: &Containerd, id: &str, args: &[&str]) -> Result<Self> {
        Self::sharing_rootfs(c, id, args, None)
    }

    /// A bundle whose rootfs mount source is `rootfs_source` (a busybox tree made here when
    /// missing), so that many bundles can share one: the root is read-only under the policy.
    pub fn sharing_rootfs(
        c: &Containerd,
        id: &str,
        args: &[&str],
        rootfs_source: Option<&Path>,
    ) -> Result<Self> {
        let base = c.dir().join("direct");
        let dir = base.join(id);
        let rootfs_source = rootfs_source
            .map(Path::to_path_buf)
            .unwrap_or_else(|| base.join(format!("{id}.rootfs")));
        for d in [&dir, &dir.join("rootfs"), &rootfs_source] {
            fs::create_dir_all(d).map_err(|e| HarnessError::io("creating", d, e))?;
        }
        make_busybox_rootfs(&rootfs_source)?;
        let mut spec = default_spec(c)?;
        spec["process"]["args"] = json!(args);
        // `ctr oci spec` leaves the environment empty; ctr run adds the image's PATH.
        spec["process"]["env"] = json!(["PATH=/bin"]);
        spec["linux"]["cgroupsPath"] = json!(format!("/{}/{id}", c.namespace()));
        let log = base.join(format!("{id}.shim.log"));
        drain_log_fifo(&mkfifo(&dir.join("log"))?, &log)?;
        let stdout = mkfifo(&base.join(format!("{id}.stdout")))?;
        let stderr = mkfifo(&base.join(format!("{id}.stderr")))?;
        // Held open from now on: a fifo's buffered output is lost once no end is open.
        let stdout_reader = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&stdout)
            .map_err(|e| HarnessError::io("opening", &stdout, e))?;
        let bundle = DirectBundle {
            id: id.to_string(),
            dir,
            rootfs_source,
            stdout,
            stderr,
            stdout_reader,
            log,
        };
        bundle.write_config(serde_json::to_vec_pretty(&spec).expect("a spec serialises"))?;
        Ok(bundle)
    }

    /// Replaces config.json with `bytes` (to corrupt it).
    pub fn write_config(&self, bytes: impl AsRef<[u8]>) -> Result<()> {
        let path = self.dir.join("config.json");
        fs::write(&path, bytes).map_err(|e| HarnessError::io("writing", &path, e))
    }

    /// The current config.json, parsed.
    pub fn config(&self) -> Result<Value> {
        let path = self.dir.join("config.json");
        let bytes = fs::read(&path).map_err(|e| HarnessError::io("reading", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| shim_err("parsing config.json", e))
    }

    /// The CreateTaskRequest containerd would send for this bundle: the rootfs as a bind mount,
    /// the fifos, and the runtime options naming `policy`.
    pub fn create_request(&self, policy: &Path) -> CreateTaskRequest {
        let mut m = Mount::new();
        m.type_ = "bind".into();
        m.source = self.rootfs_source.to_string_lossy().into_owned();
        m.options = vec!["rbind".into(), "rw".into()];
        let mut req = CreateTaskRequest::new();
        req.id = self.id.clone();
        req.bundle = self.dir.to_string_lossy().into_owned();
        req.rootfs = vec![m];
        req.stdout = self.stdout.to_string_lossy().into_owned();
        req.stderr = self.stderr.to_string_lossy().into_owned();
        req.options = MessageField::some(runtime_options(policy));
        req
    }

    /// The shim's log so far.
    pub fn shim_log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the task wrote to stdout so far (non-blocking).
    pub fn read_stdout(&mut self) -> String {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.stdout_reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// Copies what the shim writes to its log fifo into `to`, as containerd does into its log.
/// The reader holds the fifo open read-write, so it never sees EOF between shim runs; the
/// thread lives as long as the test process.
fn drain_log_fifo(fifo: &Path, to: &Path) -> Result<()> {
    let mut reader = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fifo)
        .map_err(|e| HarnessError::io("opening", fifo, e))?;
    let mut out = File::create(to).map_err(|e| HarnessError::io("creating", to, e))?;
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    Ok(())
}

/// The spec `ctr oci spec` prints (containerd 1.6's defaults), with no daemon involved.
fn default_spec(c: &Containerd) -> Result<Value> {
    let out = c.ctr().args(["oci", "spec"]).checked()?;
    serde_json::from_str(&out.stdout).map_err(|e| shim_err("parsing `ctr oci spec`", e))
}

fn mkfifo(path: &Path) -> Result<PathBuf> {
    let c_path = std::ffi::CString::new(path.to_string_lossy().as_bytes()).expect("no NUL");
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    if unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) } != 0 {
        return Err(HarnessError::io(
            "mkfifo",
            path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(path.to_path_buf())
}

/// A minimal root filesystem: Debian's static busybox and a few applet links.
pub fn make_busybox_rootfs(root: &Path) -> Result<()> {
    for d in ["bin", "proc", "sys", "dev", "tmp", "etc", "var/tmp", "run"] {
        let p = root.join(d);
        fs::create_dir_all(&p).map_err(|e| HarnessError::io("creating", &p, e))?;
    }
    let busybox = root.join("bin/busybox");
    if !busybox.exists() {
        fs::copy("/usr/bin/busybox", &busybox)
            .map_err(|e| HarnessError::io("copying busybox to", &busybox, e))?;
        fs::set_permissions(&busybox, fs::Permissions::from_mode(0o755))
            .map_err(|e| HarnessError::io("chmod", &busybox, e))?;
    }
    for applet in APPLETS {
        let link = root.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", &link)
                .map_err(|e| HarnessError::io("linking", &link, e))?;
        }
    }
    let passwd = root.join("etc/passwd");
    fs::write(
        &passwd,
        "root:x:0:0::/:/bin/sh\nnobody:x:65534:65534::/:/bin/sh\n",
    )
    .map_err(|e| HarnessError::io("writing", &passwd, e))
}
