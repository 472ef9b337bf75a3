//! The exporter's connections: one short-lived thread each, one request per connection
//! (`Connection: close`), a bounded request head, and a deadline on every step.
//!
//! Why idle clients cannot silence it: a scraper sends its request the moment it connects, so
//! a connection that has not finished its head within [`Limits::head`] is closed, and when
//! [`Limits::connections`] are open, a new connection does not wait or get a 503: the oldest
//! connection that is not writing a response is shut down to make room. Holding every slot
//! would take opening that many connections within one round trip of a scraper's request, over
//! and over; only connections busy writing a response (each bounded by [`Limits::write`]) are
//! never evicted, and only when all of them are is a newcomer answered 503.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::http::{response, route};

/// A request head larger than this is refused (431): a scraper sends a few hundred bytes.
const MAX_HEAD: usize = 8 << 10;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections, each one thread. Bounds the threads (and their kernel stacks, charged
    /// to the pod's memory limit) and the descriptors, far below the default 1024 fd limit,
    /// which is why the exporter does not raise RLIMIT_NOFILE.
    pub connections: usize,
    /// From accept to the head's blank line.
    pub head: Duration,
    /// Writing the response, which a slow reader stretches.
    pub write: Duration,
    /// Draining what the client still sends after the response (see [`lingering_close`]).
    pub linger: Duration,
}

pub const LIMITS: Limits = Limits {
    connections: 256,
    head: Duration::from_secs(3),
    write: Duration::from_secs(10),
    linger: Duration::from_secs(1),
};

/// Scrapes render this, with `token` (when set) required of them.
pub struct Site {
    pub render: Box<dyn Fn() -> String + Send + Sync>,
    pub token: Option<Vec<u8>>,
}

struct Entry {
    id: u64,
    /// A second handle on the connection, to shut it down from the accept loop.
    stream: TcpStream,
    /// False while its response is being written.
    evictable: bool,
}

/// The open connections, oldest first.
struct Table {
    max: usize,
    state: Mutex<(u64, VecDeque<Entry>)>,
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, VecDeque<Entry>)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes room for `stream` (evicting the oldest evictable connection if full) and records
    /// it; `None` when every slot is writing a response.
    fn admit(&self, stream: &TcpStream) -> Option<u64> {
        let handle = stream.try_clone().ok()?;
        let mut state = self.lock();
        let (next, open) = &mut *state;
        if open.len() >= self.max {
            let oldest = open.iter().position(|e| e.evictable)?;
            let evicted = open.remove(oldest).expect("found above");
            // Wakes its thread's blocked read with end-of-file; that thread closes it.
            let _ = evicted.stream.shutdown(Shutdown::Both);
        }
        let id = *next;
        *next += 1;
        open.push_back(Entry {
            id,
            stream: handle,
            evictable: true,
        });
        Some(id)
    }

    /// Marks `id` as writing (or done writing); false when it was evicted meanwhile.
    fn writing(&self, id: u64, writing: bool) -> bool {
        let mut state = self.lock();
        match state.1.iter_mut().find(|e| e.id == id) {
            Some(e) => {
                e.evictable = !writing;
                true
            }
            None => false,
        }
    }

    fn remove(&self, id: u64) {
        self.lock().1.retain(|e| e.id != id);
    }
}

/// Accepts connections for ever.
pub fn serve(
    listener: TcpListener,
    site: Arc<Site>,
    limits: Limits,
) -> std::io::Result<std::convert::Infallible> {
    let table = Arc::new(Table {
        max: limits.connections.max(1),
        state: Mutex::new((0, VecDeque::new())),
    });
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(c) => c,
            // A client that went away between SYN and accept, or a full fd table for a moment:
            // not a reason to stop serving.
            Err(e) => {
                eprintln!("audit metrics: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Some(id) = table.admit(&stream) else {
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = stream.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        };
        let (t, site) = (table.clone(), site.clone());
        let spawned = std::thread::Builder::new()
            .name("metrics-conn".into())
            // Parsing a head and rendering into a String need little stack; a small one keeps
            // a full table's threads light.
            .stack_size(256 << 10)
            .spawn(move || {
                let _ = handle(stream, id, &t, &site, limits);
                t.remove(id);
            });
        if let Err(e) = spawned {
            eprintln!("audit metrics: no thread for a connection: {e}");
            table.remove(id);
        }
    }
}

fn handle(
    mut stream: TcpStream,
    id: u64,
    table: &Table,
    site: &Site,
    limits: Limits,
) -> std::io::Result<()> {
    // One deadline for the whole head, not per read: a client dripping a byte at a time gets
    // no more time than one that sends nothing.
    let deadline = Instant::now() + limits.head;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let route = loop {
        if let Some(end) = find(&head, b"\r\n\r\n") {
            break route(&head[..end], site.token.as_deref());
        }
        if head.len() > MAX_HEAD {
            stream.set_write_timeout(Some(limits.write))?;
            stream.write_all(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            lingering_close(stream, limits.linger);
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            // Closed (or evicted) before a whole head: nothing to answer.
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    if !table.writing(id, true) {
        return Ok(());
    }
    stream.set_write_timeout(Some(limits.write))?;
    let written = stream.write_all(&response(route, &site.render));
    table.writing(id, false);
    written?;
    lingering_close(stream, limits.linger);
    Ok(())
}

/// Closing a socket with unread input makes the kernel send a reset, which can destroy the
/// response before the client reads it. So: end our side, then discard what the client still
/// sends until it closes, for at most `linger` and a bounded amount.
fn lingering_close(mut stream: TcpStream, linger: Duration) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + linger;
    let mut buf = [0u8; 8192];
    let mut left: usize = 1 << 20;
    while left > 0 {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() || stream.set_read_timeout(Some(wait)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// A server on a loopback port with these limits, serving "m 1\n" to `token` holders.
    fn start(limits: Limits, token: Option<&[u8]>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let site = Arc::new(Site {
            render: Box::new(|| "m 1\n".to_string()),
            token: token.map(<[u8]>::to_vec),
        });
        std::thread::spawn(move || serve(listener, site, limits));
        addr
    }

    fn get(addr: SocketAddr, extra: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x{extra}\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Blocks until the server closes `s` (end-of-file), the way an idle client would see it.
    fn closed_by_server(mut s: TcpStream) -> bool {
        let mut buf = [0u8; 64];
        matches!(s.read(&mut buf), Ok(0))
    }

    /// Long enough that no test depends on it running out, except the one about it.
    const LONG: Duration = Duration::from_secs(600);

    #[test]
    fn a_connection_that_sends_no_head_is_closed_at_the_head_deadline() {
        let addr = start(
            Limits {
                head: Duration::from_millis(100),
                ..LIMITS
            },
            None,
        );
        let idle = TcpStream::connect(addr).unwrap();
        assert!(closed_by_server(idle));
    }

    #[test]
    fn scrapes_are_answered_while_more_idle_connections_than_slots_are_open() {
        let addr = start(
            Limits {
                connections: 4,
                head: LONG,
                ..LIMITS
            },
            None,
        );
        let idle: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
        for _ in 0..3 {
            let r = get(addr, "");
            assert!(
                r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("m 1\n"),
                "{r}"
            );
        }
        drop(idle);
    }

    #[test]
    fn the_oldest_idle_connection_makes_room_for_a_new_one() {
        let addr = start(
            Limits {
                connections: 2,
                head: LONG,
                ..LIMITS
            },
            None,
        );
        let oldest = TcpStream::connect(addr).unwrap();
        let _second = TcpStream::connect(addr).unwrap();
        let r = get(addr, "");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(closed_by_server(oldest));
    }

    #[test]
    fn with_a_token_a_scrape_without_it_is_refused_and_one_with_it_answered() {
        let addr = start(LIMITS, Some(b"t0ken"));
        assert!(get(addr, "").starts_with("HTTP/1.1 401 "));
        assert!(get(addr, "\r\nAuthorization: Bearer nope").starts_with("HTTP/1.1 401 "));
        let r = get(addr, "\r\nAuthorization: Bearer t0ken");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("m 1\n"),
            "{r}"
        );
    }
}
