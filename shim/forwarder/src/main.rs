//! gvisor-hardened-forwarder: runs inside a `--network=none` sandbox (started by the shim with
//! `runsc exec`, its own uid, empty capability sets), listens on a loopback address and carries
//! every accepted connection over stdin/stdout to the shim's egress proxy, framed as described
//! in the library.
//!
//! Usage: `gvisor-hardened-forwarder [--listen ADDR|none] [--max-connections N] [--ingress
//! PORT[,PORT...]]` (defaults 127.0.0.1:3128, 512 and none; past N open connections a new one
//! is closed at once and reported to the shim with REFUSED, so it never waits unanswered in the
//! backlog; `--ingress` names the published ports the shim may open connections to on the
//! sandbox's loopback, CONNECT in the protocol; `--listen none` carries those alone), or
//! `gvisor-hardened-forwarder --await-listener ADDR [--timeout SECS] -- PROGRAM ARGS...` in front
//! of a workload (`await_listener.rs`), or `gvisor-hardened-forwarder --hold`, the root process
//! of a warm pool sandbox, which only waits to be killed, or `--hostname NAME`, which sets the
//! claimed sandbox's hostname to its pod's. No environment
//! is read and nothing secret is passed: the workload can read this process's cmdline.
//!
//! Threads, not an event loop: std has no poll(2), and a sandbox runs this for its whole life,
//! so it stays small and dependency-free. Each connection has a reader (socket -> stdout) and a
//! writer (queue -> socket); the main thread reads stdin and only ever queues, so a slow
//! socket never blocks other streams (the window bounds each queue). Exit codes: 0 when the
//! shim closes stdin, 1 when the listen address cannot be bound, 2 on a protocol error.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::FromRawFd;
use std::process::exit;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;

mod await_listener;

use gvisor_hardened_forwarder::{
    data_header, read_frame, Frame, RecvWindow, DEFAULT_LISTEN, HEADER_LEN, HOST_STREAM,
    INITIAL_WINDOW, MAX_PAYLOAD, VERSION,
};

/// Connection threads only copy bytes; their buffers live on the heap.
const THREAD_STACK: usize = 128 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking connection thread must not take the whole forwarder down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// stdout, shared by every thread; one frame is one `write_all` under the lock.
struct Out(Mutex<File>);

impl Out {
    fn send_bytes(&self, bytes: &[u8]) {
        if lock(&self.0).write_all(bytes).is_err() {
            // The shim is gone: nobody is left to carry connections for.
            exit(0);
        }
    }

    fn send(&self, f: &Frame) {
        self.send_bytes(&f.to_bytes());
    }
}

enum Inbound {
    Data(Vec<u8>),
    Eof,
    Reset,
}

struct SendSide {
    credit: u64,
    closed: bool,
}

struct RecvSide {
    queue: VecDeque<Inbound>,
    window: RecvWindow,
}

struct Conn {
    id: u32,
    tcp: TcpStream,
    send: Mutex<SendSide>,
    send_cv: Condvar,
    recv: Mutex<RecvSide>,
    recv_cv: Condvar,
    /// Threads of this connection that finished; the second one unregisters it.
    finished: AtomicU8,
}

struct Shared {
    out: Out,
    conns: Mutex<HashMap<u32, Arc<Conn>>>,
    /// The published ports the shim may CONNECT to on the sandbox's loopback.
    ingress: Vec<u16>,
    max_connections: usize,
}

impl Shared {
    fn finish(&self, c: &Conn) {
        if c.finished.fetch_add(1, Ordering::AcqRel) == 1 {
            lock(&self.conns).remove(&c.id);
        }
    }

    /// Tears a stream down from this side: the shim is told once, both threads stop.
    fn reset(&self, c: &Conn) {
        let first = {
            let mut s = lock(&c.send);
            let first = !s.closed;
            s.closed = true;
            first
        };
        c.send_cv.notify_all();
        lock(&c.recv).queue.push_back(Inbound::Reset);
        c.recv_cv.notify_all();
        let _ = c.tcp.shutdown(Shutdown::Both);
        if first {
            self.out.send(&Frame::Close { stream: c.id });
        }
    }
}

/// socket -> shim, within the credit the shim granted.
fn reader(sh: Arc<Shared>, c: Arc<Conn>) {
    let mut buf = vec![0u8; HEADER_LEN + MAX_PAYLOAD];
    let mut tcp = &c.tcp;
    loop {
        let allowance = {
            let mut s = lock(&c.send);
            while s.credit == 0 && !s.closed {
                s = c.send_cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.closed {
                break;
            }
            s.credit.min(MAX_PAYLOAD as u64) as usize
        };
        match tcp.read(&mut buf[HEADER_LEN..HEADER_LEN + allowance]) {
            Ok(0) => {
                if !lock(&c.send).closed {
                    sh.out.send(&Frame::Eof { stream: c.id });
                }
                break;
            }
            Ok(n) => {
                {
                    let mut s = lock(&c.send);
                    if s.closed {
                        break;
                    }
                    s.credit -= n as u64;
                }
                data_header(&mut buf, c.id, n);
                sh.out.send_bytes(&buf[..HEADER_LEN + n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                sh.reset(&c);
                break;
            }
        }
    }
    sh.finish(&c);
}

/// shim -> socket; credit goes back only once bytes reached the socket.
fn writer(sh: Arc<Shared>, c: Arc<Conn>) {
    let mut tcp = &c.tcp;
    loop {
        let item = {
            let mut r = lock(&c.recv);
            loop {
                if let Some(item) = r.queue.pop_front() {
                    break item;
                }
                r = c.recv_cv.wait(r).unwrap_or_else(|p| p.into_inner());
            }
        };
        match item {
            Inbound::Data(d) => {
                if tcp.write_all(&d).is_err() {
                    sh.reset(&c);
                    break;
                }
                let credit = {
                    let mut r = lock(&c.recv);
                    let idle = r.queue.is_empty();
                    r.window.consume(d.len(), idle)
                };
                if let Some(bytes) = credit {
                    if !lock(&c.send).closed {
                        sh.out.send(&Frame::Credit {
                            stream: c.id,
                            bytes,
                        });
                    }
                }
            }
            Inbound::Eof => {
                let _ = c.tcp.shutdown(Shutdown::Write);
                break;
            }
            Inbound::Reset => break,
        }
    }
    sh.finish(&c);
}

fn accept_loop(sh: Arc<Shared>, listener: TcpListener) {
    let mut next: u32 = 0;
    loop {
        let (tcp, peer) = match listener.accept() {
            Ok(x) => x,
            Err(_) => {
                // EMFILE and friends: back off instead of spinning on the same error.
                thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
        };
        let id = {
            let conns = lock(&sh.conns);
            if conns.len() >= sh.max_connections {
                drop(conns);
                // Closed unanswered (the shim holds the reasons; the workload sees the close at
                // once rather than a connection nobody serves); the shim audits it.
                drop(tcp);
                sh.out.send(&Frame::Refused {
                    peer: peer.to_string(),
                });
                continue;
            }
            // Ours are the ids below HOST_STREAM; the shim's CONNECTs have the bit set.
            loop {
                next = next.wrapping_add(1) & !HOST_STREAM;
                if next != 0 && !conns.contains_key(&next) {
                    break next;
                }
            }
        };
        serve(
            &sh,
            tcp,
            id,
            Frame::Open {
                stream: id,
                peer: peer.to_string(),
            },
        );
    }
}

/// A connection to a published port, asked for by the shim: dialled on the sandbox's
/// loopback, off the thread that reads the shim's frames. A port the forwarder was not told
/// to serve, one past `--max-connections`, or a dial that fails is answered with CLOSE.
fn connect(sh: &Arc<Shared>, stream: u32, port: u16) {
    let full = lock(&sh.conns).len() >= sh.max_connections;
    if full || !sh.ingress.contains(&port) {
        sh.out.send(&Frame::Close { stream });
        return;
    }
    let sh2 = sh.clone();
    let spawned = thread::Builder::new()
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let target = SocketAddr::from(([127, 0, 0, 1], port));
            match TcpStream::connect_timeout(&target, DIAL_TIMEOUT) {
                Ok(tcp) => serve(&sh2, tcp, stream, Frame::Accepted { stream }),
                Err(_) => sh2.out.send(&Frame::Close { stream }),
            }
        });
    if spawned.is_err() {
        sh.out.send(&Frame::Close { stream });
    }
}

/// How long a CONNECT's dial may take (a listener inside with a full backlog).
const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Carries `tcp` as stream `id`, announced with `announce` (OPEN for a workload's connection,
/// ACCEPTED for a CONNECT's): registered first, so the shim's first frame always finds it.
fn serve(sh: &Arc<Shared>, tcp: TcpStream, id: u32, announce: Frame) {
    let _ = tcp.set_nodelay(true);
    let c = Arc::new(Conn {
        id,
        tcp,
        send: Mutex::new(SendSide {
            credit: INITIAL_WINDOW as u64,
            closed: false,
        }),
        send_cv: Condvar::new(),
        recv: Mutex::new(RecvSide {
            queue: VecDeque::new(),
            window: RecvWindow::default(),
        }),
        recv_cv: Condvar::new(),
        finished: AtomicU8::new(0),
    });
    lock(&sh.conns).insert(id, c.clone());
    sh.out.send(&announce);
    for f in [reader, writer] {
        let (sh2, c2) = (sh.clone(), c.clone());
        let spawned = thread::Builder::new()
            .stack_size(THREAD_STACK)
            .spawn(move || f(sh2, c2));
        if spawned.is_err() {
            // Without its threads a connection would hang forever: reset it now.
            sh.reset(&c);
            lock(&sh.conns).remove(&c.id);
            break;
        }
    }
}

fn dispatch(sh: &Arc<Shared>, f: Frame) -> Result<(), String> {
    let conn = |id: u32| lock(&sh.conns).get(&id).cloned();
    match f {
        Frame::Connect { stream, port } => {
            if conn(stream).is_some() {
                return Err(format!("stream {stream} connected twice"));
            }
            connect(sh, stream, port);
        }
        Frame::Data { stream, data } => {
            let Some(c) = conn(stream) else { return Ok(()) };
            let mut r = lock(&c.recv);
            r.window.receive(data.len()).map_err(|e| e.to_string())?;
            r.queue.push_back(Inbound::Data(data));
            drop(r);
            c.recv_cv.notify_one();
        }
        Frame::Eof { stream } => {
            if let Some(c) = conn(stream) {
                lock(&c.recv).queue.push_back(Inbound::Eof);
                c.recv_cv.notify_one();
            }
        }
        Frame::Close { stream } => {
            if let Some(c) = conn(stream) {
                // The shim already forgot the stream: stop without answering.
                lock(&c.send).closed = true;
                c.send_cv.notify_all();
                lock(&c.recv).queue.push_back(Inbound::Reset);
                c.recv_cv.notify_all();
                let _ = c.tcp.shutdown(Shutdown::Both);
            }
        }
        Frame::Credit { stream, bytes } => {
            if let Some(c) = conn(stream) {
                let mut s = lock(&c.send);
                s.credit += bytes as u64;
                if s.credit > INITIAL_WINDOW as u64 {
                    return Err(format!("stream {stream}: credit beyond the window"));
                }
                drop(s);
                c.send_cv.notify_one();
            }
        }
        other => return Err(format!("unexpected frame from the shim: {other:?}")),
    }
    Ok(())
}

/// Connections held at once when `--max-connections` is not given.
const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The command line of the forwarder proper.
struct Args {
    /// Where the workload's outbound connections come in; `None` (`--listen none`): the
    /// sandbox has no egress, the forwarder carries published ports only.
    listen: Option<SocketAddr>,
    max_connections: usize,
    /// `--ingress PORT[,PORT...]`: the published ports the shim may connect to.
    ingress: Vec<u16>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut listen = DEFAULT_LISTEN.to_string();
    let mut max = DEFAULT_MAX_CONNECTIONS;
    let mut ingress = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => listen = args.next().ok_or("--listen needs an address")?,
            "--max-connections" => {
                let n = args.next().ok_or("--max-connections needs a number")?;
                max = match n.parse() {
                    Ok(m) if m > 0 => m,
                    _ => return Err(format!("bad --max-connections {n:?}: a positive number")),
                };
            }
            "--ingress" => {
                let list = args.next().ok_or("--ingress needs a port list")?;
                for p in list.split(',') {
                    match p.parse::<u16>() {
                        Ok(port) if port > 0 => ingress.push(port),
                        _ => return Err(format!("bad --ingress port {p:?}: 1-65535")),
                    }
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let listen = if listen == "none" {
        None
    } else {
        Some(
            listen
                .parse()
                .map_err(|e| format!("bad --listen {listen:?}: {e}"))?,
        )
    };
    if listen.is_none() && ingress.is_empty() {
        return Err("--listen none and no --ingress: nothing to carry".into());
    }
    Ok(Args {
        listen,
        max_connections: max,
        ingress,
    })
}

/// The warm pool's claim: the sandbox's hostname (one for all its containers, fixed by the
/// spec that booted it) becomes the pod's. Run by the shim with `runsc exec` in the warm
/// sandbox's own root container, before any of the pod's code runs.
fn set_hostname(name: &str) -> ! {
    extern "C" {
        fn sethostname(name: *const std::ffi::c_char, len: usize) -> i32;
    }
    // SAFETY: `name` is `len` valid bytes for the duration of the call, which only reads them.
    let rc = unsafe { sethostname(name.as_ptr().cast(), name.len()) };
    if rc != 0 {
        eprintln!("sethostname: {}", io::Error::last_os_error());
        exit(1);
    }
    exit(0)
}

fn main() {
    // The workload's launcher mode: not the forwarder at all (see await_listener.rs).
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--await-listener") {
        await_listener::run(&argv[2..]);
    }
    // The warm pool's holder: the root process of a sandbox booted before its pod exists. It
    // only keeps the sandbox open until the pod's sandbox is killed; it reads nothing and
    // opens nothing, so a claimed sandbox carries no state of it.
    if argv.get(1).map(String::as_str) == Some("--hostname") {
        set_hostname(argv.get(2).map(String::as_str).unwrap_or_default());
    }
    if argv.get(1).map(String::as_str) == Some("--hold") {
        loop {
            thread::park();
        }
    }
    // SAFETY: fds 0 and 1 are this process's stdio, owned by nothing else in this program
    // (std's own Stdout is never used, so no buffered copy races with these).
    let (mut stdin, stdout) = unsafe { (File::from_raw_fd(0), File::from_raw_fd(1)) };
    let out = Out(Mutex::new(stdout));
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            out.send(&Frame::Fatal { message: e });
            exit(2);
        }
    };
    let listener = match args.listen.map(TcpListener::bind).transpose() {
        Ok(l) => l,
        Err(e) => {
            out.send(&Frame::Fatal {
                message: format!(
                    "cannot listen on {}: {e}",
                    args.listen.unwrap_or_else(|| ([0, 0, 0, 0], 0).into())
                ),
            });
            exit(1);
        }
    };
    let sh = Arc::new(Shared {
        out,
        conns: Mutex::new(HashMap::new()),
        ingress: args.ingress,
        max_connections: args.max_connections,
    });
    sh.out.send(&Frame::Hello {
        version: VERSION,
        listen: args.listen.map(|l| l.to_string()).unwrap_or_default(),
    });
    if let Some(listener) = listener {
        let acceptor = sh.clone();
        if thread::Builder::new()
            .stack_size(THREAD_STACK)
            .spawn(move || accept_loop(acceptor, listener))
            .is_err()
        {
            sh.out.send(&Frame::Fatal {
                message: "cannot start the accept thread".into(),
            });
            exit(1);
        }
    }
    let mut input = io::BufReader::with_capacity(HEADER_LEN + MAX_PAYLOAD, &mut stdin);
    loop {
        match read_frame(&mut input) {
            Ok(Some(f)) => {
                if let Err(e) = dispatch(&sh, f) {
                    sh.out.send(&Frame::Fatal { message: e });
                    exit(2);
                }
            }
            Ok(None) => exit(0),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                sh.out.send(&Frame::Fatal {
                    message: format!("protocol error: {e}"),
                });
                exit(2);
            }
            Err(_) => exit(0),
        }
    }
}
