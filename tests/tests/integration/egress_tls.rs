//! A real TLS handshake through the real forwarder (run on the host, outside a sandbox, so a
//! stock TLS client can drive it) and the shim's proxy with `require_sni`: OpenSSL's client
//! through CONNECT to an `openssl s_server` on loopback whose certificate the test made. The
//! SNI check reads OpenSSL's own ClientHello (TLS 1.3, key shares and all), not a synthetic one.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gvisor_hardened_core::egress::audit::{MemorySink, SandboxRef, Verdict};
use gvisor_hardened_core::egress::guard::Guard;
use gvisor_hardened_core::egress::net::{NetnsDialer, SystemResolver};
use gvisor_hardened_core::egress::supervisor::{ForwarderIo, ForwarderPipes, ForwarderSpawner};
use gvisor_hardened_core::egress::{EgressSupervisor, Proxy, SupervisorOptions};
use gvisor_hardened_tests::egress::forwarder_binary;
use gvisor_hardened_tests::poll_until;
use policy_injector::{EgressPlan, Policy};

const WAIT: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The forwarder as a plain host process listening on `listen`.
struct HostForwarder {
    listen: String,
}

#[async_trait]
impl ForwarderSpawner for HostForwarder {
    async fn spawn(&self) -> std::io::Result<ForwarderIo> {
        let mut child = tokio::process::Command::new(forwarder_binary())
            .args(["--listen", &self.listen])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let pid = child.id().unwrap() as i32;
        Ok(ForwarderIo {
            pipes: ForwarderPipes::Streams {
                stdin: Box::new(stdin),
                stdout: Box::new(stdout),
            },
            exited: Box::pin(async move { format!("{:?}", child.wait().await) }),
            kill: Box::new(move || {
                // SAFETY: plain kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                Box::pin(async {})
            }),
        })
    }
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `openssl s_client` through the proxy; its stdout and stderr.
fn s_client(proxy: &str, port: u16, servername: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new("openssl");
    cmd.args(["s_client", "-proxy", proxy, "-connect"])
        .arg(format!("tls.example.test:{port}"))
        .args(["-ign_eof", "-verify_quiet"]);
    match servername {
        Some(n) => cmd.args(["-servername", n]),
        None => cmd.arg("-noservername"),
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl (hack/lib.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.0\r\n\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_tls_tunnel_needs_the_sni_of_its_connect_host() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=tls.example.test"])
        .args(["-addext", "subjectAltName=DNS:tls.example.test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success());
    let port = free_port();
    let _server = Server(
        Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    poll_until("s_server listens", WAIT, || {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok()
    })
    .unwrap();

    let src = format!(
        "[network.egress]\nallow = [\"tls.example.test:{port}\"]\nallow_cidrs = [\"127.0.0.1/32\"]\n\
         hosts = {{ \"tls.example.test\" = \"127.0.0.1\" }}\nrequire_sni = true\n"
    );
    let plan = EgressPlan::from_policy(&Policy::from_toml_str(&src).unwrap().network.egress)
        .unwrap()
        .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sink = Arc::new(MemorySink::default());
    let sup = {
        let _enter = rt.enter();
        let proxy = Proxy::new(
            plan.clone(),
            Guard::new(plan.allow_cidrs.clone(), Vec::new()),
            SandboxRef {
                sandbox_id: "tls".into(),
                container_id: "tls".into(),
                policy: "egress-tls".into(),
            },
            Arc::new(SystemResolver),
            Arc::new(NetnsDialer::new(None, Duration::from_secs(5))),
            sink.clone(),
        );
        EgressSupervisor::start(
            Arc::new(proxy),
            Arc::new(HostForwarder {
                listen: listen.clone(),
            }),
            SupervisorOptions::default(),
            Arc::new(|| true),
        )
    };
    rt.block_on(sup.wait_ready(WAIT)).unwrap();

    let (ok, out) = s_client(&listen, port, Some("tls.example.test"));
    assert!(ok, "{out}");
    assert!(out.contains("s_server"), "no page from the upstream: {out}");
    let (ok, out) = s_client(&listen, port, Some("other.example.test"));
    assert!(
        !ok || !out.contains("s_server"),
        "fronted tunnel worked: {out}"
    );
    let (ok, out) = s_client(&listen, port, None);
    assert!(
        !ok || !out.contains("s_server"),
        "tunnel without SNI worked: {out}"
    );
    rt.block_on(sup.stop());

    let got: Vec<(Verdict, String, Option<String>)> = sink
        .connections()
        .into_iter()
        .map(|c| (c.verdict, c.rule, c.sni))
        .collect();
    assert_eq!(
        got,
        [
            (
                Verdict::Allowed,
                format!("tls.example.test:{port}"),
                Some("tls.example.test".to_string())
            ),
            (Verdict::Denied, "sni-mismatch".to_string(), None),
            (Verdict::Denied, "sni-missing".to_string(), None),
        ]
    );
}
