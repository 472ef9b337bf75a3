//! Credentials through the fake world: a real TLS client (rustls) inside "the sandbox", the
//! proxy terminating TLS with the sandbox's CA, and an in-process TLS upstream with a test CA
//! that records the heads it got.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, PKCS_ECDSA_P256_SHA256};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::fakes::*;
use crate::audit::{EgressEvent, Verdict};
use crate::credentials::SandboxCa;

const SECRET: &str = "sk-planted-5f1e0c";
const HOST: &str = "api.example.test";

/// A CA of the test's own and a TLS server with its leaf for [`HOST`].
struct TlsUpstream {
    addr: SocketAddr,
    ca_pem: String,
    heads: Arc<Mutex<Vec<String>>>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsUpstream {
    async fn start() -> TlsUpstream {
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let leaf = CertificateParams::new(vec![HOST.to_string()])
            .unwrap()
            .signed_by(&leaf_key, &ca, &ca_key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = heads.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    // A chunked body is read to its last chunk (or the proxy's close).
                    if String::from_utf8_lossy(&got).contains("Transfer-Encoding: chunked") {
                        while !got.ends_with(b"0\r\n\r\n") {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                        }
                    }
                    seen.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&got).into_owned());
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        TlsUpstream {
            addr,
            ca_pem: ca.pem(),
            heads,
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

/// The plan: [`HOST`] with a credential from `key_file`, upstream verified against `ca_file`.
fn plan(key_file: &str, ca_file: &str, rules: &str) -> policy_injector::EgressPlan {
    policy(&[
        &format!("upstream_ca = {ca_file:?}"),
        &format!(
            "credentials = {{ {HOST:?} = {{ header = \"x-api-key\", file = {key_file:?}, rules = [{rules}] }} }}"
        ),
    ])
}

struct Files {
    _dir: tempfile::TempDir,
    key: String,
    ca: String,
}

impl Files {
    /// The policy line that trusts the test upstream's CA.
    fn upstream_ca(&self) -> String {
        format!("upstream_ca = {:?}", self.ca)
    }

    /// The policy line of a credential for [`HOST`] without rules.
    fn plain_credential(&self) -> String {
        format!(
            "credentials = {{ {HOST:?} = {{ header = \"x-api-key\", file = {:?} }} }}",
            self.key
        )
    }
}

fn files(up: &TlsUpstream) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("api-key");
    std::fs::write(&key, format!("{SECRET}\n")).unwrap();
    let ca = dir.path().join("upstream-ca.pem");
    std::fs::write(&ca, &up.ca_pem).unwrap();
    Files {
        key: key.display().to_string(),
        ca: ca.display().to_string(),
        _dir: dir,
    }
}

/// One request from "the sandbox": CONNECT, TLS trusting only the sandbox's CA, `request`;
/// the whole answer.
async fn request(s: &Streams, id: u32, ca: &SandboxCa, request: &str) -> String {
    let (head, io) = s
        .connect(
            id,
            format!("CONNECT {HOST}:443 HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
    assert_eq!(head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert_der()).unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), io)
        .await
        .expect("the sandbox's CA verifies the proxy's leaf for the host");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn everything_recorded(w: &World) -> String {
    format!("{:?}", w.events())
}

#[tokio::test]
async fn the_credential_replaces_the_workloads_header_and_never_shows() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let mut w = World::with_credentials(&plan(&f.key, &f.ca, ""), up.addr, Some(ca.clone())).await;
    let s = w.forwarder().await.into_streams();
    let answer = request(
        &s,
        1,
        &ca,
        &format!("POST /v1/messages HTTP/1.1\r\nHost: {HOST}\r\nX-Api-Key: workload-guess\r\nContent-Length: 4\r\n\r\nbody"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    let heads = up.heads();
    assert_eq!(heads.len(), 1);
    let head = &heads[0];
    assert!(head.starts_with("POST /v1/messages HTTP/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("x-api-key: {SECRET}\r\n")), "{head}");
    assert!(!head.contains("workload-guess"), "{head}");
    assert_eq!(head.to_ascii_lowercase().matches("x-api-key").count(), 1);
    assert!(head.contains("Connection: close\r\n"), "{head}");
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Allowed, "{rec:?}");
    assert_eq!(rec.sni.as_deref(), Some(HOST));
    assert!(w.events().iter().any(|e| matches!(e,
        EgressEvent::CredentialInjected { host, header, rule: None, replaced_workload_header: true, .. }
            if host == HOST && header == "x-api-key")));

    // Rotation: the next request carries the file's new value, without a restart.
    std::fs::write(&f.key, "sk-rotated-77\n").unwrap();
    let answer = request(&s, 2, &ca, "GET /v1/models HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let heads = up.heads();
    assert!(
        heads[1].contains("x-api-key: sk-rotated-77\r\n"),
        "{}",
        heads[1]
    );
    assert!(
        heads[1].contains(&format!("Host: {HOST}\r\n")),
        "{}",
        heads[1]
    );
    w.connection_record().await;
    let all = everything_recorded(&w);
    assert!(
        !all.contains(SECRET) && !all.contains("sk-rotated"),
        "{all}"
    );
    w.stop().await;
}

#[tokio::test]
async fn a_request_outside_the_rules_is_refused_with_the_reason_and_never_dialled() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let p = plan(&f.key, &f.ca, "\"POST /v1/messages\", \"GET /v1/models\"");
    let mut w = World::with_credentials(&p, up.addr, Some(ca.clone())).await;
    let s = w.forwarder().await.into_streams();
    for (id, req) in [
        (1, "DELETE /v1/messages HTTP/1.1\r\n\r\n"),
        (3, "GET /v1/modelsX HTTP/1.1\r\n\r\n"),
    ] {
        let answer = request(&s, id, &ca, req).await;
        assert!(
            answer.starts_with("HTTP/1.1 403 egress denied: "),
            "{req}: {answer}"
        );
        assert!(
            answer.contains("allowed: POST /v1/messages, GET /v1/models"),
            "{answer}"
        );
        let rec = w.connection_record().await;
        assert_eq!(
            (rec.verdict, rec.rule.as_str()),
            (Verdict::Denied, "credential-rule")
        );
    }
    // Pipelining is no way around them: one request per connection, the rest held back.
    let answer = request(
        &s,
        4,
        &ca,
        "GET /v1/models HTTP/1.1\r\n\r\nDELETE /v1/messages HTTP/1.1\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert_eq!(up.heads().len(), 1);
    assert!(up.heads()[0].starts_with("GET /v1/models HTTP/1.1"));
    assert!(!up.heads()[0].contains("DELETE"));
    w.connection_record().await;
    assert!(w.events().iter().any(|e| matches!(e,
        EgressEvent::CredentialInjected { rule: Some(r), .. } if r == "GET /v1/models")));
    assert!(!everything_recorded(&w).contains(SECRET));
    w.stop().await;
}

#[tokio::test]
async fn an_untrusted_upstream_or_a_missing_ca_fails_closed() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let other = TlsUpstream::start().await;
    let wrong = files(&other);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    // The upstream's certificate does not chain to upstream_ca: 502, nothing sent.
    let mut w =
        World::with_credentials(&plan(&f.key, &wrong.ca, ""), up.addr, Some(ca.clone())).await;
    let s = w.forwarder().await.into_streams();
    let answer = request(&s, 1, &ca, "GET / HTTP/1.1\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.1 502 egress proxy: TLS to api.example.test"),
        "{answer}"
    );
    assert!(up.heads().is_empty());
    let rec = w.connection_record().await;
    assert_eq!(
        (rec.verdict, rec.rule.as_str()),
        (Verdict::Failed, "upstream-tls")
    );
    w.stop().await;
    // No CA for the sandbox: the tunnel is cut, not opened without the credential's checks.
    let mut w = World::with_credentials(&plan(&f.key, &f.ca, ""), up.addr, None).await;
    let mut fw = w.forwarder().await;
    fw.open(1).await;
    fw.data(1, format!("CONNECT {HOST}:443 HTTP/1.1\r\n\r\n").as_bytes())
        .await;
    fw.read_until(1, b"\r\n\r\n").await;
    let (_, end) = fw.read_to_end(1).await;
    assert_eq!(end, End::Close);
    let rec = w.connection_record().await;
    assert_eq!(
        (rec.verdict, rec.rule.as_str()),
        (Verdict::Failed, "credential-unavailable")
    );
    assert!(w.dialed().is_empty());
    w.stop().await;
}

#[tokio::test]
async fn a_chunked_body_goes_up_to_its_last_chunk_and_nothing_after() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let mut w = World::with_credentials(&plan(&f.key, &f.ca, ""), up.addr, Some(ca.clone())).await;
    let s = w.forwarder().await.into_streams();
    let body = "4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n";
    let answer = request(
        &s,
        1,
        &ca,
        &format!("POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{body}DELETE /v1/messages HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let heads = up.heads();
    assert_eq!(heads.len(), 1);
    assert!(
        heads[0].ends_with(&format!("\r\n\r\n{body}")),
        "{:?}",
        heads[0]
    );
    assert!(!heads[0].contains("DELETE"), "{:?}", heads[0]);
    assert!(
        heads[0].contains("Transfer-Encoding: chunked\r\n"),
        "{:?}",
        heads[0]
    );
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Allowed, "{rec:?}");
    // A body the proxy would read one way and an upstream another is refused, not forwarded.
    let answer = request(
        &s,
        2,
        &ca,
        "POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nWiki\r\n0\r\n\r\n",
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 400 egress proxy: bad request body: a chunk size"),
        "{answer}"
    );
    assert_eq!(
        up.heads().len(),
        1,
        "the refused request reached the upstream"
    );
    let rec = w.connection_record().await;
    assert_eq!(
        (rec.verdict, rec.rule.as_str()),
        (Verdict::Denied, "bad-request"),
        "{rec:?}"
    );
    w.stop().await;
}

/// The attacks on the rules from inside the sandbox (issue 40), each refused with a 403 naming
/// its check and never reaching the upstream; the allowed request beside them gets its key.
#[tokio::test]
async fn overrides_and_paths_a_server_reads_otherwise_are_refused_before_the_rules() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let p = plan(&f.key, &f.ca, "\"POST /v1/messages\", \"GET /v1/models\"");
    let mut w = World::with_credentials(&p, up.addr, Some(ca.clone())).await;
    let s = w.forwarder().await.into_streams();
    for (id, req, rule, why) in [
        (
            1,
            "POST /v1/messages HTTP/1.1\r\nX-HTTP-Method-Override: DELETE\r\nContent-Length: 0\r\n\r\n",
            "credential-override",
            "header X-HTTP-Method-Override is refused with the credential for api.example.test",
        ),
        (
            2,
            "GET /v1/models HTTP/1.1\r\nX-Original-URL: /admin/keys\r\n\r\n",
            "credential-override",
            "header X-Original-URL is refused",
        ),
        (
            3,
            "GET /v1/models HTTP/1.1\r\nx_rewrite_url: /admin/keys\r\n\r\n",
            "credential-override",
            "header x_rewrite_url is refused",
        ),
        (
            4,
            "POST /v1/messages?_method=DELETE HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "credential-override",
            "query parameter _method is refused",
        ),
        (
            5,
            "GET /v1/models/..;/admin/keys HTTP/1.1\r\n\r\n",
            "credential-path",
            "GET /v1/models/..;/admin/keys has a ; parameter",
        ),
        (
            6,
            "GET /v1/models/../admin HTTP/1.1\r\n\r\n",
            "credential-path",
            "has a dot segment (. or ..)",
        ),
        (
            7,
            "GET /v1/models/%2e%2e/admin HTTP/1.1\r\n\r\n",
            "credential-path",
            "has an escaped dot (%2e)",
        ),
    ] {
        let answer = request(&s, id, &ca, req).await;
        assert!(
            answer.starts_with("HTTP/1.1 403 egress denied: ") && answer.contains(why),
            "{req}: {answer}"
        );
        let rec = w.connection_record().await;
        assert_eq!(
            (rec.verdict, rec.rule.as_str()),
            (Verdict::Denied, rule),
            "{req}"
        );
    }
    assert!(up.heads().is_empty(), "{:#?}", up.heads());
    // Control: the allowed request, with a workload header a server could read as the
    // credential's, gets the key and only the key.
    let answer = request(
        &s,
        8,
        &ca,
        "GET /v1/models HTTP/1.1\r\nX_Api_Key: workload-guess\r\nX.Api.Key: workload-guess\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let heads = up.heads();
    assert_eq!(heads.len(), 1);
    assert!(!heads[0].contains("workload-guess"), "{}", heads[0]);
    assert!(
        heads[0].contains(&format!("x-api-key: {SECRET}\r\n")),
        "{}",
        heads[0]
    );
    w.connection_record().await;
    assert!(w.events().iter().any(|e| matches!(
        e,
        EgressEvent::CredentialInjected {
            replaced_workload_header: true,
            ..
        }
    )));
    w.stop().await;
}

/// A CONNECT to a credential host's address by number (which `allow_cidrs` admits) is refused
/// before any tunnel, however the address is spelled; another address in the range is not.
#[tokio::test]
async fn a_credential_hosts_address_by_number_is_refused_not_tunnelled() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    // The fake resolver answers 203.0.113.10 for the host.
    let p = policy(&[
        "allow = [\"api.example.test\"]",
        "allow_cidrs = [\"203.0.113.0/24\", \"::ffff:203.0.113.0/120\"]",
        &f.upstream_ca(),
        &f.plain_credential(),
    ]);
    let mut w = World::with_credentials(&p, up.addr, Some(ca)).await;
    let s = w.forwarder().await.into_streams();
    for (id, target) in [(1, "203.0.113.10:443"), (2, "[::ffff:203.0.113.10]:443")] {
        let (head, _) = s
            .connect(id, format!("CONNECT {target} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        let head = String::from_utf8_lossy(&head).into_owned();
        assert!(
            head.starts_with("HTTP/1.1 403 egress denied: ")
                && head.contains(
                    "is an address of api.example.test, which gets a credential from the proxy"
                ),
            "{target}: {head}"
        );
        let rec = w.connection_record().await;
        assert_eq!(
            (rec.verdict, rec.rule.as_str()),
            (Verdict::Denied, "credential-host-address"),
            "{target}"
        );
    }
    assert!(w.dialed().is_empty(), "{:?}", w.dialed());
    // Control: another address the range admits is tunnelled.
    let (head, _io) = s
        .connect(3, b"CONNECT 203.0.113.11:443 HTTP/1.1\r\n\r\n")
        .await;
    assert_eq!(head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    assert_eq!(w.dialed().len(), 1);
    drop(_io);
    w.connection_record().await;
    w.stop().await;

    // The address the policy's `hosts` gives the host counts the same, without DNS.
    let p = policy(&[
        "allow = [\"api.example.test\"]",
        "allow_cidrs = [\"10.213.0.0/16\"]",
        "hosts = { \"api.example.test\" = \"10.213.7.2\" }",
        &f.upstream_ca(),
        &f.plain_credential(),
    ]);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let mut w = World::with_credentials(&p, up.addr, Some(ca)).await;
    let s = w.forwarder().await.into_streams();
    let (head, _) = s
        .connect(1, b"CONNECT 10.213.7.2:443 HTTP/1.1\r\n\r\n")
        .await;
    assert!(
        head.starts_with(b"HTTP/1.1 403 "),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let rec = w.connection_record().await;
    assert_eq!(rec.rule, "credential-host-address");
    assert!(w.resolved_names().is_empty(), "{:?}", w.resolved_names());
    w.stop().await;
}

/// Another allowlisted name whose address is a credential host's (here through the policy's
/// `hosts`, as a CNAME or a wildcard entry would do through DNS) is refused like the number;
/// a name at another address still tunnels.
#[tokio::test]
async fn another_name_at_a_credential_hosts_address_is_refused_not_tunnelled() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let p = policy(&[
        "allow = [\"api.example.test\", \"alias.example.test\", \"other.example.test\"]",
        "allow_cidrs = [\"10.213.0.0/16\"]",
        "hosts = { \"api.example.test\" = \"10.213.7.2\", \"alias.example.test\" = \"10.213.7.2\", \"other.example.test\" = \"10.213.7.3\" }",
        &f.upstream_ca(),
        &f.plain_credential(),
    ]);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let mut w = World::with_credentials(&p, up.addr, Some(ca)).await;
    let s = w.forwarder().await.into_streams();
    let (head, _) = s
        .connect(1, b"CONNECT alias.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    let head = String::from_utf8_lossy(&head).into_owned();
    assert!(
        head.starts_with(
            "HTTP/1.1 403 egress denied: 10.213.7.2 is an address of api.example.test"
        ),
        "{head}"
    );
    let rec = w.connection_record().await;
    assert_eq!(
        (rec.verdict, rec.rule.as_str(), rec.host.as_str()),
        (
            Verdict::Denied,
            "credential-host-address",
            "alias.example.test"
        )
    );
    // Control: another name of the list, at another address, tunnels.
    let (head, _io) = s
        .connect(2, b"CONNECT other.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    assert_eq!(head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    w.stop().await;
}

/// A credential for the host's port 443 is not added on another port the allowlist names:
/// there the tunnel is the workload's own TLS, and the upstream sees no key.
#[tokio::test]
async fn a_credential_is_added_on_its_port_only() {
    let up = TlsUpstream::start().await;
    let f = files(&up);
    let ca = Arc::new(SandboxCa::new("sb", &[HOST.to_string()]).unwrap());
    let p = policy(&[
        "allow = [\"api.example.test\", \"api.example.test:8443\"]",
        &f.upstream_ca(),
        &f.plain_credential(),
    ]);
    let mut w = World::with_credentials(&p, up.addr, Some(ca)).await;
    let s = w.forwarder().await.into_streams();
    let (head, io) = s
        .connect(
            1,
            format!("CONNECT {HOST}:8443 HTTP/1.1\r\n\r\n").as_bytes(),
        )
        .await;
    assert_eq!(head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    // The workload's TLS reaches the upstream itself (it trusts the upstream's CA, not the
    // sandbox's): nothing was terminated.
    let mut roots = rustls::RootCertStore::empty();
    for c in
        <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_slice_iter(
            up.ca_pem.as_bytes(),
        )
    {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(HOST).unwrap(), io)
        .await
        .expect("the upstream's own certificate, not a leaf of the sandbox's CA");
    tls.write_all(b"GET /v1/models HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer).await;
    assert!(answer.starts_with(b"HTTP/1.1 200 OK"));
    let heads = up.heads();
    assert_eq!(heads.len(), 1);
    assert!(
        !heads[0].to_ascii_lowercase().contains("x-api-key"),
        "{}",
        heads[0]
    );
    assert!(!w
        .events()
        .iter()
        .any(|e| matches!(e, EgressEvent::CredentialInjected { .. })));
    // The workload hangs up: its tunnel's record follows.
    drop(tls);
    let rec = w.connection_record().await;
    assert_eq!(
        (rec.verdict, rec.rule.as_str()),
        (Verdict::Allowed, "api.example.test:8443")
    );
    w.stop().await;
}
