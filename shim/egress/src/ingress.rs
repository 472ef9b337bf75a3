//! Published ports: a listener on the host side (in the pod's or container's network
//! namespace, where Services, the kubelet's probes, CRI port-forward and the engines' own port
//! mappings deliver), and every connection it accepts carried over the forwarder to the same
//! port on the sandbox's loopback (CONNECT in the forwarder's protocol). The sandbox keeps
//! `--network=none`, and it never opens a listener on the host by itself: the shim opens one
//! per port the container publishes and the policy allows.
//!
//! Each connection is one audit record (`ingress-connection`: peer, port, bytes each way,
//! duration, how it ended), within per-sandbox caps of the same kinds egress has: connections
//! open at once, new per second, and bytes. A connection that cannot be carried (a cap, no
//! forwarder ready, nothing listening inside) is reset at once and recorded: the client sees a
//! refusal, never a hang.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

use crate::audit::{EgressAudit, EgressAuditSink, EgressEvent, IngressRecord, SandboxRef, Verdict};
use crate::caps::{CapRefusal, ConnectionCaps, Slot};
use crate::mux::{Connector, Inbound, MuxStream};

/// The caps of one sandbox's published ports, together.
#[derive(Debug, Clone, Copy)]
pub struct IngressLimits {
    pub max_connections: u32,
    pub max_connection_rate: u32,
    /// Bytes both ways over every connection of the sandbox's life; crossing it cuts them all.
    pub max_bytes: u64,
    /// The most a connection may go without a byte either way.
    pub idle: Duration,
}

/// The forwarder's connector while one is ready; `None` between a death and the next HELLO.
pub type ConnectorWatch = watch::Receiver<Option<Connector>>;

/// One sandbox's published ports.
pub struct Ingress {
    sandbox: SandboxRef,
    audit: Arc<dyn EgressAuditSink>,
    limits: IngressLimits,
    caps: ConnectionCaps,
    connector: ConnectorWatch,
    used: AtomicU64,
    cap_crossed: AtomicBool,
    cap_cut: Notify,
}

/// Why a connection was refused, or how a carried one ended when not by both sides closing.
struct Stop {
    rule: &'static str,
    reason: String,
}

impl Ingress {
    pub fn new(
        sandbox: SandboxRef,
        audit: Arc<dyn EgressAuditSink>,
        limits: IngressLimits,
        connector: ConnectorWatch,
    ) -> Ingress {
        Ingress {
            sandbox,
            audit,
            caps: ConnectionCaps::new(limits.max_connections, limits.max_connection_rate),
            limits,
            connector,
            used: AtomicU64::new(0),
            cap_crossed: AtomicBool::new(false),
            cap_cut: Notify::new(),
        }
    }

    /// Accepts on `listener` for as long as the task runs, carrying each connection to
    /// `port` inside. Abort the task to stop listening (open connections end with the
    /// forwarder's session).
    pub async fn serve(self: Arc<Self>, listener: TcpListener, port: u16) {
        let listen = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning on the same error.
                    log::warn!("ingress {listen}: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let me = self.clone();
            let listen = listen.clone();
            tokio::spawn(async move { me.carry(tcp, peer, listen, port).await });
        }
    }

    async fn carry(self: Arc<Self>, tcp: TcpStream, peer: SocketAddr, listen: String, port: u16) {
        let started = Instant::now();
        let mut rec = IngressRecord {
            peer: peer.to_string(),
            listen,
            port,
            verdict: Verdict::Allowed,
            rule: format!("published port {port}"),
            reason: None,
            bytes_in: 0,
            bytes_out: 0,
            duration_ms: 0,
        };
        let ended = match self.admit(port, &rec.peer).await {
            Err(stop) => {
                reset(tcp);
                Err((Verdict::Denied, stop))
            }
            Ok((_slot, stream)) => self
                .relay(tcp, stream, &mut rec)
                .await
                .map_err(|stop| (Verdict::Cut, stop)),
        };
        if let Err((verdict, stop)) = ended {
            rec.verdict = verdict;
            rec.rule = stop.rule.to_string();
            rec.reason = Some(stop.reason);
        }
        rec.duration_ms = started.elapsed().as_millis() as u64;
        self.audit.record(EgressAudit {
            sandbox: self.sandbox.clone(),
            event: EgressEvent::IngressConnection(rec),
        });
    }

    /// What a connection needs before bytes flow (a slot under the caps, the byte cap not
    /// crossed, a forwarder, the sandbox's answer), or the rule that refused it.
    async fn admit(&self, port: u16, peer: &str) -> Result<(Slot, MuxStream), Stop> {
        let slot = self.caps.admit().map_err(|refusal| match refusal {
            CapRefusal::Open { max } => Stop {
                rule: "max_connections",
                reason: format!("{max} connections to the sandbox's published ports are open"),
            },
            CapRefusal::Rate { per_second } => Stop {
                rule: "max_connection_rate",
                reason: format!("more than {per_second} new connections in the last second"),
            },
        })?;
        if self.cap_crossed.load(Ordering::Acquire) {
            return Err(self.byte_cap());
        }
        let Some(connector) = self.connector.borrow().clone() else {
            return Err(Stop {
                rule: "forwarder",
                reason: "no forwarder is running in the sandbox".into(),
            });
        };
        let stream = connector
            .connect(port, peer.to_string())
            .await
            .map_err(|e| Stop {
                rule: "sandbox",
                reason: e.to_string(),
            })?;
        Ok((slot, stream))
    }

    /// The byte cap's refusal or cut.
    fn byte_cap(&self) -> Stop {
        Stop {
            rule: "max_bytes",
            reason: format!(
                "the sandbox's published ports carried their {} bytes",
                self.limits.max_bytes
            ),
        }
    }

    /// Counts `n` bytes against the sandbox's ingress byte cap: false once it is crossed
    /// (every carried connection is cut then).
    fn charge(&self, n: usize) -> bool {
        let total = self.used.fetch_add(n as u64, Ordering::AcqRel) + n as u64;
        if total <= self.limits.max_bytes {
            return true;
        }
        if !self.cap_crossed.swap(true, Ordering::AcqRel) {
            self.cap_cut.notify_waiters();
        }
        false
    }

    /// Carries bytes both ways until both sides closed; a reset, a stall or the byte cap ends
    /// both directions.
    async fn relay(
        &self,
        tcp: TcpStream,
        mut stream: MuxStream,
        rec: &mut IngressRecord,
    ) -> Result<(), Stop> {
        let cut = self.cap_cut.notified();
        tokio::pin!(cut);
        cut.as_mut().enable();
        let (mut tcp_r, mut tcp_w) = tcp.into_split();
        let (reader, writer) = stream.halves();
        let bytes_in = AtomicU64::new(0);
        let bytes_out = AtomicU64::new(0);
        // The last time a byte moved either way, in ms since `start`.
        let start = Instant::now();
        let moved = AtomicU64::new(0);
        let touch = || moved.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        let inward = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match tcp_r.read(&mut buf).await {
                    Ok(0) => {
                        writer.send_eof();
                        return Ok(());
                    }
                    Ok(n) => {
                        if !self.charge(n) {
                            return Err(self.byte_cap());
                        }
                        writer.send(&buf[..n]).await.map_err(|_| Stop {
                            rule: "sandbox",
                            reason: "the connection inside the sandbox is gone".into(),
                        })?;
                        bytes_in.fetch_add(n as u64, Ordering::Relaxed);
                        touch();
                    }
                    Err(e) => {
                        return Err(Stop {
                            rule: "client",
                            reason: format!("the client's connection failed: {e}"),
                        })
                    }
                }
            }
        };
        let outward = async {
            loop {
                match reader.recv().await {
                    Inbound::Data(d) => {
                        if !self.charge(d.len()) {
                            return Err(self.byte_cap());
                        }
                        tcp_w.write_all(&d).await.map_err(|e| Stop {
                            rule: "client",
                            reason: format!("the client's connection failed: {e}"),
                        })?;
                        bytes_out.fetch_add(d.len() as u64, Ordering::Relaxed);
                        reader.consumed(d.len());
                        touch();
                    }
                    Inbound::Eof => {
                        let _ = tcp_w.shutdown().await;
                        return Ok(());
                    }
                    Inbound::Reset => {
                        return Err(Stop {
                            rule: "sandbox",
                            reason: "the connection inside the sandbox was reset".into(),
                        })
                    }
                }
            }
        };
        let idle = async {
            loop {
                let since = start
                    .elapsed()
                    .saturating_sub(Duration::from_millis(moved.load(Ordering::Relaxed)));
                if since >= self.limits.idle {
                    return Stop {
                        rule: "idle",
                        reason: format!(
                            "nothing moved either way for {} s",
                            self.limits.idle.as_secs()
                        ),
                    };
                }
                tokio::time::sleep(self.limits.idle - since).await;
            }
        };
        let both = async { tokio::try_join!(inward, outward).map(drop) };
        let ended = tokio::select! {
            ended = both => ended,
            cut = idle => Err(cut),
            () = &mut cut => Err(self.byte_cap()),
        };
        rec.bytes_in = bytes_in.load(Ordering::Relaxed);
        rec.bytes_out = bytes_out.load(Ordering::Relaxed);
        if ended.is_err() {
            stream.reset();
            if let Ok(tcp) = tcp_r.reunite(tcp_w) {
                reset(tcp);
            }
        }
        ended
    }
}

/// A listening socket for a published port at `addr`, in the network namespace at `netns` (the
/// pod's or container's; `None`: this process's). Made by the shim, which may bind any port
/// there; the socket keeps its namespace wherever it is served from afterwards (a confined
/// proxy process gives up the right to bind low ports).
pub fn listen_in_netns(
    netns: Option<&std::path::Path>,
    addr: SocketAddr,
) -> std::io::Result<std::net::TcpListener> {
    use nix::sys::socket::{bind, listen, setsockopt, sockopt, Backlog, SockaddrStorage};
    let fd = match netns {
        Some(path) => crate::net::socket_in_netns(path, addr.is_ipv4())?,
        None => {
            let l = std::net::TcpListener::bind(addr)?;
            l.set_nonblocking(true)?;
            return Ok(l);
        }
    };
    // A port a client just left (TIME_WAIT) is bound again at once after a restart.
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(addr),
    )?;
    listen(&fd, Backlog::new(128).map_err(std::io::Error::from)?)?;
    Ok(std::net::TcpListener::from(fd))
}

/// Ends a client's connection with a reset, so it learns at once that nothing serves it. A
/// zero linger makes the close send RST and return at once (tokio deprecates `set_linger`
/// for the blocking a non-zero linger causes; zero never blocks).
fn reset(tcp: TcpStream) {
    let off = nix::sys::socket::sockopt::Linger;
    let zero = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = nix::sys::socket::setsockopt(&tcp, off, &zero);
    drop(tcp);
}

#[cfg(test)]
#[path = "ingress_tests.rs"]
mod tests;
