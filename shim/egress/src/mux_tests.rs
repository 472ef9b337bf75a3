//! The host end of CONNECT (protocol 3): streams the shim opens to a published port, against
//! a scripted forwarder on in-memory pipes.

use std::time::Duration;

use gvisor_hardened_forwarder::{Frame, HOST_STREAM};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;

/// Only a broken session gets near it.
const PATIENCE: Duration = Duration::from_secs(10);

/// The forwarder's ends of its stdio.
struct Fwd {
    stdin: DuplexStream,
    stdout: DuplexStream,
}

impl Fwd {
    async fn send(&mut self, f: Frame) {
        self.stdout.write_all(&f.to_bytes()).await.unwrap();
    }

    async fn next(&mut self) -> Frame {
        let read = async {
            let mut head = [0u8; HEADER_LEN];
            self.stdin.read_exact(&mut head).await.unwrap();
            let h = parse_header(&head).unwrap();
            let mut payload = vec![0u8; h.len as usize];
            self.stdin.read_exact(&mut payload).await.unwrap();
            frame_from_parts(h, payload).unwrap()
        };
        tokio::time::timeout(PATIENCE, read)
            .await
            .expect("the shim sent nothing")
    }
}

/// A session whose frames are carried by a task of its own, its connector, the forwarder's
/// ends, and the task (which returns why the session ended).
fn session() -> (Connector, Fwd, tokio::task::JoinHandle<SessionEnd>) {
    let (shim_out, fwd_stdin) = tokio::io::duplex(1 << 20);
    let (fwd_stdout, shim_in) = tokio::io::duplex(1 << 20);
    let mut session = Session::new(shim_in, shim_out);
    let connector = session.connector();
    let run = tokio::spawn(async move { session.run(|_| {}).await });
    (
        connector,
        Fwd {
            stdin: fwd_stdin,
            stdout: fwd_stdout,
        },
        run,
    )
}

#[tokio::test]
async fn a_connect_the_forwarder_accepts_is_a_stream_carrying_bytes_both_ways() {
    let (connector, mut fwd, _run) = session();
    let client = tokio::spawn(async move {
        let mut s = connector
            .connect(8080, "10.0.0.9:5555".into())
            .await
            .unwrap();
        assert_eq!(s.peer(), "10.0.0.9:5555");
        s.send(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let answer = s.recv().await;
        s.send_eof();
        answer
    });
    let Frame::Connect { stream, port } = fwd.next().await else {
        panic!("expected CONNECT")
    };
    assert_eq!(port, 8080);
    assert_ne!(stream & HOST_STREAM, 0, "an id in the shim's half");
    fwd.send(Frame::Accepted { stream }).await;
    assert_eq!(
        fwd.next().await,
        Frame::Data {
            stream,
            data: b"GET / HTTP/1.1\r\n\r\n".to_vec()
        }
    );
    fwd.send(Frame::Data {
        stream,
        data: b"HTTP/1.1 200 OK\r\n\r\n".to_vec(),
    })
    .await;
    assert_eq!(
        client.await.unwrap(),
        Inbound::Data(b"HTTP/1.1 200 OK\r\n\r\n".to_vec())
    );
}

#[tokio::test]
async fn a_connect_the_forwarder_closes_is_refused_with_its_port() {
    let (connector, mut fwd, _run) = session();
    let client = tokio::spawn(async move { connector.connect(9090, "peer".into()).await.err() });
    let Frame::Connect { stream, .. } = fwd.next().await else {
        panic!("expected CONNECT")
    };
    fwd.send(Frame::Close { stream }).await;
    assert_eq!(client.await.unwrap(), Some(ConnectRefused { port: 9090 }));
}

#[tokio::test]
async fn two_connects_at_once_get_their_own_streams() {
    let (connector, mut fwd, _run) = session();
    let c2 = connector.clone();
    let a = tokio::spawn(async move { connector.connect(1, "a".into()).await.map(|s| s.id()) });
    let b = tokio::spawn(async move { c2.connect(2, "b".into()).await.map(|s| s.id()) });
    let mut ids = Vec::new();
    for _ in 0..2 {
        let Frame::Connect { stream, .. } = fwd.next().await else {
            panic!("expected CONNECT")
        };
        ids.push(stream);
        fwd.send(Frame::Accepted { stream }).await;
    }
    assert_ne!(ids[0], ids[1]);
    let mut got = vec![a.await.unwrap().unwrap(), b.await.unwrap().unwrap()];
    got.sort();
    ids.sort();
    assert_eq!(got, ids);
}

#[tokio::test]
async fn an_accepted_stream_nobody_waits_for_is_reset() {
    let (_connector, mut fwd, _run) = session();
    let stream = HOST_STREAM | 99;
    fwd.send(Frame::Accepted { stream }).await;
    assert_eq!(fwd.next().await, Frame::Close { stream });
}

#[tokio::test]
async fn a_connect_sent_by_the_forwarder_ends_the_session() {
    let (_connector, mut fwd, run) = session();
    fwd.send(Frame::Connect {
        stream: HOST_STREAM | 1,
        port: 22,
    })
    .await;
    let end = tokio::time::timeout(PATIENCE, run).await.unwrap().unwrap();
    assert!(matches!(end, SessionEnd::Protocol(_)), "{end:?}");
}
