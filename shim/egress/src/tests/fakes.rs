//! Fakes for the egress tests: a forwarder speaking the real codec over in-memory pipes, a
//! resolver with a fixed table, a dialer that lands on loopback upstreams, and upstreams.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gvisor_hardened_forwarder::{decode, Frame, VERSION};
use policy_injector::{EgressPlan, Policy};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::audit::{ConnectionRecord, EgressEvent, MemorySink, SandboxRef};
use crate::guard::Guard;
use crate::net::{Dialer, Resolver};
use crate::proxy::{Proxy, Timeouts};
use crate::supervisor::{
    EgressSupervisor, ForwarderIo, ForwarderPipes, ForwarderSpawner, SupervisorOptions,
};

const WAIT: Duration = Duration::from_secs(10);

/// A policy with egress on for `api.example.test:443`, plus `extra` lines in the section.
pub fn policy(extra: &[&str]) -> EgressPlan {
    let mut section = String::from("[network.egress]\n");
    if !extra.iter().any(|l| l.starts_with("allow =")) {
        section.push_str("allow = [\"api.example.test\", \"*.example.test\"]\n");
    }
    for l in extra {
        section.push_str(l);
        section.push('\n');
    }
    let p = Policy::from_toml_str(&section).unwrap_or_else(|e| panic!("{section}: {e}"));
    EgressPlan::from_policy(&p.network.egress).unwrap().unwrap()
}

/// A minimal TLS ClientHello; an empty name leaves the SNI extension out.
pub fn client_hello(name: &str) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(&[1; 32]);
    body.push(0);
    body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
    let mut ext = Vec::new();
    if !name.is_empty() {
        let n = name.len() as u16;
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&(n + 5).to_be_bytes());
        ext.extend_from_slice(&(n + 3).to_be_bytes());
        ext.push(0);
        ext.extend_from_slice(&n.to_be_bytes());
        ext.extend_from_slice(name.as_bytes());
    }
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut msg = vec![1, 0];
    msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
    msg.extend_from_slice(&body);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    rec.extend_from_slice(&msg);
    rec
}

#[derive(Default)]
struct FakeResolver {
    asked: Mutex<Vec<String>>,
}

#[async_trait]
impl Resolver for FakeResolver {
    async fn resolve(&self, host: &str) -> io::Result<Vec<IpAddr>> {
        self.asked.lock().unwrap().push(host.to_string());
        if host == "slow.example.test" {
            // A lookup that never answers: the proxy is busy and reads nothing meanwhile.
            std::future::pending::<()>().await;
        }
        let ip = match host {
            "api.example.test" => "203.0.113.10",
            "loop.example.test" => "127.0.0.1",
            "meta.example.test" => "169.254.169.254",
            "lan.example.test" => "10.1.2.3",
            _ => return Err(io::Error::new(io::ErrorKind::NotFound, "no such host")),
        };
        Ok(vec![ip.parse().unwrap()])
    }
}

/// Records the checked address and connects to the test's upstream instead.
struct FakeDialer {
    upstream: SocketAddr,
    dialed: Mutex<Vec<SocketAddr>>,
    /// A small send buffer, so that a stalled upstream blocks the proxy's writes early.
    small_buffer: bool,
}

#[async_trait]
impl Dialer for FakeDialer {
    async fn dial(&self, addr: SocketAddr) -> io::Result<TcpStream> {
        self.dialed.lock().unwrap().push(addr);
        let socket = tokio::net::TcpSocket::new_v4()?;
        if self.small_buffer {
            socket.set_send_buffer_size(4096)?;
        }
        socket.connect(self.upstream).await
    }
}

/// The forwarder's end of one fake forwarder process.
struct FakeEnd {
    r: ReadHalf<DuplexStream>,
    w: WriteHalf<DuplexStream>,
    exit: oneshot::Sender<String>,
}

struct FakeSpawner {
    tx: mpsc::UnboundedSender<FakeEnd>,
    /// Kills that ran to their end (each takes a moment, as `runsc kill` does).
    kills_done: Arc<std::sync::atomic::AtomicUsize>,
}

#[async_trait]
impl ForwarderSpawner for FakeSpawner {
    async fn spawn(&self) -> io::Result<ForwarderIo> {
        let (host, fake) = tokio::io::duplex(64 * 1024);
        let (host_r, host_w) = tokio::io::split(host);
        let (fake_r, fake_w) = tokio::io::split(fake);
        let (exit, exited) = oneshot::channel::<String>();
        self.tx
            .send(FakeEnd {
                r: fake_r,
                w: fake_w,
                exit,
            })
            .map_err(|_| io::Error::other("test gone"))?;
        // A kill ends the process at once; the killing command itself takes a moment longer
        // to exit, as `runsc kill` does.
        let killed = Arc::new(tokio::sync::Notify::new());
        let done = self.kills_done.clone();
        let killing = killed.clone();
        Ok(ForwarderIo {
            pipes: ForwarderPipes::Streams {
                stdin: Box::new(host_w),
                stdout: Box::new(host_r),
            },
            exited: Box::pin(async move {
                tokio::select! {
                    why = exited => why.unwrap_or_else(|_| "dropped".into()),
                    _ = killed.notified() => "killed".into(),
                }
            }),
            kill: Box::new(move || {
                Box::pin(async move {
                    killing.notify_one();
                    // Within the supervisor's stop grace of 20 ms.
                    tokio::time::sleep(Duration::from_millis(15)).await;
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                })
            }),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Eof,
    Close,
}

#[derive(Default)]
struct StreamBuf {
    data: Vec<u8>,
    end: Option<End>,
    uncredited: u32,
}

/// A fake forwarder: the test plays the workload's connections as frames.
pub struct Fwd {
    pub r: ReadHalf<DuplexStream>,
    pub w: WriteHalf<DuplexStream>,
    exit: Option<oneshot::Sender<String>>,
    inbox: Vec<u8>,
    streams: HashMap<u32, StreamBuf>,
    /// CONNECTs from the host (stream, port), not yet taken by `next_connect`.
    connects: Vec<(u32, u16)>,
    /// Credit every DATA at once, as a forwarder whose sockets keep up does.
    pub auto_credit: bool,
}

impl Fwd {
    pub async fn send(&mut self, f: Frame) {
        self.w.write_all(&f.to_bytes()).await.unwrap();
    }

    pub async fn open(&mut self, id: u32) {
        self.send(Frame::Open {
            stream: id,
            peer: format!("127.0.0.1:{}", 40000 + id),
        })
        .await;
    }

    pub async fn data(&mut self, id: u32, d: &[u8]) {
        self.send(Frame::Data {
            stream: id,
            data: d.to_vec(),
        })
        .await;
    }

    pub async fn eof(&mut self, id: u32) {
        self.send(Frame::Eof { stream: id }).await;
    }

    pub async fn reset(&mut self, id: u32) {
        self.send(Frame::Close { stream: id }).await;
    }

    /// Credits everything received and not yet credited on `id`.
    pub async fn grant(&mut self, id: u32, max: u32) {
        let s = self.streams.entry(id).or_default();
        let bytes = s.uncredited.min(max);
        s.uncredited -= bytes;
        self.send(Frame::Credit { stream: id, bytes }).await;
    }

    /// Bytes received on `id` and not yet taken by a read_* call.
    pub fn pending(&self, id: u32) -> usize {
        self.streams.get(&id).map_or(0, |s| s.data.len())
    }

    async fn pump(&mut self) {
        loop {
            if let Some((f, used)) = decode(&self.inbox).unwrap() {
                self.inbox.drain(..used);
                let credit = match f {
                    Frame::Data { stream, data } => {
                        let s = self.streams.entry(stream).or_default();
                        s.data.extend_from_slice(&data);
                        s.uncredited += data.len() as u32;
                        assert!(
                            s.uncredited <= gvisor_hardened_forwarder::INITIAL_WINDOW,
                            "the host sent beyond the window on stream {stream}"
                        );
                        self.auto_credit.then_some(stream)
                    }
                    Frame::Eof { stream } => {
                        self.streams.entry(stream).or_default().end = Some(End::Eof);
                        None
                    }
                    Frame::Close { stream } => {
                        self.streams.entry(stream).or_default().end = Some(End::Close);
                        None
                    }
                    Frame::Connect { stream, port } => {
                        self.connects.push((stream, port));
                        None
                    }
                    _ => None,
                };
                if let Some(id) = credit {
                    self.grant(id, u32::MAX).await;
                }
                return;
            }
            let mut buf = vec![0u8; 64 * 1024];
            let n = tokio::time::timeout(WAIT, self.r.read(&mut buf))
                .await
                .expect("a frame from the host in time")
                .unwrap();
            assert!(n > 0, "the host closed the forwarder's stdin");
            self.inbox.extend_from_slice(&buf[..n]);
        }
    }

    /// The host's next CONNECT: its stream and port.
    pub async fn next_connect(&mut self) -> (u32, u16) {
        while self.connects.is_empty() {
            self.pump().await;
        }
        self.connects.remove(0)
    }

    /// Reads stream `id` through the first `pat`.
    pub async fn read_until(&mut self, id: u32, pat: &[u8]) -> Vec<u8> {
        loop {
            let s = self.streams.entry(id).or_default();
            if let Some(i) = s.data.windows(pat.len()).position(|w| w == pat) {
                return s.data.drain(..i + pat.len()).collect();
            }
            assert!(s.end.is_none(), "stream {id} ended before {pat:?}");
            self.pump().await;
        }
    }

    /// Waits until at least `n` bytes of stream `id` are pending.
    pub async fn wait_pending(&mut self, id: u32, n: usize) {
        while self.pending(id) < n {
            self.pump().await;
        }
    }

    /// Reads stream `id` to its EOF or CLOSE; after an EOF the workload hangs up too, as an
    /// HTTP client does once the server closed (the proxy lingers until then).
    pub async fn read_to_end(&mut self, id: u32) -> (Vec<u8>, End) {
        loop {
            let s = self.streams.entry(id).or_default();
            if let Some(end) = s.end {
                let data = std::mem::take(&mut s.data);
                if end == End::Eof {
                    self.eof(id).await;
                }
                return (data, end);
            }
            self.pump().await;
        }
    }

    /// Serves streams to real clients (TLS): each [`Streams::connect`] opens a stream, sends
    /// its CONNECT head and hands back the answer's head and a byte stream; a task carries
    /// what the client writes as DATA (its shutdown as EOF) and what the host sends back, to
    /// its EOF or CLOSE.
    pub fn into_streams(mut self) -> Streams {
        let (tx, mut cmds) = mpsc::unbounded_channel::<StreamRequest>();
        let (from_tx, mut from_clients) = mpsc::unbounded_channel::<(u32, Option<Vec<u8>>)>();
        tokio::spawn(async move {
            let mut writers: HashMap<u32, WriteHalf<DuplexStream>> = HashMap::new();
            loop {
                let ids: Vec<u32> = writers.keys().copied().collect();
                for id in ids {
                    let s = self.streams.entry(id).or_default();
                    let pending = std::mem::take(&mut s.data);
                    let ended = s.end.is_some();
                    let w = writers.get_mut(&id).unwrap();
                    if !pending.is_empty() {
                        let _ = w.write_all(&pending).await;
                    }
                    if ended {
                        let _ = w.shutdown().await;
                        writers.remove(&id);
                    }
                }
                tokio::select! {
                    cmd = cmds.recv() => {
                        let Some((id, head, reply)) = cmd else { return };
                        self.open(id).await;
                        self.data(id, &head).await;
                        let answer = self.read_until(id, b"\r\n\r\n").await;
                        let (client, ours) = tokio::io::duplex(64 * 1024);
                        let (mut r, w) = tokio::io::split(ours);
                        writers.insert(id, w);
                        let from = from_tx.clone();
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                match r.read(&mut buf).await {
                                    Ok(0) | Err(_) => {
                                        let _ = from.send((id, None));
                                        return;
                                    }
                                    Ok(n) => {
                                        if from.send((id, Some(buf[..n].to_vec()))).is_err() {
                                            return;
                                        }
                                    }
                                }
                            }
                        });
                        let _ = reply.send((answer, client));
                    }
                    m = from_clients.recv() => match m {
                        Some((id, Some(d))) => self.data(id, &d).await,
                        Some((id, None)) => self.eof(id).await,
                        None => return,
                    },
                    () = self.pump(), if !writers.is_empty() => {}
                }
            }
        });
        Streams { tx }
    }

    /// The forwarder process dies: its host process exits and its stdout closes.
    pub async fn die(&mut self, why: &str) {
        let _ = self.exit.take().unwrap().send(why.to_string());
        let _ = self.w.shutdown().await;
    }
}

type StreamRequest = (u32, Vec<u8>, oneshot::Sender<(Vec<u8>, DuplexStream)>);

/// Opens streams through a fake forwarder for real clients ([`Fwd::into_streams`]).
pub struct Streams {
    tx: mpsc::UnboundedSender<StreamRequest>,
}

impl Streams {
    /// Opens stream `id`, sends `head`; the answer's head and the stream after it.
    pub async fn connect(&self, id: u32, head: &[u8]) -> (Vec<u8>, DuplexStream) {
        let (reply, rx) = oneshot::channel();
        self.tx.send((id, head.to_vec(), reply)).unwrap();
        tokio::time::timeout(WAIT, rx).await.unwrap().unwrap()
    }
}

/// Upstream servers on loopback.
pub struct Upstream {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<u8>>>,
    closed: Arc<AtomicBool>,
}

impl Upstream {
    async fn serve<F, Fut>(f: F) -> Upstream
    where
        F: Fn(TcpStream, Arc<Mutex<Vec<u8>>>, Arc<AtomicBool>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let closed = Arc::new(AtomicBool::new(false));
        let (rc, cc) = (received.clone(), closed.clone());
        tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                tokio::spawn(f(s, rc.clone(), cc.clone()));
            }
        });
        Upstream {
            addr,
            received,
            closed,
        }
    }

    /// Reads to EOF, answers with the bytes upper-cased.
    pub async fn echo_upper() -> Upstream {
        Self::serve(|mut s, _, _| async move {
            let mut all = Vec::new();
            let _ = s.read_to_end(&mut all).await;
            let _ = s.write_all(&all.to_ascii_uppercase()).await;
        })
        .await
    }

    /// Records a request head and answers 200.
    pub async fn recorder() -> Upstream {
        Self::serve(|mut s, rec, _| async move {
            let mut all = Vec::new();
            let mut buf = [0u8; 4096];
            while !all.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => all.extend_from_slice(&buf[..n]),
                }
            }
            *rec.lock().unwrap() = all;
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
        })
        .await
    }

    /// Sends `n` bytes at once and closes.
    pub async fn flood(n: usize) -> Upstream {
        Self::serve(move |mut s, _, _| async move {
            let _ = s.write_all(&vec![b'z'; n]).await;
        })
        .await
    }

    /// Accepts with a small receive buffer and never reads: an upstream that stalls.
    pub async fn stall() -> Upstream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let l = socket.listen(16).unwrap();
        let addr = l.local_addr().unwrap();
        let closed = Arc::new(AtomicBool::new(false));
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        Upstream {
            addr,
            received: Arc::new(Mutex::new(Vec::new())),
            closed,
        }
    }

    /// Holds each connection until the other side ends it.
    pub async fn hold() -> Upstream {
        Self::serve(|mut s, _, closed| async move {
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            closed.store(true, Ordering::Release);
        })
        .await
    }

    pub async fn received(&self) -> Vec<u8> {
        self.received.lock().unwrap().clone()
    }

    pub async fn wait_closed(&self) {
        poll(|| self.closed.load(Ordering::Acquire).then_some(())).await;
    }
}

/// Polls `f` until it answers, with a deadline.
pub async fn poll<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met in time"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The proxy and supervisor under test, with their fakes.
pub struct World {
    sup: Option<EgressSupervisor>,
    ends: mpsc::UnboundedReceiver<FakeEnd>,
    sink: Arc<MemorySink>,
    resolver: Arc<FakeResolver>,
    dialer: Arc<FakeDialer>,
    seen: usize,
    /// What the supervisor is told about the sandbox: `false` once the test ends it.
    running: Arc<std::sync::atomic::AtomicBool>,
    kills_done: Arc<std::sync::atomic::AtomicUsize>,
}

impl World {
    /// The sandbox the forwarder runs in has ended (as a normal exit does, before the shim stops
    /// egress).
    pub fn end_sandbox(&self) {
        self.running
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    pub async fn new(plan: &EgressPlan, up: &Upstream) -> World {
        Self::build(plan, up.addr, None, None).await
    }

    /// A world whose proxy has the sandbox CA `ca` for the plan's credential hosts, dialling
    /// `upstream` for every address.
    pub async fn with_credentials(
        plan: &EgressPlan,
        upstream: SocketAddr,
        ca: Option<Arc<crate::credentials::SandboxCa>>,
    ) -> World {
        Self::build(plan, upstream, None, Some(ca)).await
    }

    /// A world whose proxy has `timeouts` and dials with a small send buffer.
    pub async fn with_timeouts(plan: &EgressPlan, up: &Upstream, timeouts: Timeouts) -> World {
        Self::build(plan, up.addr, Some(timeouts), None).await
    }

    async fn build(
        plan: &EgressPlan,
        upstream: SocketAddr,
        timeouts: Option<Timeouts>,
        ca: Option<Option<Arc<crate::credentials::SandboxCa>>>,
    ) -> World {
        let (tx, ends) = mpsc::unbounded_channel();
        let sink = Arc::new(MemorySink::default());
        let resolver = Arc::new(FakeResolver::default());
        let dialer = Arc::new(FakeDialer {
            upstream,
            dialed: Mutex::new(Vec::new()),
            small_buffer: timeouts.is_some(),
        });
        let proxy = Proxy::new(
            plan.clone(),
            Guard::new(plan.allow_cidrs.clone(), Vec::new()),
            SandboxRef {
                sandbox_id: "sb".into(),
                container_id: "sb".into(),
                policy: "gvisor-hardened-agent".into(),
            },
            resolver.clone(),
            dialer.clone(),
            sink.clone(),
        );
        let proxy = match timeouts {
            Some(t) => proxy.with_timeouts(t),
            None => proxy,
        };
        let proxy = match ca {
            Some(ca) => proxy.with_credentials(ca),
            None => proxy,
        };
        let opts = SupervisorOptions {
            backoff: Duration::from_millis(10),
            // The fake never exits by itself when its stdin closes: do not wait for it.
            stop_grace: Duration::from_millis(20),
            confirm_death: Duration::from_millis(10),
            ..SupervisorOptions::default()
        };
        let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let alive = running.clone();
        let kills_done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sup = EgressSupervisor::start(
            Arc::new(proxy),
            Arc::new(FakeSpawner {
                tx,
                kills_done: kills_done.clone(),
            }),
            opts,
            Arc::new(move || alive.load(std::sync::atomic::Ordering::SeqCst)),
        );
        World {
            sup: Some(sup),
            running,
            kills_done,
            ends,
            sink,
            resolver,
            dialer,
            seen: 0,
        }
    }

    /// How many forwarder kills have run to their end.
    pub fn kills_done(&self) -> usize {
        self.kills_done.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn sup(&self) -> &EgressSupervisor {
        self.sup.as_ref().unwrap()
    }

    /// The next forwarder the supervisor starts, before its HELLO.
    pub async fn forwarder_raw(&mut self) -> Fwd {
        let end = tokio::time::timeout(WAIT, self.ends.recv())
            .await
            .expect("the supervisor starts a forwarder")
            .unwrap();
        Fwd {
            r: end.r,
            w: end.w,
            exit: Some(end.exit),
            inbox: Vec::new(),
            streams: HashMap::new(),
            connects: Vec::new(),
            auto_credit: true,
        }
    }

    /// The next forwarder, after it said HELLO and the supervisor saw it.
    pub async fn forwarder(&mut self) -> Fwd {
        let mut f = self.forwarder_raw().await;
        f.send(Frame::Hello {
            version: VERSION,
            listen: "127.0.0.1:3128".into(),
        })
        .await;
        self.sup().wait_ready(WAIT).await.unwrap();
        f
    }

    pub fn events(&self) -> Vec<EgressEvent> {
        self.sink.events()
    }

    /// The world's audit sink, for more writers (published ports).
    pub fn sink(&self) -> Arc<dyn crate::audit::EgressAuditSink> {
        self.sink.clone()
    }

    /// The next connection record, in order.
    pub async fn connection_record(&mut self) -> ConnectionRecord {
        let seen = self.seen;
        let rec = poll(|| self.sink.connections().get(seen).cloned()).await;
        self.seen += 1;
        rec
    }

    pub fn dialed(&self) -> Vec<SocketAddr> {
        self.dialer.dialed.lock().unwrap().clone()
    }

    pub fn resolved_names(&self) -> Vec<String> {
        self.resolver.asked.lock().unwrap().clone()
    }

    pub async fn stop(mut self) {
        self.sup.take().unwrap().stop().await;
    }

    pub async fn stop_keep_events(mut self) -> Vec<EgressEvent> {
        self.sup.take().unwrap().stop().await;
        self.events()
    }
}
