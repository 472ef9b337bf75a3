//! The proxy process: started by the shim with [`super::PROXY_ARG`], it receives the
//! forwarder's pipes and its configuration over its stdin (a socket to the shim), gives up
//! its privileges (`confine`), and serves one forwarder session with the same [`Proxy`] the
//! shim used to run in itself. Its audit records, lookups and credential values go over the
//! socket; it ends with the session, or when the shim closes its side.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use policy_injector::egress::CredentialPlan;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use super::confine;
use super::wire::{self, Config, FromProxy, ToProxy};
use crate::audit::{EgressAudit, EgressAuditSink, EgressEvent};
use crate::credentials::{CaMaterial, CredentialError, CredentialValues, SandboxCa, Secret};
use crate::guard::Guard;
use crate::mux::{Opened, Session};
use crate::net::{NetnsDialer, Resolver};
use crate::proxy::Proxy;

/// How long the connections of an ended session may take to write their records.
const DRAIN: Duration = Duration::from_secs(2);

/// The process's whole life; its error is printed to the shim's log by the caller.
pub fn run() -> io::Result<()> {
    let sock = io::stdin().as_fd().try_clone_to_owned()?;
    let (fwd_stdin, fwd_stdout) = receive_pipes(&sock)?;
    let sock = std::os::unix::net::UnixStream::from(sock);
    let mut config = read_config(&sock)?;
    if let Some(ns) = &config.netns {
        confine::enter_netns(ns)?;
    }
    // `ps` shows it by name rather than as `exe`.
    let _ = nix::sys::prctl::set_name(c"gvh-egress");
    confine::drop_privileges(config.uid)?;
    confine::install_seccomp()?;
    let ca = config.ca.take();
    // Two workers: one sandbox's connections; nothing here blocks (lookups are the shim's).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(serve(config, ca, sock, fwd_stdin, fwd_stdout))
}

/// The forwarder's stdin and stdout, sent with the first byte on the socket.
fn receive_pipes(sock: &OwnedFd) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| io::Error::other(format!("receiving the forwarder's pipes: {e}")))?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(io::Error::other)? {
        if let ControlMessageOwned::ScmRights(r) = c {
            // SAFETY: descriptors just received with SCM_RIGHTS belong to this process and
            // to nothing else in it.
            fds.extend(r.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next()) {
        (Some(stdin), Some(stdout), None) => Ok((stdin, stdout)),
        _ => Err(io::Error::other(
            "the shim sent other than the forwarder's two pipes",
        )),
    }
}

fn read_config(sock: &std::os::unix::net::UnixStream) -> io::Result<Config> {
    let mut r = io::BufReader::new(sock);
    let mut line = Vec::new();
    io::Read::take(&mut r, wire::MAX_TO_PROXY as u64).read_until(b'\n', &mut line)?;
    if !r.buffer().is_empty() {
        return Err(io::Error::other(
            "the shim sent more than its configuration",
        ));
    }
    serde_json::from_slice(&line).map_err(|e| io::Error::other(format!("the configuration: {e}")))
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<ToProxy>>>>;

/// The shim, as this process's resolver, credential store and audit sink.
struct Link {
    out: mpsc::UnboundedSender<Vec<u8>>,
    pending: Pending,
    next: AtomicU64,
}

impl Link {
    async fn ask(&self, make: impl FnOnce(u64) -> FromProxy) -> io::Result<ToProxy> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        self.out
            .send(wire::line(&make(id)))
            .map_err(|_| io::Error::other("the shim's socket is closed"))?;
        rx.await
            .map_err(|_| io::Error::other("the shim closed the socket before answering"))
    }
}

#[async_trait]
impl Resolver for Link {
    async fn resolve(&self, host: &str) -> io::Result<Vec<std::net::IpAddr>> {
        let host = host.to_string();
        match self.ask(|id| FromProxy::Resolve { id, host }).await? {
            ToProxy::Resolved { answer, .. } => answer.map_err(io::Error::other),
            other => Err(io::Error::other(format!(
                "a lookup answered with {other:?}"
            ))),
        }
    }
}

#[async_trait]
impl CredentialValues for Link {
    async fn value(
        &self,
        host: &str,
        port: u16,
        cred: &CredentialPlan,
    ) -> Result<Secret, CredentialError> {
        let fail = |why: String| CredentialError::Value {
            host: host.to_string(),
            path: cred.file.clone(),
            why,
        };
        let h = host.to_string();
        match self
            .ask(|id| FromProxy::Value { id, host: h, port })
            .await
            .map_err(|e| fail(e.to_string()))?
        {
            ToProxy::Value {
                answer: Ok(mut v), ..
            } => Ok(Secret::received(std::mem::take(&mut v.0))),
            ToProxy::Value { answer: Err(e), .. } => Err(fail(e)),
            _ => Err(fail("answered with something else".into())),
        }
    }
}

impl EgressAuditSink for Link {
    fn record(&self, rec: EgressAudit) {
        let _ = self
            .out
            .send(wire::line(&FromProxy::Event { event: rec.event }));
    }
}

/// The shim's answers, until it closes its side (`closed` then turns true).
async fn read_answers(
    mut r: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    pending: Pending,
    closed: watch::Sender<bool>,
) {
    loop {
        let line = match wire::read_line(&mut r, wire::MAX_TO_PROXY).await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                eprintln!("gvisor-hardened egress proxy: reading from the shim: {e}");
                break;
            }
        };
        let msg: ToProxy = match serde_json::from_slice(&line) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("gvisor-hardened egress proxy: a message from the shim: {e}");
                break;
            }
        };
        let id = match &msg {
            ToProxy::Resolved { id, .. } | ToProxy::Value { id, .. } => *id,
        };
        let waiter = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Some(w) = waiter {
            let _ = w.send(msg);
        }
    }
    // Whatever still waits gets an error (its sender dropped).
    pending.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let _ = closed.send(true);
}

/// Lines to the shim, in order, until an empty one says the process is done.
async fn write_lines(
    mut w: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(line) = rx.recv().await {
        if line.is_empty() || w.write_all(&line).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

async fn serve(
    config: Config,
    material: Option<CaMaterial>,
    sock: std::os::unix::net::UnixStream,
    fwd_stdin: OwnedFd,
    fwd_stdout: OwnedFd,
) -> io::Result<()> {
    sock.set_nonblocking(true)?;
    let (rd, wr) = tokio::net::UnixStream::from_std(sock)?.into_split();
    let (out, out_rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_lines(wr, out_rx));
    let pending: Pending = Arc::default();
    let (closed_tx, mut closed) = watch::channel(false);
    tokio::spawn(read_answers(
        tokio::io::BufReader::new(rd),
        pending.clone(),
        closed_tx,
    ));
    let link = Arc::new(Link {
        out: out.clone(),
        pending,
        next: AtomicU64::new(1),
    });
    let ca = match material.as_ref().map(SandboxCa::from_material).transpose() {
        Ok(ca) => ca.map(Arc::new),
        Err(e) => {
            // Without it, credential hosts are refused (never tunnelled).
            eprintln!("gvisor-hardened egress proxy: {e}");
            None
        }
    };
    // The key's text is zeroed; the signer keeps the key.
    drop(material);
    let Config {
        plan,
        sandbox,
        node_addresses,
        hello_timeout_ms,
        anchors,
        attempt,
        ..
    } = config;
    let guard = Guard::new(plan.allow_cidrs.clone(), node_addresses);
    let proxy = Arc::new(
        Proxy::new(
            plan,
            guard,
            sandbox,
            link.clone(),
            // Already in the pod's namespace.
            Arc::new(NetnsDialer::new(None, Duration::from_secs(10))),
            link.clone(),
        )
        .with_received_credentials(
            ca,
            anchors.unwrap_or_else(|| Err("no upstream trust anchors were sent".into())),
            link.clone(),
        ),
    );
    let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(fwd_stdin)?;
    let stdout = tokio::net::unix::pipe::Receiver::from_owned_fd(fwd_stdout)?;
    let mut session = Session::new(stdout, stdin);
    let mut connections = JoinSet::new();
    let hello = tokio::select! {
        h = tokio::time::timeout(Duration::from_millis(hello_timeout_ms), session.hello()) => match h {
            Ok(Ok(listen)) => Ok(listen),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no HELLO within {hello_timeout_ms} ms")),
        },
        _ = closed.wait_for(|c| *c) => Err("stopped".into()),
    };
    let reason = match hello {
        Err(reason) => reason,
        Ok(listen) => {
            proxy.emit(EgressEvent::ForwarderReady { listen, attempt });
            // Set-up ran most of this binary; serving runs little of it (text_pages.rs).
            gvisor_hardened_proc::text_pages::drop_when_quiet();
            let serving = proxy.clone();
            let end = tokio::select! {
                end = session.run(|opened| match opened {
                    Opened::Stream(s) => {
                        while connections.try_join_next().is_some() {}
                        let _ = out.send(wire::line(&FromProxy::Opened {
                            peer: s.peer().to_string(),
                        }));
                        connections.spawn(serving.clone().serve(s));
                    }
                    Opened::Refused { peer } => serving.refused_by_forwarder(peer),
                }) => end.to_string(),
                _ = closed.wait_for(|c| *c) => "stopped".into(),
            };
            session.reset_all();
            end
        }
    };
    drop(session);
    // Every connection's record before the session's end (reset streams end at once).
    let _ = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    let _ = out.send(wire::line(&FromProxy::Ended { reason }));
    let _ = out.send(Vec::new());
    let _ = tokio::time::timeout(DRAIN, writer).await;
    Ok(())
}
