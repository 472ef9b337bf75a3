//! The `start` action: find or launch the shim server for this container and tell containerd
//! where it listens.
//!
//! Containers are grouped by pod: every container whose spec carries the CRI annotation
//! `io.kubernetes.cri.sandbox-id` is served by the shim of that sandbox, so a pod has one shim
//! process (and one runsc sandbox). The socket is bound here, in the short-lived `start`
//! process, and handed to the server as fd 3: containerd may connect as soon as the address is
//! printed, and connections queue on the already-listening socket until the server accepts.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use containerd_shim_protos::bootstrap_api::{BootstrapParams, BootstrapResult};
use containerd_shim_protos::protobuf::Message;
use sha2::{Digest, Sha256};

use crate::flags::Flags;
use gvisor_hardened_core::bundle;
use gvisor_hardened_core::prepare::CRI_SANDBOX_ID;

/// Environment variable naming the inherited listening socket in the server process.
pub const LISTEN_FD_ENV: &str = "GVISOR_HARDENED_LISTEN_FD";
const LISTEN_FD: i32 = 3;
pub const SOCKET_ROOT: &str = "/run/containerd/s";
/// containerd 2.x writes BootstrapParams on stdin, a few hundred bytes.
const MAX_STDIN_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("shim socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("launching the shim server: {0}")]
    Spawn(std::io::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading start parameters from stdin: {0}")]
    Stdin(std::io::Error),
}

/// How containerd talks to us: containerd < 2.3 passes flags/env and wants the bare address
/// (task API v2, which every release since 1.6 speaks); 2.3+ sends BootstrapParams on stdin and
/// wants a BootstrapResult (task API v3).
#[derive(Debug, Clone, PartialEq)]
pub enum Protocol {
    Legacy,
    Bootstrap(Box<BootstrapParams>),
}

pub fn detect_protocol(stdin: &[u8], flags: &Flags) -> Protocol {
    match BootstrapParams::parse_from_bytes(stdin) {
        Ok(p)
            if !stdin.is_empty()
                && p.instance_id == flags.id
                && p.namespace == flags.namespace
                && !p.containerd_ttrpc_address.is_empty() =>
        {
            Protocol::Bootstrap(Box::new(p))
        }
        // Legacy containerd may write the runtime options (an Any) to stdin: not ours to parse here.
        _ => Protocol::Legacy,
    }
}

/// `unix:///run/containerd/s/<sha256(address/namespace/group)>`, the layout containerd uses for
/// its own shims, so its cleanup finds and removes the socket.
pub fn socket_address(
    socket_dir: &str,
    containerd_address: &str,
    namespace: &str,
    group: &str,
) -> String {
    let digest = Sha256::digest(format!("{containerd_address}/{namespace}/{group}"));
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("unix://{}/{}", socket_dir.trim_end_matches('/'), hex)
}

/// The pod a container belongs to, from its spec's CRI annotations; its own id otherwise.
pub fn grouping_id(bundle: &Path, id: &str) -> String {
    bundle::read_spec(bundle)
        .ok()
        .and_then(|(_, spec)| bundle::annotations(&spec).remove(CRI_SANDBOX_ID))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| id.to_string())
}

fn socket_path(address: &str) -> &str {
    address.strip_prefix("unix://").unwrap_or(address)
}

/// Binds the socket, or reports that a live server already owns it (the pod's shim).
fn bind_or_reuse(address: &str) -> Result<Option<UnixListener>, StartError> {
    let path = Path::new(socket_path(address));
    let err = |source| StartError::Socket {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    match UnixListener::bind(path) {
        Ok(l) => Ok(Some(l)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            if UnixStream::connect(path).is_ok() {
                return Ok(None);
            }
            // A stale socket from a shim that died: nobody answers on it.
            std::fs::remove_file(path).map_err(err)?;
            UnixListener::bind(path).map(Some).map_err(err)
        }
        Err(e) => Err(err(e)),
    }
}

fn spawn_server(
    flags: &Flags,
    listener: UnixListener,
    ttrpc_address: Option<&str>,
) -> Result<u32, StartError> {
    let exe = std::env::current_exe().map_err(StartError::Spawn)?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "-namespace",
        &flags.namespace,
        "-id",
        &flags.id,
        "-address",
        &flags.address,
    ]);
    if !flags.publish_binary.is_empty() {
        cmd.args(["-publish-binary", &flags.publish_binary]);
    }
    if flags.debug {
        cmd.arg("-debug");
    }
    if let Some(addr) = ttrpc_address {
        cmd.env("TTRPC_ADDRESS", addr);
    }
    cmd.env(LISTEN_FD_ENV, LISTEN_FD.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let fd: OwnedFd = listener.into();
    let raw = fd.as_raw_fd();
    // SAFETY: only async-signal-safe calls (setsid, dup2, fcntl) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Own session: the server must outlive `start` and containerd's process group.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if raw == LISTEN_FD {
                let flags = libc::fcntl(raw, libc::F_GETFD);
                if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, LISTEN_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(StartError::Spawn)?;
    drop(fd);
    Ok(child.id())
}

fn write_file(path: &Path, contents: &str) -> Result<(), StartError> {
    std::fs::write(path, contents).map_err(|source| StartError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs the `start` action; returns the bytes to print on stdout.
pub fn run(flags: &Flags) -> Result<Vec<u8>, StartError> {
    let mut stdin = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN_BYTES)
        .read_to_end(&mut stdin)
        .map_err(StartError::Stdin)?;
    let protocol = detect_protocol(&stdin, flags);
    let bundle = std::env::current_dir().map_err(StartError::Spawn)?;
    let group = grouping_id(&bundle, &flags.id);
    let (socket_dir, ttrpc_address) = match &protocol {
        Protocol::Bootstrap(p) => (
            p.socket_dir
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| SOCKET_ROOT.to_string()),
            Some(p.containerd_ttrpc_address.clone()),
        ),
        Protocol::Legacy => (SOCKET_ROOT.to_string(), None),
    };
    let address = socket_address(&socket_dir, &flags.address, &flags.namespace, &group);
    if let Some(listener) = bind_or_reuse(&address)? {
        let pid = spawn_server(flags, listener, ttrpc_address.as_deref())?;
        write_file(&bundle.join("shim.pid"), &pid.to_string())?;
    }
    // containerd reads `address` on restart to reconnect to running shims.
    write_file(&bundle.join("address"), &address)?;
    Ok(match protocol {
        Protocol::Legacy => address.into_bytes(),
        Protocol::Bootstrap(_) => {
            let mut result = BootstrapResult::new();
            result.version = 3;
            result.address = address;
            result.protocol = "ttrpc".to_string();
            result
                .write_to_bytes()
                .expect("encoding a BootstrapResult cannot fail")
        }
    })
}

/// Prints the reply; containerd reads stdout until EOF.
pub fn reply(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::Action;

    fn flags() -> Flags {
        Flags {
            namespace: "k8s.io".into(),
            id: "c1".into(),
            address: "/run/containerd/containerd.sock".into(),
            publish_binary: String::new(),
            bundle: String::new(),
            socket: String::new(),
            debug: false,
            action: Action::Start,
        }
    }

    #[test]
    fn socket_address_matches_containerd_layout() {
        let a = socket_address(
            SOCKET_ROOT,
            "/run/containerd/containerd.sock",
            "default",
            "c1",
        );
        assert!(a.starts_with("unix:///run/containerd/s/"));
        assert_eq!(a.len(), "unix:///run/containerd/s/".len() + 64);
        // Same inputs, same socket: grouping relies on it.
        assert_eq!(
            a,
            socket_address(
                SOCKET_ROOT,
                "/run/containerd/containerd.sock",
                "default",
                "c1"
            )
        );
        assert_ne!(
            a,
            socket_address(
                SOCKET_ROOT,
                "/run/containerd/containerd.sock",
                "k8s.io",
                "c1"
            )
        );
    }

    #[test]
    fn containers_of_a_pod_group_by_sandbox_id() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.json"),
            r#"{"annotations":{"io.kubernetes.cri.container-type":"container","io.kubernetes.cri.sandbox-id":"sb1"}}"#,
        )
        .unwrap();
        assert_eq!(grouping_id(dir.path(), "c1"), "sb1");
    }

    #[test]
    fn plain_containers_and_unreadable_specs_group_by_their_own_id() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(grouping_id(dir.path(), "c1"), "c1");
        std::fs::write(dir.path().join("config.json"), "{not json").unwrap();
        assert_eq!(grouping_id(dir.path(), "c1"), "c1");
    }

    #[test]
    fn legacy_stdin_is_not_mistaken_for_bootstrap() {
        assert_eq!(detect_protocol(b"", &flags()), Protocol::Legacy);
        // An Any with runtime options, as containerd 1.6 may write it.
        assert_eq!(
            detect_protocol(b"\n\x19runtimeoptions.v1.Options\x12\x00", &flags()),
            Protocol::Legacy
        );
    }

    #[test]
    fn bootstrap_params_for_this_instance_select_bootstrap() {
        let mut p = BootstrapParams::new();
        p.instance_id = "c1".into();
        p.namespace = "k8s.io".into();
        p.containerd_ttrpc_address = "/run/containerd/containerd.sock.ttrpc".into();
        let bytes = p.write_to_bytes().unwrap();
        assert!(matches!(
            detect_protocol(&bytes, &flags()),
            Protocol::Bootstrap(_)
        ));
    }

    #[test]
    fn live_socket_is_reused_and_stale_socket_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let address = format!("unix://{}/s/sock", dir.path().display());
        let first = bind_or_reuse(&address).unwrap().expect("fresh bind");
        assert!(
            bind_or_reuse(&address).unwrap().is_none(),
            "live socket must be reused"
        );
        drop(first); // the socket file stays behind, nobody listens
        assert!(
            bind_or_reuse(&address).unwrap().is_some(),
            "stale socket must be replaced"
        );
    }
}
