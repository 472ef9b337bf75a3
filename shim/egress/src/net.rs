//! The proxy's two ways into the network, behind traits so tests can fake them: resolving a
//! name and dialing an address that the guard already checked.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use tokio::net::{TcpSocket, TcpStream};

/// Resolves a host name to addresses. Called only for names on the allowlist.
#[async_trait]
pub trait Resolver: Send + Sync + 'static {
    async fn resolve(&self, host: &str) -> io::Result<Vec<IpAddr>>;
}

/// Connects to exactly the address given (never a name: no second lookup).
#[async_trait]
pub trait Dialer: Send + Sync + 'static {
    async fn dial(&self, addr: SocketAddr) -> io::Result<TcpStream>;
}

/// The host's resolver (getaddrinfo on a blocking thread).
#[derive(Debug, Default, Clone)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        let addrs = tokio::net::lookup_host((host, 0)).await?;
        let mut out: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
        out.dedup();
        Ok(out)
    }
}

/// The network namespace a spec names by path (a CRI pod's, made by the CNI; a Podman
/// container's on a network), if any: the proxy dials from it.
pub fn spec_network_namespace(spec: &serde_json::Value) -> Option<PathBuf> {
    spec.pointer("/linux/namespaces")?
        .as_array()?
        .iter()
        .find(|ns| ns["type"] == "network")?
        .get("path")?
        .as_str()
        .filter(|p| !p.is_empty())
        .map(Into::into)
}

/// Dials from a network namespace: the pod's (CRI: the sandbox spec's netns path, so the pod
/// IP and NetworkPolicies apply to egress) or, with `None`, the shim's own.
#[derive(Debug, Clone)]
pub struct NetnsDialer {
    netns: Option<PathBuf>,
    timeout: Duration,
}

impl NetnsDialer {
    pub fn new(netns: Option<PathBuf>, timeout: Duration) -> NetnsDialer {
        NetnsDialer { netns, timeout }
    }
}

/// A non-blocking TCP socket created inside the network namespace at `path`. A socket keeps
/// the namespace it was created in, so only `socket(2)` runs there: on a short-lived thread,
/// because `setns` changes the calling thread and the shim's runtime threads must stay put.
pub fn socket_in_netns(path: &Path, v4: bool) -> io::Result<OwnedFd> {
    let path = path.to_path_buf();
    std::thread::Builder::new()
        .name("egress-netns".into())
        .spawn(move || -> io::Result<OwnedFd> {
            let ns = std::fs::File::open(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("netns {}: {e}", path.display())))?;
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| io::Error::other(format!("setns {}: {e}", path.display())))?;
            let family = if v4 {
                AddressFamily::Inet
            } else {
                AddressFamily::Inet6
            };
            socket(
                family,
                SockType::Stream,
                SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
                None,
            )
            .map_err(io::Error::from)
        })?
        .join()
        .map_err(|_| io::Error::other("the netns thread panicked"))?
}

#[async_trait]
impl Dialer for NetnsDialer {
    async fn dial(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        let socket = match &self.netns {
            None if addr.is_ipv4() => TcpSocket::new_v4()?,
            None => TcpSocket::new_v6()?,
            Some(path) => {
                let path = path.clone();
                let fd =
                    tokio::task::spawn_blocking(move || socket_in_netns(&path, addr.is_ipv4()))
                        .await
                        .map_err(io::Error::other)??;
                TcpSocket::from_std_stream(std::net::TcpStream::from(fd))
            }
        };
        let stream = tokio::time::timeout(self.timeout, socket.connect(addr))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specs_network_namespace_path_is_found_and_a_new_one_is_none() {
        let named = serde_json::json!({"linux": {"namespaces": [
            {"type": "pid"}, {"type": "network", "path": "/run/netns/cni-1"}
        ]}});
        assert_eq!(
            spec_network_namespace(&named),
            Some(PathBuf::from("/run/netns/cni-1"))
        );
        for spec in [
            serde_json::json!({"linux": {"namespaces": [{"type": "network"}]}}),
            serde_json::json!({"linux": {"namespaces": [{"type": "network", "path": ""}]}}),
            serde_json::json!({}),
        ] {
            assert_eq!(spec_network_namespace(&spec), None, "{spec}");
        }
    }

    #[tokio::test]
    async fn the_host_dialer_connects_to_the_checked_address() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let d = NetnsDialer::new(None, Duration::from_secs(5));
        let s = d.dial(addr).await.unwrap();
        assert_eq!(s.peer_addr().unwrap(), addr);
    }

    /// setns needs CAP_SYS_ADMIN: with the tests that need root (`host-tests`).
    #[cfg(feature = "host-tests")]
    #[tokio::test]
    async fn a_socket_made_in_a_netns_connects_there() {
        // Our own netns by path: the mechanism is the same as for a pod's.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let d = NetnsDialer::new(Some("/proc/self/ns/net".into()), Duration::from_secs(5));
        let s = d.dial(addr).await.unwrap();
        assert_eq!(s.peer_addr().unwrap(), addr);
    }

    #[tokio::test]
    async fn a_missing_netns_is_an_error_naming_it() {
        let d = NetnsDialer::new(Some("/nonexistent/netns".into()), Duration::from_secs(5));
        let e = d.dial("127.0.0.1:1".parse().unwrap()).await.unwrap_err();
        assert!(e.to_string().contains("/nonexistent/netns"), "{e}");
    }
}
