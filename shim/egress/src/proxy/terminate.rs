//! A credential host's CONNECT, after the allowlist, resolution and guard: the proxy is the
//! TLS server (a leaf for the host signed by the sandbox's CA, HTTP/1.1 only), reads one
//! request head with the bounded parser, checks the credential's `METHOD /path` rules, puts
//! the credential's header in place of any the workload sent, and forwards that one request
//! (`Connection: close`) over TLS to the checked address, verifying the upstream's certificate
//! for the host. Only the request's own body follows it; anything after is held back.
//!
//! The credential's value is read from its file for each request and goes into the upstream
//! head only: never into a record, a log line, an error or a refusal.

use std::net::SocketAddr;
use std::sync::Arc;

use policy_injector::egress::CredentialPlan;
use policy_injector::EgressPlan;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

use super::{
    credential_checks, gone, stalled, Inbound, MuxStream, Proxy, Record, Stop, Verdict, ANSWERED,
};
use crate::audit::EgressEvent;
use crate::credentials::{
    upstream_config, upstream_config_from_pem, CredentialValues, FileValues, SandboxCa,
};
use crate::http::{self, MAX_HEAD};

/// What the proxy needs for its credential hosts.
pub(super) struct Credentials {
    ca: Option<Arc<SandboxCa>>,
    /// The upstream TLS configuration, or why there is none (said to the workload, audited).
    upstream: Result<Arc<rustls::ClientConfig>, String>,
    values: Arc<dyn CredentialValues>,
}

impl Credentials {
    /// In the process that can read the files itself.
    pub(super) fn new(ca: Option<Arc<SandboxCa>>, plan: &EgressPlan) -> Credentials {
        Credentials {
            ca,
            upstream: upstream_config(plan.upstream_ca_file()).map_err(|e| e.to_string()),
            values: Arc::new(FileValues),
        }
    }

    /// In a confined proxy process: the trust anchors' text and the values come from the shim.
    pub(super) fn received(
        ca: Option<Arc<SandboxCa>>,
        plan: &EgressPlan,
        anchors: Result<String, String>,
        values: Arc<dyn CredentialValues>,
    ) -> Credentials {
        let upstream = anchors.and_then(|text| {
            upstream_config_from_pem(plan.upstream_ca_file(), text.as_bytes())
                .map_err(|e| e.to_string())
        });
        Credentials {
            ca,
            upstream,
            values,
        }
    }
}

/// Bytes in flight between the workload's stream and the TLS server, each way.
const BRIDGE_BUFFER: usize = 64 * 1024;

/// What one read of the workload's request gave.
enum More {
    Read,
    /// The deadline passed first.
    Late,
    /// The workload closed (or the read failed).
    Closed,
}

/// Reads what the workload sent next into `buf`, by `deadline`.
async fn read_more<S: tokio::io::AsyncRead + Unpin>(
    tls: &mut S,
    buf: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> More {
    let mut chunk = [0u8; 4096];
    match tokio::time::timeout_at(deadline, tls.read(&mut chunk)).await {
        Err(_) => More::Late,
        Ok(Ok(0)) | Ok(Err(_)) => More::Closed,
        Ok(Ok(k)) => {
            buf.extend_from_slice(&chunk[..k]);
            More::Read
        }
    }
}

/// Headers the proxy writes itself.
/// The upstream side of a terminated connection.
type Upstream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A request the checks and the credential's rules admitted.
struct Admitted {
    req: http::OriginRequest,
    /// The credential rule that allowed it, when the credential has rules.
    rule: Option<String>,
    /// Body bytes read with the head (they go up first).
    first_body: Vec<u8>,
    /// Bytes read after the body's end: never forwarded.
    held_back: u64,
    frame: http::BodyFrame,
}

/// Why the exchange ends before the upstream: an answer to the workload, or a stop.
enum Halt {
    Answer(Refusal),
    Stop(Stop),
}

/// A refusal said inside the terminated connection.
struct Refusal {
    status: u16,
    rule: &'static str,
    verdict: Verdict,
    reason: String,
}

impl Halt {
    fn answer(status: u16, rule: &'static str, verdict: Verdict, reason: String) -> Halt {
        Halt::Answer(Refusal {
            status,
            rule,
            verdict,
            reason,
        })
    }

    /// A request refused by `credential_checks`: 403.
    fn refused(r: credential_checks::Refused) -> Halt {
        Halt::answer(403, r.rule, Verdict::Denied, r.reason)
    }
}

/// The upstream head, overwritten when dropped (it holds the credential), the header name it
/// carries the credential in, and whether that replaced a header the workload sent.
struct UpstreamHead {
    text: zeroize::Zeroizing<String>,
    header: String,
    replaced: bool,
}

/// The upstream head: the workload's, its header of the credential's name dropped (`X_Api_Key`
/// too: a server that reads `_` as `-` could take the workload's value) and the headers the
/// proxy frames itself, the credential added, one request per connection.
fn upstream_head(
    req: &http::OriginRequest,
    host: &str,
    port: u16,
    cred: &CredentialPlan,
    value: crate::credentials::Secret,
) -> UpstreamHead {
    // Overwritten when dropped, on every path: it holds the credential.
    let mut head = zeroize::Zeroizing::new(format!("{} {} HTTP/1.1\r\n", req.method, req.target));
    if !req
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("host"))
    {
        if port == 443 {
            head.push_str(&format!("Host: {host}\r\n"));
        } else {
            head.push_str(&format!("Host: {host}:{port}\r\n"));
        }
    }
    let mut replaced = false;
    for (n, v) in &req.headers {
        if credential_checks::same_header(n, &cred.header) {
            replaced = true;
            continue;
        }
        if framed_by_proxy(n) {
            continue;
        }
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&cred.header);
    head.push_str(": ");
    head.push_str(value.expose());
    head.push_str("\r\nConnection: close\r\n\r\n");
    drop(value);
    UpstreamHead {
        text: head,
        header: cred.header.clone(),
        replaced,
    }
}

fn framed_by_proxy(name: &str) -> bool {
    name.eq_ignore_ascii_case("connection")
}

impl Proxy {
    /// Serves a credential host's tunnel (the CONNECT was answered 200). `first`: what the
    /// workload sent after the CONNECT head.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn terminate(
        &self,
        stream: &mut MuxStream,
        host: &str,
        port: u16,
        addr: SocketAddr,
        cred: &CredentialPlan,
        first: Vec<u8>,
        r: &mut Record,
    ) -> Result<(), Stop> {
        let ca = self.credentials.as_ref().and_then(|c| c.ca.clone());
        let Some(ca) = ca else {
            // Fail closed: without the sandbox's CA the proxy cannot add the credential, and a
            // plain tunnel would let the workload use the host without the credential's rules.
            return Err(Stop {
                status: 0,
                verdict: Verdict::Failed,
                rule: "credential-unavailable".into(),
                reason: format!(
                    "egress refused: {host} gets a credential from the proxy, but this sandbox has no CA to terminate TLS with"
                ),
            });
        };
        let server = ca.server_config(host).map_err(|e| Stop {
            status: 0,
            verdict: Verdict::Failed,
            rule: "credential-unavailable".into(),
            reason: format!("egress refused: {e}"),
        })?;
        let (ours, theirs) = tokio::io::duplex(BRIDGE_BUFFER);
        let done = CancellationToken::new();
        let write_timeout = self.timeouts.write;
        let (reader, writer) = stream.halves();
        let (mut tr, mut tw) = tokio::io::split(theirs);
        // The workload's bytes (TLS records) into the server side, until the exchange ends.
        let to_tls = async {
            if !first.is_empty() && tw.write_all(&first).await.is_err() {
                return;
            }
            loop {
                tokio::select! {
                    () = done.cancelled() => return,
                    m = reader.recv() => match m {
                        Inbound::Data(d) => {
                            tokio::select! {
                                () = done.cancelled() => return,
                                w = tw.write_all(&d) => if w.is_err() { return },
                            }
                            reader.consumed(d.len());
                        }
                        Inbound::Eof | Inbound::Reset => {
                            let _ = tw.shutdown().await;
                            return;
                        }
                    }
                }
            }
        };
        // The server side's TLS records back to the workload, until it closes.
        let from_tls = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match tr.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        writer.send_eof();
                        return;
                    }
                    Ok(n) => {
                        match tokio::time::timeout(write_timeout, writer.send(&buf[..n])).await {
                            Ok(Ok(())) => {}
                            _ => return,
                        }
                    }
                }
            }
        };
        let inner = async {
            let result = self.inside(ours, host, port, addr, cred, server, r).await;
            done.cancel();
            result
        };
        let (result, (), ()) = tokio::join!(inner, to_tls, from_tls);
        if result.is_ok() {
            // The answer went out with an EOF; dropping the stream before the workload hangs
            // up would reset it, and a reset lets the forwarder drop what it has not written.
            super::linger(stream).await;
        }
        result
    }

    /// The TLS server side: handshake, one request admitted by the credential's rules, the
    /// credential, the upstream, then the request's body and the answer relayed.
    #[allow(clippy::too_many_arguments)]
    async fn inside(
        &self,
        io: DuplexStream,
        host: &str,
        port: u16,
        addr: SocketAddr,
        cred: &CredentialPlan,
        server: Arc<rustls::ServerConfig>,
        r: &mut Record,
    ) -> Result<(), Stop> {
        let mut tls = self.handshake(io, host, server, r).await?;
        let admitted = match self.read_request(&mut tls, host, port, cred).await {
            Ok(a) => a,
            Err(halt) => return self.halt(&mut tls, halt).await,
        };
        r.held_back += admitted.held_back;
        let (value, up) = match self.upstream(host, port, addr, cred).await {
            Ok(u) => u,
            Err(halt) => return self.halt(&mut tls, halt).await,
        };
        let head = upstream_head(&admitted.req, host, port, cred, value);
        self.relay(tls, up, head, admitted, host, port, r).await
    }

    /// A refusal answered inside the terminated connection, or a stop without one.
    async fn halt<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        tls: &mut S,
        halt: Halt,
    ) -> Result<(), Stop> {
        match halt {
            Halt::Answer(x) => {
                self.answer(tls, x.status, x.rule, x.verdict, x.reason)
                    .await
            }
            Halt::Stop(stop) => Err(stop),
        }
    }

    /// The workload's TLS handshake with the proxy as `host`: in time, and naming `host`
    /// (or, where the policy allows it, no name at all).
    async fn handshake(
        &self,
        io: DuplexStream,
        host: &str,
        server: Arc<rustls::ServerConfig>,
        r: &mut Record,
    ) -> Result<tokio_rustls::server::TlsStream<DuplexStream>, Stop> {
        let cut = |rule: &str, reason: String| Stop {
            status: 0,
            verdict: Verdict::Denied,
            rule: rule.into(),
            reason,
        };
        let accepted = tokio::time::timeout(
            self.timeouts.client_hello,
            TlsAcceptor::from(server).accept(io),
        )
        .await;
        let tls = match accepted {
            Err(_) => {
                return Err(cut(
                    "tls-handshake",
                    "egress denied: no TLS handshake in time".into(),
                ))
            }
            Ok(Err(e)) => {
                return Err(cut(
                    "tls-handshake",
                    format!("egress denied: TLS handshake for {host} failed: {e}"),
                ))
            }
            Ok(Ok(t)) => t,
        };
        let sni = tls.get_ref().1.server_name().map(str::to_string);
        match &sni {
            Some(name) if name == host => {}
            Some(name) => {
                return Err(cut(
                    "sni-mismatch",
                    format!("egress denied: TLS server name {name} differs from the CONNECT host {host} (domain fronting)"),
                ))
            }
            None if self.plan.require_sni => {
                return Err(cut(
                    "sni-missing",
                    format!("egress denied: the TLS ClientHello for {host} carries no server name (policy {} requires it)", self.policy_name()),
                ))
            }
            None => {}
        }
        r.rec.sni = sni;
        Ok(tls)
    }

    /// One request head, bounded in size and time, through the checks and the credential's
    /// rules; a form body read whole and checked; the part of the body already read.
    async fn read_request<S: AsyncRead + Unpin>(
        &self,
        tls: &mut S,
        host: &str,
        port: u16,
        cred: &CredentialPlan,
    ) -> Result<Admitted, Halt> {
        let mut buf: Vec<u8> = Vec::new();
        let deadline = tokio::time::Instant::now() + self.timeouts.head;
        let head_end = loop {
            if let Some(n) = http::head_len(&buf) {
                break n;
            }
            if buf.len() > MAX_HEAD {
                return Err(Halt::answer(
                    431,
                    "bad-request",
                    Verdict::Denied,
                    format!("egress proxy: request head longer than {MAX_HEAD} bytes"),
                ));
            }
            match read_more(tls, &mut buf, deadline).await {
                More::Late => {
                    return Err(Halt::answer(
                        408,
                        "timeout",
                        Verdict::Denied,
                        "egress proxy: no complete request head in time".into(),
                    ))
                }
                More::Closed if buf.is_empty() => {
                    return Err(Halt::Stop(gone(
                        "the workload closed before sending a request",
                    )))
                }
                More::Closed => {
                    return Err(Halt::Stop(gone(
                        "the workload closed within its request head",
                    )))
                }
                More::Read => {}
            }
        };
        let req = http::parse_origin_head(&buf[..head_end], host, port).map_err(|e| {
            Halt::answer(
                e.status,
                "bad-request",
                Verdict::Denied,
                format!("egress proxy: bad request: {}", e.reason),
            )
        })?;
        let rule = self.request_allowed(&req, host, cred)?;
        // A form body is read whole first (bounded) and checked for a method field.
        if let Some(form) = credential_checks::form_of(&req.headers) {
            if let Some(refused) = credential_checks::uncheckable_form(
                req.chunked,
                req.body_len,
                host,
                self.policy_name(),
            ) {
                return Err(Halt::refused(refused));
            }
            let whole = head_end + req.body_len as usize;
            while buf.len() < whole {
                match read_more(tls, &mut buf, deadline).await {
                    More::Late => {
                        return Err(Halt::answer(
                            408,
                            "timeout",
                            Verdict::Denied,
                            "egress proxy: no complete form body in time".into(),
                        ))
                    }
                    More::Closed => {
                        return Err(Halt::Stop(gone("the workload closed within its form body")))
                    }
                    More::Read => {}
                }
            }
            credential_checks::check_form(form, &buf[head_end..whole], host, self.policy_name())
                .map_err(Halt::refused)?;
        }
        // The request's body (to its Content-Length or its last chunk), then nothing more
        // from the workload.
        let mut frame = http::BodyFrame::of(&req);
        let after = &buf[head_end..];
        let body_now = frame.take(after).map_err(|e| {
            Halt::answer(
                e.status,
                "bad-request",
                Verdict::Denied,
                format!("egress proxy: bad request body: {}", e.reason),
            )
        })?;
        Ok(Admitted {
            held_back: (after.len() - body_now) as u64,
            first_body: after[..body_now].to_vec(),
            req,
            rule,
            frame,
        })
    }

    /// Before the rules, what a server could read as another method, path or host; then the
    /// credential's `METHOD /path` rules. The rule that allowed it, if the credential has any.
    fn request_allowed(
        &self,
        req: &http::OriginRequest,
        host: &str,
        cred: &CredentialPlan,
    ) -> Result<Option<String>, Halt> {
        credential_checks::check_request(
            &req.method,
            &req.target,
            &req.headers,
            host,
            self.policy_name(),
        )
        .map_err(Halt::refused)?;
        if cred.rules.is_empty() {
            return Ok(None);
        }
        if let Some(x) = cred
            .rules
            .iter()
            .find(|x| x.allows(&req.method, &req.target))
        {
            return Ok(Some(x.to_string()));
        }
        let path = req
            .target
            .split_once('?')
            .map_or(req.target.as_str(), |(p, _)| p);
        let rules: Vec<String> = cred.rules.iter().map(ToString::to_string).collect();
        Err(Halt::answer(
            403,
            "credential-rule",
            Verdict::Denied,
            format!(
                "egress denied: {} {path} is not allowed with the credential for {host} by policy {} (allowed: {})",
                req.method,
                self.policy_name(),
                rules.join(", ")
            ),
        ))
    }

    /// The credential's value and a verified TLS connection to the checked address.
    async fn upstream(
        &self,
        host: &str,
        port: u16,
        addr: SocketAddr,
        cred: &CredentialPlan,
    ) -> Result<(crate::credentials::Secret, Upstream), Halt> {
        let credentials = self
            .credentials
            .as_ref()
            .expect("terminate runs only with credentials");
        let upstream_config = credentials.upstream.clone().map_err(|why| {
            Halt::answer(
                502,
                "upstream-ca",
                Verdict::Failed,
                format!("egress proxy: cannot verify {host}: {why}"),
            )
        })?;
        let value = credentials
            .values
            .value(host, port, cred)
            .await
            .map_err(|e| {
                Halt::answer(
                    502,
                    "credential-unavailable",
                    Verdict::Failed,
                    format!("egress proxy: {e}"),
                )
            })?;
        let tcp = self.dialer.dial(addr).await.map_err(|e| {
            Halt::answer(
                502,
                "dial",
                Verdict::Failed,
                format!("egress proxy: {host} ({addr}) is unreachable: {e}"),
            )
        })?;
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            Halt::Stop(Stop {
                status: 0,
                verdict: Verdict::Failed,
                rule: "upstream-tls".into(),
                reason: format!("egress proxy: {host} is no TLS server name: {e}"),
            })
        })?;
        let connected = tokio::time::timeout(
            self.timeouts.client_hello,
            TlsConnector::from(upstream_config).connect(name, tcp),
        )
        .await;
        match connected {
            Ok(Ok(up)) => Ok((value, up)),
            Ok(Err(e)) => Err(Halt::answer(
                502,
                "upstream-tls",
                Verdict::Failed,
                format!("egress proxy: TLS to {host} ({addr}) failed: {e}"),
            )),
            Err(_) => Err(Halt::answer(
                504,
                "upstream-tls",
                Verdict::Failed,
                format!("egress proxy: no TLS handshake from {host} ({addr}) in time"),
            )),
        }
    }

    /// The upstream head, the request's body and the answer, under the caps and deadlines.
    #[allow(clippy::too_many_arguments)]
    async fn relay(
        &self,
        tls: tokio_rustls::server::TlsStream<DuplexStream>,
        up: Upstream,
        head: UpstreamHead,
        admitted: Admitted,
        host: &str,
        port: u16,
        r: &mut Record,
    ) -> Result<(), Stop> {
        let header = head.header.clone();
        let replaced = head.replaced;
        let Admitted {
            req,
            rule,
            mut frame,
            first_body,
            ..
        } = admitted;
        let rule_name = r.rec.rule.clone();
        let cap_stop = || Stop {
            status: 0,
            verdict: Verdict::Cut,
            rule: rule_name.clone(),
            reason: format!(
                "egress cut: the sandbox's byte cap of {} bytes was crossed",
                self.plan.max_bytes
            ),
        };
        let (mut ur, mut uw) = tokio::io::split(up);
        let (mut cr, mut cw) = tokio::io::split(tls);
        if !self.charge(head.text.len()) {
            return Err(cap_stop());
        }
        self.pace(head.text.len()).await;
        match tokio::time::timeout(self.timeouts.write, uw.write_all(head.text.as_bytes())).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(super::upstream_gone(e, &rule_name)),
            Err(_) => return Err(stalled(&rule_name, "the upstream", self.timeouts.write)),
        }
        r.rec.bytes_up += head.text.len() as u64;
        drop(head);
        self.emit(EgressEvent::CredentialInjected {
            host: host.to_string(),
            port,
            header,
            rule,
            method: req.method.clone(),
            replaced_workload_header: replaced,
        });
        r.rec.verdict = Verdict::Allowed;

        let mut up_bytes = 0u64;
        let mut down_bytes = 0u64;
        let mut held_back = 0u64;
        let upload = async {
            let mut chunk = first_body;
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                if !chunk.is_empty() {
                    if !self.charge(chunk.len()) {
                        return Err(cap_stop());
                    }
                    self.pace(chunk.len()).await;
                    match tokio::time::timeout(self.timeouts.write, uw.write_all(&chunk)).await {
                        Ok(Ok(())) => {}
                        // An upstream that answered early (401, 413) and closed takes no more
                        // body; its answer still goes to the workload.
                        Ok(Err(_)) => return Ok::<(), Stop>(()),
                        Err(_) => {
                            return Err(stalled(&rule_name, "the upstream", self.timeouts.write))
                        }
                    }
                    up_bytes += chunk.len() as u64;
                }
                if frame.done() {
                    return Ok::<(), Stop>(());
                }
                let want = frame.wants(buf.len());
                match tokio::time::timeout(self.timeouts.idle, cr.read(&mut buf[..want])).await {
                    Ok(Ok(0)) | Ok(Err(_)) => {
                        return Err(gone("the workload closed within its request body"))
                    }
                    Ok(Ok(n)) => {
                        let take = frame.take(&buf[..n]).map_err(|e| Stop {
                            status: 0,
                            verdict: Verdict::Cut,
                            rule: "bad-request".into(),
                            reason: format!("egress proxy: bad request body: {}", e.reason),
                        })?;
                        held_back += (n - take) as u64;
                        chunk = buf[..take].to_vec();
                    }
                    Err(_) => return Err(stalled(&rule_name, "the workload", self.timeouts.idle)),
                }
            }
        };
        let download = async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match tokio::time::timeout(self.timeouts.idle, ur.read(&mut buf)).await {
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
                    Ok(Ok(0)) => break,
                    // An upstream that closes without TLS close_notify: its answer is over
                    // (the request said Connection: close).
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Ok(Err(e)) => return Err(super::upstream_gone(e, &rule_name)),
                    Ok(Ok(n)) => n,
                };
                if !self.charge(n) {
                    return Err(cap_stop());
                }
                self.pace(n).await;
                match tokio::time::timeout(self.timeouts.write, cw.write_all(&buf[..n])).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(gone("the workload's connection is gone")),
                    Err(_) => return Err(stalled(&rule_name, "the workload", self.timeouts.write)),
                }
                down_bytes += n as u64;
            }
            let _ = tokio::time::timeout(self.timeouts.write, cw.shutdown()).await;
            Ok(())
        };
        let cut = self.cap_cut.notified();
        tokio::pin!(cut);
        cut.as_mut().enable();
        let result = tokio::select! {
            _ = &mut cut => Err(cap_stop()),
            both = async { tokio::try_join!(upload, download) } => both.map(|_| ()),
        };
        r.rec.bytes_up += up_bytes;
        r.rec.bytes_down += down_bytes;
        r.held_back += held_back;
        match result {
            Err(stop) if stop.rule == "workload" => Ok(()),
            other => other,
        }
    }

    /// Answers a refusal inside the terminated TLS connection (the client reads it as the
    /// server's answer, reason phrase and body), then closes it.
    async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        tls: &mut S,
        status: u16,
        rule: &str,
        verdict: Verdict,
        reason: String,
    ) -> Result<(), Stop> {
        let body = http::response(status, &reason);
        let _ = tokio::time::timeout(self.timeouts.write, async {
            tls.write_all(&body).await?;
            tls.shutdown().await
        })
        .await;
        Err(Stop {
            status: ANSWERED,
            verdict,
            rule: rule.into(),
            reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Secret;

    fn request(headers: &[(&str, &str)]) -> http::OriginRequest {
        http::OriginRequest {
            method: "POST".into(),
            target: "/v1/messages?x=1".into(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body_len: 0,
            chunked: false,
        }
    }

    fn plan() -> CredentialPlan {
        CredentialPlan {
            header: "x-api-key".into(),
            file: "/etc/keys/api".into(),
            rules: Vec::new(),
        }
    }

    #[test]
    fn the_upstream_head_carries_the_credential_in_place_of_any_the_workload_sent() {
        let req = request(&[
            ("Accept", "*/*"),
            ("X-Api-Key", "workload's"),
            ("X_Api_Key", "workload's too"),
            ("Connection", "keep-alive"),
        ]);
        let head = upstream_head(
            &req,
            "api.example.test",
            443,
            &plan(),
            Secret::received("k".into()),
        );
        assert!(head.replaced);
        assert_eq!(head.header, "x-api-key");
        assert_eq!(
            head.text.as_str(),
            "POST /v1/messages?x=1 HTTP/1.1\r\nHost: api.example.test\r\nAccept: */*\r\n\
             x-api-key: k\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn the_upstream_head_keeps_the_workloads_host_and_names_a_port_other_than_443() {
        let head = upstream_head(
            &request(&[]),
            "api.example.test",
            8443,
            &plan(),
            Secret::received("k".into()),
        );
        assert!(!head.replaced);
        assert!(
            head.text.contains("\r\nHost: api.example.test:8443\r\n"),
            "{}",
            *head.text
        );
        let head = upstream_head(
            &request(&[("host", "api.example.test")]),
            "api.example.test",
            8443,
            &plan(),
            Secret::received("k".into()),
        );
        assert_eq!(head.text.matches("ost:").count(), 1, "{}", *head.text);
    }
}
