//! Published ports against a scripted forwarder on in-memory pipes: a real TCP client on the
//! host's loopback, the listener, the mux, and a forwarder that answers CONNECT as told.

use std::sync::Mutex;

use gvisor_hardened_forwarder::{frame_from_parts, parse_header, Frame, HEADER_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::mux::Session;

/// Only a broken path gets near it.
const PATIENCE: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Records(Mutex<Vec<EgressAudit>>, Notify);

impl EgressAuditSink for Arc<Records> {
    fn record(&self, rec: EgressAudit) {
        self.0.lock().unwrap().push(rec);
        self.1.notify_waiters();
    }
}

impl Records {
    /// The next `n` ingress records, waited for.
    async fn ingress(&self, n: usize) -> Vec<IngressRecord> {
        let wait = async {
            loop {
                let notified = self.1.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let got: Vec<IngressRecord> = self
                    .0
                    .lock()
                    .unwrap()
                    .iter()
                    .filter_map(|r| match &r.event {
                        EgressEvent::IngressConnection(i) => Some(i.clone()),
                        _ => None,
                    })
                    .collect();
                if got.len() >= n {
                    return got;
                }
                notified.await;
            }
        };
        tokio::time::timeout(PATIENCE, wait)
            .await
            .expect("the records came")
    }
}

/// The forwarder's side: accepts CONNECTs to `open_ports`, closes the rest; answers every
/// DATA in upper case with its credit, and EOF with EOF.
async fn forwarder(mut stdin: DuplexStream, mut stdout: DuplexStream, open_ports: Vec<u16>) {
    loop {
        let mut head = [0u8; HEADER_LEN];
        if stdin.read_exact(&mut head).await.is_err() {
            return;
        }
        let h = parse_header(&head).unwrap();
        let mut payload = vec![0u8; h.len as usize];
        stdin.read_exact(&mut payload).await.unwrap();
        let answers = match frame_from_parts(h, payload).unwrap() {
            Frame::Connect { stream, port } if open_ports.contains(&port) => {
                vec![Frame::Accepted { stream }]
            }
            Frame::Connect { stream, .. } => vec![Frame::Close { stream }],
            Frame::Data { stream, data } => vec![
                Frame::Credit {
                    stream,
                    bytes: data.len() as u32,
                },
                Frame::Data {
                    stream,
                    data: data.to_ascii_uppercase(),
                },
            ],
            Frame::Eof { stream } => vec![Frame::Eof { stream }],
            _ => vec![],
        };
        for f in answers {
            stdout.write_all(&f.to_bytes()).await.unwrap();
        }
    }
}

struct World {
    records: Arc<Records>,
    listen: SocketAddr,
    _serve: tokio::task::JoinHandle<()>,
}

/// A sandbox publishing `port`, whose forwarder has `open_ports` listening inside; `ready`:
/// a forwarder is running.
async fn world(port: u16, open_ports: Vec<u16>, limits: IngressLimits, ready: bool) -> World {
    let (shim_out, fwd_in) = tokio::io::duplex(1 << 20);
    let (fwd_out, shim_in) = tokio::io::duplex(1 << 20);
    let mut session = Session::new(shim_in, shim_out);
    let (tx, rx) = watch::channel(ready.then(|| session.connector()));
    tokio::spawn(async move {
        let _tx = tx;
        session.run(|_| {}).await
    });
    tokio::spawn(forwarder(fwd_in, fwd_out, open_ports));
    let records = Arc::new(Records::default());
    let ingress = Arc::new(Ingress::new(
        SandboxRef {
            sandbox_id: "pod".into(),
            container_id: "pod".into(),
            policy: "gvisor-hardened-agent".into(),
        },
        Arc::new(records.clone()),
        limits,
        rx,
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let listen = listener.local_addr().unwrap();
    World {
        records,
        listen,
        _serve: tokio::spawn(ingress.serve(listener, port)),
    }
}

fn limits() -> IngressLimits {
    IngressLimits {
        max_connections: 16,
        max_connection_rate: 100,
        max_bytes: 1 << 20,
        idle: Duration::from_secs(300),
    }
}

/// Sends `what`, half-closes, and reads the answer to its end; `Err` when the connection was
/// reset.
async fn ask(listen: SocketAddr, what: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut c = tokio::net::TcpStream::connect(listen).await?;
    c.write_all(what).await?;
    c.shutdown().await?;
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, c.read_to_end(&mut answer))
        .await
        .expect("an answer or a reset, not a hang")?;
    Ok(answer)
}

#[tokio::test]
async fn a_client_reaches_the_server_inside_through_the_published_port_and_is_recorded() {
    let w = world(8080, vec![8080], limits(), true).await;
    let answer = ask(w.listen, b"hello sandbox").await.unwrap();
    assert_eq!(answer, b"HELLO SANDBOX");
    let rec = &w.records.ingress(1).await[0];
    assert_eq!(rec.port, 8080);
    assert_eq!(rec.verdict, Verdict::Allowed, "{rec:?}");
    assert_eq!(rec.listen, w.listen.to_string());
    assert_eq!((rec.bytes_in, rec.bytes_out), (13, 13));
    assert!(rec.reason.is_none(), "{rec:?}");
}

#[tokio::test]
async fn a_port_nothing_serves_inside_is_reset_at_once_and_recorded_as_denied() {
    let w = world(8080, vec![], limits(), true).await;
    let answer = ask(w.listen, b"anyone?").await;
    assert!(answer.map_or(true, |a| a.is_empty()), "no answer");
    let rec = &w.records.ingress(1).await[0];
    assert_eq!(rec.verdict, Verdict::Denied);
    assert_eq!(rec.rule, "sandbox");
    assert!(rec.reason.as_deref().unwrap().contains("8080"), "{rec:?}");
}

#[tokio::test]
async fn without_a_forwarder_running_a_connection_is_refused_and_says_why() {
    let w = world(8080, vec![8080], limits(), false).await;
    let _ = ask(w.listen, b"x").await;
    let rec = &w.records.ingress(1).await[0];
    assert_eq!(rec.verdict, Verdict::Denied);
    assert_eq!(rec.rule, "forwarder");
}

#[tokio::test]
async fn connections_past_the_rate_cap_are_refused_by_the_caps_name() {
    let mut l = limits();
    l.max_connection_rate = 1;
    let w = world(8080, vec![8080], l, true).await;
    assert_eq!(ask(w.listen, b"one").await.unwrap(), b"ONE");
    let _ = ask(w.listen, b"two").await;
    let recs = w.records.ingress(2).await;
    let refused: Vec<_> = recs
        .iter()
        .filter(|r| r.verdict == Verdict::Denied)
        .collect();
    assert_eq!(refused.len(), 1, "{recs:?}");
    assert_eq!(refused[0].rule, "max_connection_rate");
}

#[tokio::test]
async fn the_byte_cap_cuts_a_connection_that_crosses_it() {
    let mut l = limits();
    l.max_bytes = 8;
    let w = world(8080, vec![8080], l, true).await;
    let _ = ask(w.listen, b"more than eight bytes").await;
    let rec = &w.records.ingress(1).await[0];
    assert_eq!(rec.verdict, Verdict::Cut, "{rec:?}");
    assert_eq!(rec.rule, "max_bytes");
    // Nothing past the cap reached the sandbox.
    assert_eq!(rec.bytes_in, 0, "{rec:?}");
}

#[test]
fn a_listener_without_a_namespace_is_in_this_processs() {
    let l = listen_in_netns(None, "127.0.0.1:0".parse().unwrap()).unwrap();
    let port = l.local_addr().unwrap().port();
    // The same namespace: the port is taken here.
    let again = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap_err();
    assert_eq!(again.kind(), std::io::ErrorKind::AddrInUse);
}

/// setns and unshare need CAP_SYS_ADMIN: with the tests that need root (`host-tests`).
#[cfg(feature = "host-tests")]
#[test]
fn a_listener_made_in_another_network_namespace_listens_there_and_not_here() {
    // A namespace of this test's own, held by a thread until the test ends.
    let (path_tx, path_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let tid = nix::unistd::gettid();
        path_tx
            .send(format!("/proc/self/task/{tid}/ns/net"))
            .unwrap();
        let _ = done_rx.recv();
    });
    let path = std::path::PathBuf::from(path_rx.recv().unwrap());
    let l = listen_in_netns(Some(&path), "127.0.0.1:0".parse().unwrap()).unwrap();
    let port = l.local_addr().unwrap().port();
    // Here the port is free: the listener is in the other namespace.
    std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    drop(done_tx);
    holder.join().unwrap();
}

#[test]
fn a_missing_namespace_is_an_error_naming_it() {
    let e = listen_in_netns(
        Some(std::path::Path::new("/nonexistent/netns")),
        "127.0.0.1:0".parse().unwrap(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/netns"), "{e}");
}
