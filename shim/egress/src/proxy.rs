//! The per-sandbox proxy: one workload connection at a time, in this order: read and parse the
//! request head; allowlist; resolve on the host (static `hosts` first); guard every answer;
//! for a tunnel with `require_sni`, read the ClientHello before anything reaches upstream;
//! dial **the address that was checked**; carry bytes both ways within the sandbox's byte cap.
//! Every connection ends in exactly one audit record.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use policy_injector::egress::{first_match, EgressPlan};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

use super::audit::{
    ConnectionRecord, EgressAudit, EgressAuditSink, EgressEvent, LookupSource, SandboxRef, Verdict,
};
use super::caps::{ByteRate, CapRefusal, ConnectionCaps};
use super::guard::Guard;
use super::http::{self, Request, MAX_HEAD};
use super::mux::{Inbound, MuxStream};
use super::net::{Dialer, Resolver};
use super::sni;

mod credential_checks;
mod terminate;

/// A [`Stop`] status meaning the refusal was already answered inside the TLS connection the
/// proxy terminated: the stream is ended, not reset (a reset could drop the answer).
const ANSWERED: u16 = 1;

/// Deadlines: of the steps before bytes flow (a workload that opens a connection and says
/// nothing must not hold a stream forever), and of the flow itself (an upstream that stops
/// reading or a connection where nothing moves must not hold the proxy's sockets and buffers,
/// which are the host's, not the sandbox's).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub head: Duration,
    pub resolve: Duration,
    pub client_hello: Duration,
    /// The most one write may wait on a side that takes nothing (upstream or workload).
    pub write: Duration,
    /// The most a connection may go without a byte from its upstream.
    pub idle: Duration,
    /// Once the workload closed its sending side, the most the upstream may stay silent before
    /// the connection ends. A workload that closed its socket cannot be told from one that
    /// half-closed and waits for the answer: an upstream that keeps answering keeps the
    /// connection, one that never answers (or never reads) no longer holds it for `idle`.
    pub after_close: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            head: Duration::from_secs(30),
            resolve: Duration::from_secs(10),
            client_hello: Duration::from_secs(30),
            write: Duration::from_secs(30),
            // Long enough for a model's slow streamed answer, short of holding sockets for good.
            idle: Duration::from_secs(300),
            // A request's answer starts within seconds once it was sent whole.
            after_close: Duration::from_secs(5),
        }
    }
}

/// One sandbox's proxy; shared by all its streams (and forwarder restarts).
pub struct Proxy {
    plan: EgressPlan,
    guard: Guard,
    sandbox: SandboxRef,
    resolver: Arc<dyn Resolver>,
    dialer: Arc<dyn Dialer>,
    audit: Arc<dyn EgressAuditSink>,
    timeouts: Timeouts,
    caps: ConnectionCaps,
    rate: Option<ByteRate>,
    used: AtomicU64,
    cap_crossed: AtomicBool,
    cap_cut: Notify,
    /// For the plan's credential hosts: the sandbox's CA and the upstream TLS configuration.
    credentials: Option<terminate::Credentials>,
}

/// What a refusal or failure looks like to the workload and to the audit.
struct Stop {
    status: u16,
    verdict: Verdict,
    rule: String,
    reason: String,
}

/// The connection's record, filled in as it goes.
struct Record {
    started: Instant,
    rec: ConnectionRecord,
    /// Bytes the workload sent after a plain request's body, not forwarded.
    held_back: u64,
}

impl Proxy {
    pub fn new(
        plan: EgressPlan,
        guard: Guard,
        sandbox: SandboxRef,
        resolver: Arc<dyn Resolver>,
        dialer: Arc<dyn Dialer>,
        audit: Arc<dyn EgressAuditSink>,
    ) -> Proxy {
        Proxy {
            caps: ConnectionCaps::new(plan.max_connections, plan.max_connection_rate),
            rate: plan.max_rate.map(ByteRate::new),
            plan,
            guard,
            sandbox,
            resolver,
            dialer,
            audit,
            timeouts: Timeouts::default(),
            used: AtomicU64::new(0),
            cap_crossed: AtomicBool::new(false),
            cap_cut: Notify::new(),
            credentials: None,
        }
    }

    /// Where this proxy's records go.
    pub fn audit_sink(&self) -> &Arc<dyn EgressAuditSink> {
        &self.audit
    }

    /// The sandbox's CA made at create (`credentials::prepare_sandbox`): with it the proxy
    /// terminates TLS for the plan's credential hosts and adds their header. Without it (or
    /// without usable upstream trust anchors) a credential host is refused, never tunnelled
    /// without its credential's rules.
    pub fn with_credentials(mut self, ca: Option<Arc<super::credentials::SandboxCa>>) -> Proxy {
        if !self.plan.credentials.is_empty() {
            self.credentials = Some(terminate::Credentials::new(ca, &self.plan));
        }
        self
    }

    /// [`Proxy::with_credentials`] for a confined proxy process: the upstream trust anchors'
    /// text and the credentials' values are the shim's to read.
    pub fn with_received_credentials(
        mut self,
        ca: Option<Arc<super::credentials::SandboxCa>>,
        anchors: Result<String, String>,
        values: Arc<dyn super::credentials::CredentialValues>,
    ) -> Proxy {
        if !self.plan.credentials.is_empty() {
            self.credentials = Some(terminate::Credentials::received(
                ca, &self.plan, anchors, values,
            ));
        }
        self
    }

    /// The resolver the proxy asks (the shim answers a confined proxy's lookups with it).
    pub fn resolver(&self) -> &Arc<dyn Resolver> {
        &self.resolver
    }

    pub fn with_timeouts(mut self, t: Timeouts) -> Proxy {
        self.timeouts = t;
        self
    }

    /// Who this proxy's records are about.
    pub fn sandbox(&self) -> &SandboxRef {
        &self.sandbox
    }

    pub fn plan(&self) -> &EgressPlan {
        &self.plan
    }

    /// Bytes carried so far, both directions.
    pub fn bytes_used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    pub(crate) fn emit(&self, event: EgressEvent) {
        self.audit.record(EgressAudit {
            sandbox: self.sandbox.clone(),
            event,
        });
    }

    fn denied(&self, rule: &str, why: String) -> Stop {
        Stop {
            status: 403,
            verdict: Verdict::Denied,
            rule: rule.to_string(),
            reason: format!("egress denied: {why}"),
        }
    }

    fn policy_name(&self) -> &str {
        &self.sandbox.policy
    }

    /// Connections open through the proxy now.
    pub fn open_connections(&self) -> u32 {
        self.caps.open()
    }

    /// A connection past a cap: answered at once (before its head is read: under a flood the
    /// proxy does no more work per connection than it must) with the cap in the status line.
    fn over_cap(&self, refusal: CapRefusal) -> Stop {
        let (status, rule, why) = match refusal {
            CapRefusal::Open { max } => (
                503,
                "max-connections",
                format!("{max} connections are open, the most policy {} allows (max_connections)", self.policy_name()),
            ),
            CapRefusal::Rate { per_second } => (
                429,
                "connection-rate",
                format!(
                    "more than {per_second} new connections per second, the most policy {} allows (max_connection_rate)",
                    self.policy_name()
                ),
            ),
        };
        Stop {
            status,
            verdict: Verdict::Denied,
            rule: rule.into(),
            reason: format!("egress refused: {why}"),
        }
    }

    /// A connection the forwarder closed unanswered (past twice `max_connections`): it has
    /// its record like every other.
    pub fn refused_by_forwarder(&self, peer: String) {
        self.emit(EgressEvent::Connection(ConnectionRecord {
            peer,
            method: String::new(),
            host: String::new(),
            port: 0,
            resolved: None,
            verdict: Verdict::Denied,
            rule: "forwarder-limit".into(),
            reason: Some(format!(
                "egress refused: the forwarder inside the sandbox holds {} connections (twice max_connections of policy {}); closed unanswered",
                self.plan.forwarder_max_connections(),
                self.policy_name()
            )),
            sni: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
        }));
    }

    /// Serves one workload connection to its end.
    pub async fn serve(self: Arc<Self>, mut stream: MuxStream) {
        let mut r = Record {
            started: Instant::now(),
            rec: ConnectionRecord {
                peer: stream.peer().to_string(),
                method: String::new(),
                host: String::new(),
                port: 0,
                resolved: None,
                verdict: Verdict::Denied,
                rule: String::new(),
                reason: None,
                sni: None,
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: 0,
            },
            held_back: 0,
        };
        let result = match self.caps.admit() {
            Ok(slot) => {
                let result = self.handle(&mut stream, &mut r).await;
                // Free once its upstream is closed, before the record: a workload that waits
                // for one connection's end to open the next never meets the cap.
                drop(slot);
                result
            }
            Err(refusal) => Err(self.over_cap(refusal)),
        };
        if let Err(stop) = result {
            if stop.status == ANSWERED {
                stream.send_eof();
                linger(&mut stream).await;
            } else if stop.status != 0 {
                let body = http::response(stop.status, &stop.reason);
                let _ = stream.send(&body).await;
                stream.send_eof();
                linger(&mut stream).await;
            } else {
                stream.reset();
            }
            r.rec.verdict = stop.verdict;
            r.rec.rule = stop.rule;
            r.rec.reason = Some(stop.reason);
        }
        r.rec.duration_ms = r.started.elapsed().as_millis() as u64;
        self.emit(EgressEvent::Connection(r.rec));
        if self.caps.open() == 0 {
            // The last connection ended: the buffers of a burst (up to a window per stream)
            // go back to the kernel rather than staying resident for the pod's life.
            gvisor_hardened_proc::heap::release_freed_memory();
        }
    }

    async fn handle(&self, stream: &mut MuxStream, r: &mut Record) -> Result<(), Stop> {
        let (req, rest) = self.read_head(stream).await?;
        r.rec.method = match &req {
            Request::Connect { .. } => "CONNECT".into(),
            Request::Plain { method, .. } => method.clone(),
        };
        r.rec.host = req.host().to_string();
        r.rec.port = req.port();
        if self.cap_crossed.load(Ordering::Acquire) {
            return Err(self.denied(
                "byte-cap",
                format!(
                    "this sandbox used its byte cap of {} bytes (policy {})",
                    self.plan.max_bytes,
                    self.policy_name()
                ),
            ));
        }
        if matches!(req, Request::Plain { .. }) && !self.plan.plain_http {
            return Err(self.denied(
                "plain-http",
                format!(
                    "plain HTTP is off in policy {}: use an https:// URL (the proxy tunnels it with CONNECT)",
                    self.policy_name()
                ),
            ));
        }
        let (candidates, rule) = self.admit(req.host(), req.port()).await?;
        r.rec.rule = rule;
        if let Ok(ip) = req.host().parse::<IpAddr>() {
            // Before any tunnel opens: a credential host's address reached by number would
            // skip the TLS the proxy terminates for it, and with it the credential's rules.
            self.refuse_credential_address(ip).await?;
        }
        let addr = self.pick(req.host(), req.port(), &candidates)?;
        if !self.plan.credentials.is_empty()
            && req.host().parse::<IpAddr>().is_err()
            && !self.plan.credential_hosts().iter().any(|h| h == req.host())
        {
            // Another allowlisted name whose address is a credential host's (a CNAME, a
            // wildcard entry, a hosts line) would reach that upstream as the number would.
            self.refuse_credential_address(addr.ip()).await?;
        }
        r.rec.resolved = Some(addr);
        let mut first_bytes = rest;
        if let Request::Connect { host, .. } = &req {
            stream
                .send(http::CONNECT_OK)
                .await
                .map_err(|_| gone("the workload left before the tunnel opened"))?;
            if let Some(cred) = self.plan.credential(host, req.port()) {
                let cred = cred.clone();
                return self
                    .terminate(stream, host, req.port(), addr, &cred, first_bytes, r)
                    .await;
            }
            if self.plan.require_sni && host.parse::<IpAddr>().is_err() {
                let sni = self.check_sni(stream, host, &mut first_bytes).await?;
                r.rec.sni = Some(sni);
            }
        }
        // A plain request: only its own body goes on (see http::parse_head); what follows it
        // in the same write is held back like anything later.
        let mut body_left = req.body_len();
        if let Some(body) = body_left {
            let body = usize::try_from(body).unwrap_or(usize::MAX);
            if first_bytes.len() > body {
                r.held_back += (first_bytes.len() - body) as u64;
                first_bytes.truncate(body);
            }
            body_left = Some((body - first_bytes.len()) as u64);
        }
        let upstream = self.dial(addr, req.host(), &req).await?;
        if let Some(head) = http::origin_form(&req) {
            first_bytes.splice(0..0, head);
        }
        r.rec.verdict = Verdict::Allowed;
        let result = self.pump(stream, upstream, first_bytes, body_left, r).await;
        if r.held_back > 0 && r.rec.reason.is_none() {
            r.rec.reason = Some(format!(
                "{} bytes after the request were not forwarded: one request per plain HTTP connection",
                r.held_back
            ));
        }
        result
    }

    /// Reads until the head is whole; returns it parsed and whatever followed it.
    async fn read_head(&self, stream: &mut MuxStream) -> Result<(Request, Vec<u8>), Stop> {
        let mut buf: Vec<u8> = Vec::new();
        let deadline = tokio::time::Instant::now() + self.timeouts.head;
        loop {
            if let Some(n) = http::head_len(&buf) {
                let req = http::parse_head(&buf[..n]).map_err(|e| Stop {
                    status: e.status,
                    verdict: Verdict::Denied,
                    rule: "bad-request".into(),
                    reason: format!("egress proxy: bad request: {}", e.reason),
                })?;
                return Ok((req, buf[n..].to_vec()));
            }
            if buf.len() > MAX_HEAD {
                return Err(Stop {
                    status: 431,
                    verdict: Verdict::Denied,
                    rule: "bad-request".into(),
                    reason: format!("egress proxy: request head longer than {MAX_HEAD} bytes"),
                });
            }
            match tokio::time::timeout_at(deadline, stream.recv()).await {
                Err(_) => {
                    return Err(Stop {
                        status: 408,
                        verdict: Verdict::Denied,
                        rule: "timeout".into(),
                        reason: "egress proxy: no complete request head in time".into(),
                    })
                }
                Ok(Inbound::Data(d)) => {
                    buf.extend_from_slice(&d);
                    stream.consumed(d.len());
                }
                Ok(Inbound::Eof) if buf.is_empty() => {
                    return Err(gone("the workload closed before sending a request"))
                }
                Ok(Inbound::Eof) => {
                    return Err(Stop {
                        status: 400,
                        verdict: Verdict::Denied,
                        rule: "bad-request".into(),
                        reason: "egress proxy: bad request: incomplete request head".into(),
                    })
                }
                Ok(Inbound::Reset) => return Err(gone("the workload reset the connection")),
            }
        }
    }

    /// Allowlist, then resolution: the addresses to check and the rule that admitted the name.
    async fn admit(&self, host: &str, port: u16) -> Result<(Vec<IpAddr>, String), Stop> {
        let policy = self.policy_name();
        if let Ok(ip) = host.parse::<IpAddr>() {
            let cidr = self.guard.allowed_by_cidr(ip);
            let port_ok = self.plan.allow.iter().any(|e| e.port == port);
            return match cidr {
                Some(c) if port_ok => Ok((vec![ip], format!("allow_cidrs {c}"))),
                _ => Err(self.denied(
                    "ip-literal",
                    format!("{host} is an IP address; policy {policy} allows host names (ask for a name on the allowlist)"),
                )),
            };
        }
        let Some(entry) = first_match(&self.plan.allow, host, port) else {
            let mut ports: Vec<u16> = self
                .plan
                .allow
                .iter()
                .filter(|e| e.matches(host, e.port))
                .map(|e| e.port)
                .collect();
            ports.sort_unstable();
            ports.dedup();
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            let why = if ports.is_empty() {
                format!("host {host} is not in the allowlist of policy {policy}")
            } else {
                format!(
                    "host {host} is allowed on port {} only, not {port}, by policy {policy}",
                    ports.join(", ")
                )
            };
            return Err(self.denied("not-allowed", why));
        };
        let rule = entry.to_string();
        if let Some(ip) = self.plan.hosts.get(host) {
            self.emit(EgressEvent::Lookup {
                host: host.to_string(),
                source: LookupSource::Static,
                answers: vec![*ip],
                error: None,
            });
            return Ok((vec![*ip], rule));
        }
        let answer = tokio::time::timeout(self.timeouts.resolve, self.resolver.resolve(host)).await;
        let answer = match answer {
            Ok(Ok(a)) if !a.is_empty() => Ok(a),
            Ok(Ok(_)) => Err("no addresses".to_string()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("timed out".to_string()),
        };
        self.emit(EgressEvent::Lookup {
            host: host.to_string(),
            source: LookupSource::Dns,
            answers: answer.clone().unwrap_or_default(),
            error: answer.as_ref().err().cloned(),
        });
        match answer {
            Ok(a) => Ok((a, rule)),
            Err(e) => Err(Stop {
                status: 502,
                verdict: Verdict::Failed,
                rule,
                reason: format!("egress proxy: cannot resolve {host}: {e}"),
            }),
        }
    }

    /// The first answer the guard lets through.
    fn pick(&self, host: &str, port: u16, answers: &[IpAddr]) -> Result<SocketAddr, Stop> {
        let mut first_refusal = None;
        for ip in answers {
            match self.guard.check(*ip) {
                Ok(_) => return Ok(SocketAddr::new(*ip, port)),
                Err(r) => {
                    first_refusal.get_or_insert((*ip, r));
                }
            }
        }
        let (ip, refusal) = first_refusal.expect("answers are never empty");
        Err(self.denied(
            refusal.as_str(),
            format!(
                "{host} resolves to {ip}, {refusal}, which policy {} does not allow (allow_cidrs)",
                self.policy_name()
            ),
        ))
    }

    async fn check_sni(
        &self,
        stream: &mut MuxStream,
        host: &str,
        buf: &mut Vec<u8>,
    ) -> Result<String, Stop> {
        let deadline = tokio::time::Instant::now() + self.timeouts.client_hello;
        let cut = |rule: &str, reason: String| Stop {
            status: 0,
            verdict: Verdict::Denied,
            rule: rule.into(),
            reason,
        };
        loop {
            match sni::parse(buf) {
                Ok(Some(hello)) => {
                    return match hello.sni {
                        Some(name) if name == host => Ok(name),
                        Some(name) => Err(cut(
                            "sni-mismatch",
                            format!("egress denied: TLS server name {name} differs from the CONNECT host {host} (domain fronting)"),
                        )),
                        None => Err(cut(
                            "sni-missing",
                            format!("egress denied: the TLS ClientHello for {host} carries no server name (policy {} requires it)", self.policy_name()),
                        )),
                    };
                }
                Ok(None) => {}
                Err(e) => return Err(cut("sni-missing", format!("egress denied: {e}"))),
            }
            match tokio::time::timeout_at(deadline, stream.recv()).await {
                Ok(Inbound::Data(d)) => {
                    buf.extend_from_slice(&d);
                    stream.consumed(d.len());
                }
                Ok(_) => return Err(gone("the workload left before its ClientHello")),
                Err(_) => {
                    return Err(cut(
                        "sni-missing",
                        "egress denied: no TLS ClientHello in time".into(),
                    ))
                }
            }
        }
    }

    async fn dial(&self, addr: SocketAddr, host: &str, req: &Request) -> Result<TcpStream, Stop> {
        self.dialer.dial(addr).await.map_err(|e| Stop {
            // After a CONNECT's 200 the only way to say it is to close the tunnel.
            status: if matches!(req, Request::Connect { .. }) {
                0
            } else {
                502
            },
            verdict: Verdict::Failed,
            rule: "dial".into(),
            reason: format!("egress proxy: {host} ({addr}) is unreachable: {e}"),
        })
    }

    /// Counts `n` bytes against the cap: false once the cap is crossed (first crossing audited
    /// and every stream of the sandbox cut).
    fn charge(&self, n: usize) -> bool {
        let total = self.used.fetch_add(n as u64, Ordering::AcqRel) + n as u64;
        if total <= self.plan.max_bytes {
            return true;
        }
        if !self.cap_crossed.swap(true, Ordering::AcqRel) {
            self.emit(EgressEvent::ByteCapCrossed {
                max_bytes: self.plan.max_bytes,
                used: total,
            });
            self.cap_cut.notify_waiters();
        }
        false
    }

    /// Waits until `n` more bytes fit the sandbox's `max_rate` (at once without one).
    async fn pace(&self, n: usize) {
        if let Some(rate) = &self.rate {
            rate.pace(n).await;
        }
    }

    async fn pump(
        &self,
        stream: &mut MuxStream,
        upstream: TcpStream,
        first: Vec<u8>,
        body_left: Option<u64>,
        r: &mut Record,
    ) -> Result<(), Stop> {
        let cap_stop = |rule: &str| Stop {
            status: 0,
            verdict: Verdict::Cut,
            rule: rule.to_string(),
            reason: format!(
                "egress cut: the sandbox's byte cap of {} bytes was crossed",
                self.plan.max_bytes
            ),
        };
        let rule = r.rec.rule.clone();
        let cut = self.cap_cut.notified();
        tokio::pin!(cut);
        cut.as_mut().enable();
        let (mut up_r, mut up_w) = upstream.into_split();
        if !first.is_empty() {
            if !self.charge(first.len()) {
                return Err(cap_stop(&rule));
            }
            self.pace(first.len()).await;
            up_w.write_all(&first)
                .await
                .map_err(|e| upstream_gone(e, &rule))?;
            r.rec.bytes_up += first.len() as u64;
        }
        if self.cap_crossed.load(Ordering::Acquire) {
            return Err(cap_stop(&rule));
        }
        let up_bytes = AtomicU64::new(0);
        let down_bytes = AtomicU64::new(0);
        let dropped = AtomicU64::new(0);
        let mut body_left = body_left;
        let (reader, writer) = stream.halves();
        // Set when the workload closed its side; `down` then waits on the upstream only for
        // `after_close` at a time.
        let workload_closed = std::sync::atomic::AtomicBool::new(false);
        let closing = tokio::sync::Notify::new();
        // Each direction ends on its own EOF; an error or reset on either ends both.
        let up = async {
            loop {
                match reader.recv().await {
                    Inbound::Data(d) => {
                        let take = match &mut body_left {
                            None => d.len(),
                            Some(left) => {
                                let take =
                                    d.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                                *left -= take as u64;
                                take
                            }
                        };
                        dropped.fetch_add((d.len() - take) as u64, Ordering::Relaxed);
                        if take > 0 {
                            if !self.charge(take) {
                                return Err(cap_stop(&rule));
                            }
                            // Paced before the write deadline starts: waiting on the rate is
                            // not the upstream stalling.
                            self.pace(take).await;
                            let write = tokio::time::timeout(
                                self.timeouts.write,
                                up_w.write_all(&d[..take]),
                            );
                            tokio::select! {
                                written = write => match written {
                                    Ok(Ok(())) => {}
                                    Ok(Err(e)) => return Err(upstream_gone(e, &rule)),
                                    Err(_) => return Err(stalled(&rule, "the upstream", self.timeouts.write)),
                                },
                                // The workload's reset sits behind the data in its queue.
                                () = reader.gone() => {
                                    return Err(gone("the workload reset the connection"));
                                }
                            }
                            up_bytes.fetch_add(take as u64, Ordering::Relaxed);
                        }
                        reader.consumed(d.len());
                    }
                    Inbound::Eof => {
                        workload_closed.store(true, Ordering::Release);
                        closing.notify_one();
                        let _ = up_w.shutdown().await;
                        return Ok(());
                    }
                    Inbound::Reset => return Err(gone("the workload reset the connection")),
                }
            }
        };
        let down = async {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let closed = workload_closed.load(Ordering::Acquire);
                let limit = if closed {
                    self.timeouts.after_close
                } else {
                    self.timeouts.idle
                };
                let read = tokio::time::timeout(limit, up_r.read(&mut buf));
                let read = if closed {
                    read.await
                } else {
                    tokio::select! {
                        r = read => r,
                        // The read is cancel-safe: it starts again under the short limit.
                        () = closing.notified() => continue,
                    }
                };
                match read {
                    // The workload is done and the upstream has nothing more for it: an
                    // ordinary end, recorded now instead of after the idle timeout.
                    Err(_) if closed => {
                        writer.send_eof();
                        return Ok(());
                    }
                    Err(_) => {
                        return Err(Stop {
                            status: 0,
                            verdict: Verdict::Cut,
                            rule: "idle".into(),
                            reason: format!(
                                "egress cut: nothing from the upstream for {} s",
                                self.timeouts.idle.as_secs()
                            ),
                        })
                    }
                    Ok(Ok(0)) => {
                        writer.send_eof();
                        return Ok(());
                    }
                    Ok(Ok(n)) => {
                        if !self.charge(n) {
                            return Err(cap_stop(&rule));
                        }
                        self.pace(n).await;
                        match tokio::time::timeout(self.timeouts.write, writer.send(&buf[..n]))
                            .await
                        {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => return Err(gone("the workload's connection is gone")),
                            Err(_) => {
                                return Err(stalled(&rule, "the workload", self.timeouts.write))
                            }
                        }
                        down_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    Ok(Err(e)) => return Err(upstream_gone(e, &rule)),
                }
            }
        };
        let result = tokio::select! {
            _ = &mut cut => Err(cap_stop(&rule)),
            both = async { tokio::try_join!(up, down) } => both.map(|_| ()),
        };
        r.rec.bytes_up += up_bytes.into_inner();
        r.rec.bytes_down += down_bytes.into_inner();
        r.held_back += dropped.into_inner();
        match result {
            // The workload hanging up mid-way is an ordinary end of an allowed connection.
            Err(stop) if stop.rule == "workload" => Ok(()),
            other => other,
        }
    }
}

/// After an error response: let the workload read it and hang up, discarding what it still
/// sends, before the stream goes. Dropping it at once would reset the connection, and a reset
/// lets the forwarder discard the response it has not written yet.
async fn linger(stream: &mut MuxStream) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, stream.recv()).await {
            Ok(Inbound::Data(d)) => stream.consumed(d.len()),
            Ok(Inbound::Eof | Inbound::Reset) | Err(_) => return,
        }
    }
}

fn gone(why: &str) -> Stop {
    Stop {
        status: 0,
        verdict: Verdict::Cut,
        rule: "workload".into(),
        reason: why.to_string(),
    }
}

/// A side that took no byte for `after`: its connection is cut.
fn stalled(rule: &str, side: &str, after: Duration) -> Stop {
    Stop {
        status: 0,
        verdict: Verdict::Cut,
        rule: rule.to_string(),
        reason: format!(
            "egress cut: {side} took no data for {} s",
            after.as_secs_f64()
        ),
    }
}

fn upstream_gone(e: std::io::Error, rule: &str) -> Stop {
    Stop {
        status: 0,
        verdict: Verdict::Cut,
        rule: rule.to_string(),
        reason: format!("upstream connection failed: {e}"),
    }
}
