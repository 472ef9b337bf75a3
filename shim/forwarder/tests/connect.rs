//! The real forwarder binary carrying connections the shim opens (CONNECT, protocol 3) to a
//! published port on the sandbox's loopback. Run here on the host's loopback with a server
//! the test starts: the forwarder dials 127.0.0.1 either way.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use gvisor_hardened_forwarder::{read_frame, Frame, HOST_STREAM, VERSION};

/// Long enough for a loaded machine; only a broken forwarder gets near it.
const PATIENCE: Duration = Duration::from_secs(20);

struct Forwarder {
    child: Child,
    stdin: ChildStdin,
    frames: mpsc::Receiver<Frame>,
}

impl Forwarder {
    fn start(args: &[&str]) -> Forwarder {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gvisor-hardened-forwarder"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (tx, frames) = mpsc::channel();
        thread::spawn(move || {
            while let Ok(Some(f)) = read_frame(&mut stdout) {
                if tx.send(f).is_err() {
                    break;
                }
            }
        });
        Forwarder {
            child,
            stdin,
            frames,
        }
    }

    fn send(&mut self, f: Frame) {
        self.stdin.write_all(&f.to_bytes()).unwrap();
    }

    fn next(&self) -> Frame {
        self.frames
            .recv_timeout(PATIENCE)
            .expect("the forwarder said nothing")
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server inside "the sandbox" that echoes one connection in upper case, then closes.
fn upper_case_echo() -> (u16, thread::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = thread::spawn(move || {
        let (mut tcp, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        tcp.read_to_end(&mut got).unwrap();
        tcp.write_all(&got.to_ascii_uppercase()).unwrap();
        tcp.shutdown(Shutdown::Write).unwrap();
        got
    });
    (port, server)
}

#[test]
fn a_connect_to_a_published_port_reaches_the_server_inside_and_carries_bytes_both_ways() {
    let (port, server) = upper_case_echo();
    let mut fwd = Forwarder::start(&["--listen", "none", "--ingress", &port.to_string()]);
    assert_eq!(
        fwd.next(),
        Frame::Hello {
            version: VERSION,
            listen: String::new()
        }
    );
    let stream = HOST_STREAM | 1;
    fwd.send(Frame::Connect { stream, port });
    assert_eq!(fwd.next(), Frame::Accepted { stream });
    fwd.send(Frame::Data {
        stream,
        data: b"hello from the client".to_vec(),
    });
    fwd.send(Frame::Eof { stream });
    assert_eq!(server.join().unwrap(), b"hello from the client");
    let mut answer = Vec::new();
    loop {
        match fwd.next() {
            Frame::Data { stream: s, data } if s == stream => answer.extend(data),
            Frame::Credit { stream: s, .. } if s == stream => {}
            Frame::Eof { stream: s } if s == stream => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(answer, b"HELLO FROM THE CLIENT");
}

#[test]
fn a_connect_to_a_port_not_published_is_closed_and_never_dialled() {
    let (published, _server) = upper_case_echo();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let other_port = other.local_addr().unwrap().port();
    let mut fwd = Forwarder::start(&["--listen", "none", "--ingress", &published.to_string()]);
    fwd.next();
    let stream = HOST_STREAM | 5;
    fwd.send(Frame::Connect {
        stream,
        port: other_port,
    });
    assert_eq!(fwd.next(), Frame::Close { stream });
    // The refusal is decided before any dial: nothing ever knocked.
    assert_eq!(
        other.accept().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
}

#[test]
fn a_connect_to_a_published_port_nobody_listens_on_is_closed() {
    let gone = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = gone.local_addr().unwrap().port();
    drop(gone);
    let mut fwd = Forwarder::start(&["--listen", "none", "--ingress", &port.to_string()]);
    fwd.next();
    let stream = HOST_STREAM | 2;
    fwd.send(Frame::Connect { stream, port });
    assert_eq!(fwd.next(), Frame::Close { stream });
}

#[test]
fn with_neither_a_listener_nor_published_ports_the_forwarder_refuses_to_run() {
    let fwd = Forwarder::start(&["--listen", "none"]);
    match fwd.next() {
        Frame::Fatal { message } => assert!(message.contains("nothing to carry"), "{message}"),
        other => panic!("expected FATAL, got {other:?}"),
    }
}

#[test]
fn a_bad_published_port_is_refused_by_name() {
    let fwd = Forwarder::start(&["--listen", "none", "--ingress", "80,http"]);
    match fwd.next() {
        Frame::Fatal { message } => assert!(message.contains("\"http\""), "{message}"),
        other => panic!("expected FATAL, got {other:?}"),
    }
}
