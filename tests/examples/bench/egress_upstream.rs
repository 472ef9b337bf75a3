//! The upstream both egress paths reach: a network namespace of the bench's own (veth pair) with
//! busybox httpd on port 8080 for the GETs, and on port 8443 a "TLS-shaped" server for the
//! CONNECT tunnels. With `require_sni` on, our proxy reads a ClientHello before it dials, so the
//! tunnel must start with one, and busybox httpd cannot take that: this server skips one TLS
//! record, then answers the HTTP request after it exactly as httpd would (status, length,
//! body, close). No TLS: the bench's client is not a TLS client, and the handshake's crypto
//! would cost both paths the same.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use gvisor_hardened_tests::egress::UpstreamNetns;

use crate::contenders::BenchResult;

/// Port of busybox httpd (plain GETs).
pub const HTTP_PORT: u16 = 8080;
/// Port of the TLS-shaped server (CONNECT tunnels).
pub const TLS_PORT: u16 = 8443;
/// The name the GETs ask for.
pub const HTTP_HOST: &str = "upstream.example.test";
/// The name the tunnels ask for (CONNECT host and SNI).
pub const TLS_HOST: &str = "tls.example.test";
/// The large download.
pub const BIG_PATH: &str = "/big";
pub const BIG_BYTES: usize = 100 << 20;
/// The small request's body.
pub const SMALL_PATH: &str = "/small";
pub const SMALL_BYTES: usize = 1024;

/// The files both servers serve: deterministic bytes, so a short or garbled download would show
/// as a length mismatch in the client.
fn files() -> BTreeMap<&'static str, Arc<Vec<u8>>> {
    let pattern = |n: usize| (0..n).map(|i| (i % 251) as u8).collect::<Vec<u8>>();
    BTreeMap::from([
        (&BIG_PATH[1..], Arc::new(pattern(BIG_BYTES))),
        (&SMALL_PATH[1..], Arc::new(pattern(SMALL_BYTES))),
    ])
}

pub struct Upstream {
    pub ns: UpstreamNetns,
    listener: Arc<TcpListener>,
    /// Tunnels whose ClientHello the TLS-shaped server has read: an idle tunnel counted here
    /// is open end to end (our proxy dials only after its SNI check).
    hellos: Arc<AtomicUsize>,
}

impl Upstream {
    pub fn start() -> BenchResult<Upstream> {
        let mut ns = UpstreamNetns::create()?;
        let inside = ns.inside_addr();
        let files = files();
        // The small file first: `serve` polls the first file until httpd answers.
        let listed: Vec<(&str, &[u8])> = [&SMALL_PATH[1..], &BIG_PATH[1..]]
            .iter()
            .map(|k| (*k, files[k].as_slice()))
            .collect();
        ns.serve(&inside, HTTP_PORT, &listed)?;
        let listener = Arc::new(listen_inside(&ns, &inside, TLS_PORT)?);
        let hellos = Arc::new(AtomicUsize::new(0));
        let (l, h) = (listener.clone(), hellos.clone());
        thread::Builder::new()
            .name("tls-shaped".into())
            .spawn(move || accept_loop(&l, &h, &files))?;
        Ok(Upstream {
            ns,
            listener,
            hellos,
        })
    }

    /// The address both names resolve to.
    pub fn addr(&self) -> String {
        self.ns.inside_addr()
    }

    pub fn hellos(&self) -> usize {
        self.hellos.load(Ordering::Acquire)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // shutdown(2) on a listening socket wakes its accept() with an error: the loop ends.
        // SAFETY: shutdown on a descriptor the listener owns and keeps open.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

/// A listener made by a thread that entered the namespace (setns changes only that thread).
fn listen_inside(ns: &UpstreamNetns, addr: &str, port: u16) -> BenchResult<TcpListener> {
    let path = ns.path();
    let netns = File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let addr = format!("{addr}:{port}");
    let listener = thread::spawn(move || -> std::io::Result<TcpListener> {
        // SAFETY: setns on an open namespace descriptor, for this short-lived thread only.
        if unsafe { libc::setns(netns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        TcpListener::bind(&addr)
    })
    .join()
    .map_err(|_| "the namespace thread panicked")??;
    Ok(listener)
}

fn accept_loop(
    listener: &TcpListener,
    hellos: &Arc<AtomicUsize>,
    files: &BTreeMap<&'static str, Arc<Vec<u8>>>,
) {
    while let Ok((conn, _)) = listener.accept() {
        let (hellos, files) = (hellos.clone(), files.clone());
        let spawned = thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            let _ = serve(conn, &hellos, &files);
        });
        if spawned.is_err() {
            return;
        }
    }
}

/// One tunnel: a TLS record (skipped), an HTTP request head, the file or a 404, close.
fn serve(
    mut conn: TcpStream,
    hellos: &AtomicUsize,
    files: &BTreeMap<&'static str, Arc<Vec<u8>>>,
) -> std::io::Result<()> {
    let _ = conn.set_nodelay(true);
    let mut header = [0u8; 5];
    conn.read_exact(&mut header)?;
    if header[0] != 22 {
        return conn.write_all(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    }
    let len = u16::from_be_bytes([header[3], header[4]]) as usize;
    let mut record = vec![0u8; len];
    conn.read_exact(&mut record)?;
    hellos.fetch_add(1, Ordering::AcqRel);
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf)?;
        if n == 0 || head.len() > 16 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let Some(body) = files.get(path.trim_start_matches('/')) else {
        return conn.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n");
    };
    let head = format!(
        "HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)
}
