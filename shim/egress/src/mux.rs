//! The host end of the forwarder's framing protocol (see the `gvisor-hardened-forwarder`
//! crate): reads frames from the forwarder's stdout, hands each new stream to the proxy as a
//! [`MuxStream`], and writes the proxy's frames to the forwarder's stdin.
//!
//! Flow control mirrors the forwarder's: a stream sends DATA only within the credit the
//! forwarder granted, and grants credit back only once the proxy wrote the bytes onward, so a
//! slow upstream or a slow workload stalls its own stream and nothing else, and the shim
//! buffers at most one window per stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gvisor_hardened_forwarder::{
    frame_from_parts, parse_header, Frame, HEADER_LEN, HOST_STREAM, INITIAL_WINDOW, MAX_PAYLOAD,
    VERSION,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionEnd {
    #[error("the forwarder closed its output")]
    Eof,
    #[error("reading from the forwarder: {0}")]
    Read(String),
    #[error("writing to the forwarder: {0}")]
    Write(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("the forwarder stopped: {0}")]
    Fatal(String),
}

/// What a stream receives.
#[derive(Debug, PartialEq, Eq)]
pub enum Inbound {
    Data(Vec<u8>),
    /// The workload half-closed its side.
    Eof,
    /// The workload's connection is gone (reset, or the forwarder died).
    Reset,
}

#[derive(Debug, Default)]
struct Credit {
    bytes: u64,
    closed: bool,
}

#[derive(Debug)]
struct Shared {
    credit: Mutex<Credit>,
    notify: Notify,
    /// DATA received and not yet credited back (the demux checks the window with it).
    outstanding: AtomicU32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Entry {
    tx: mpsc::UnboundedSender<Inbound>,
    shared: Arc<Shared>,
}

type Table = Arc<Mutex<HashMap<u32, Entry>>>;

/// One workload connection, as the proxy sees it. [`MuxStream::halves`] splits it so both
/// directions can run at once (a workload that uploads before it reads must not deadlock
/// against an upstream that answers early).
pub struct MuxStream {
    peer: String,
    reader: MuxReader,
    writer: MuxWriter,
    table: Table,
}

/// The workload-to-proxy direction.
pub struct MuxReader {
    id: u32,
    rx: mpsc::UnboundedReceiver<Inbound>,
    out: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
    /// Bytes consumed since the last CREDIT.
    consumed: u32,
    got_end: bool,
}

/// The proxy-to-workload direction.
pub struct MuxWriter {
    id: u32,
    out: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
    sent_eof: bool,
}

/// What the forwarder reports about a workload connection.
pub enum Opened {
    /// A stream to serve.
    Stream(MuxStream),
    /// A connection the forwarder closed at once, past its `--max-connections`: nothing to
    /// serve, only to account for.
    Refused { peer: String },
}

/// The stream is gone (reset by the workload, or the forwarder died).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the workload's connection is gone")]
pub struct Gone;

fn send_frame(out: &mpsc::UnboundedSender<Vec<u8>>, f: &Frame) {
    // A closed writer means the session is over; the stream learns it from recv/send.
    let _ = out.send(f.to_bytes());
}

impl MuxReader {
    /// The next thing from the workload. Call [`MuxReader::consumed`] once DATA left this
    /// process, or the workload stalls after a window.
    pub async fn recv(&mut self) -> Inbound {
        let item = self.rx.recv().await.unwrap_or(Inbound::Reset);
        if !matches!(item, Inbound::Data(_)) {
            self.got_end = true;
        }
        item
    }

    /// Resolves once the workload's connection is gone (reset, or the forwarder died), without
    /// taking anything queued from the stream: an upload blocked on an upstream that stopped
    /// reading must still end when the workload goes, not when the upstream gives up.
    pub async fn gone(&self) {
        loop {
            let notified = self.shared.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if lock(&self.shared.credit).closed {
                return;
            }
            notified.await;
        }
    }

    /// Grants the workload credit for `n` bytes it sent that were passed on.
    pub fn consumed(&mut self, n: usize) {
        self.consumed += n as u32;
        let idle = self.rx.is_empty();
        if self.consumed > 0 && (idle || self.consumed >= INITIAL_WINDOW / 4) {
            let bytes = std::mem::take(&mut self.consumed);
            self.shared.outstanding.fetch_sub(bytes, Ordering::AcqRel);
            send_frame(
                &self.out,
                &Frame::Credit {
                    stream: self.id,
                    bytes,
                },
            );
        }
    }
}

impl MuxWriter {
    /// Sends bytes to the workload, waiting for credit as needed.
    pub async fn send(&mut self, mut data: &[u8]) -> Result<(), Gone> {
        while !data.is_empty() {
            let n = loop {
                let notified = self.shared.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let mut c = lock(&self.shared.credit);
                    if c.closed {
                        return Err(Gone);
                    }
                    if c.bytes > 0 {
                        let n = (c.bytes as usize).min(MAX_PAYLOAD).min(data.len());
                        c.bytes -= n as u64;
                        break n;
                    }
                }
                notified.await;
            };
            let mut buf = Vec::with_capacity(HEADER_LEN + n);
            buf.resize(HEADER_LEN, 0);
            gvisor_hardened_forwarder::data_header(&mut buf, self.id, n);
            buf.extend_from_slice(&data[..n]);
            self.out.send(buf).map_err(|_| Gone)?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Half-closes towards the workload: it reads EOF, and may still send.
    pub fn send_eof(&mut self) {
        if !self.sent_eof {
            self.sent_eof = true;
            send_frame(&self.out, &Frame::Eof { stream: self.id });
        }
    }

    fn reset(&mut self) {
        let first = {
            let mut c = lock(&self.shared.credit);
            !std::mem::replace(&mut c.closed, true)
        };
        if first {
            send_frame(&self.out, &Frame::Close { stream: self.id });
        }
        self.sent_eof = true;
    }
}

impl MuxStream {
    pub fn id(&self) -> u32 {
        self.reader.id
    }

    /// The workload's address inside the sandbox.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    pub fn halves(&mut self) -> (&mut MuxReader, &mut MuxWriter) {
        (&mut self.reader, &mut self.writer)
    }

    pub async fn recv(&mut self) -> Inbound {
        self.reader.recv().await
    }

    pub fn consumed(&mut self, n: usize) {
        self.reader.consumed(n)
    }

    pub async fn send(&mut self, data: &[u8]) -> Result<(), Gone> {
        self.writer.send(data).await
    }

    pub fn send_eof(&mut self) {
        self.writer.send_eof()
    }

    /// Resets the workload's connection.
    pub fn reset(&mut self) {
        self.writer.reset();
        self.reader.got_end = true;
    }
}

impl Drop for MuxStream {
    fn drop(&mut self) {
        // A stream dropped before both sides ended is reset; the table forgets it either way.
        if !(self.writer.sent_eof && self.reader.got_end) {
            self.reset();
        }
        lock(&self.table).remove(&self.reader.id);
    }
}

/// CONNECTs sent and not yet answered, by stream id: ACCEPTED fires the sender, CLOSE drops it.
type Pending = Arc<Mutex<HashMap<u32, tokio::sync::oneshot::Sender<()>>>>;

/// The demultiplexer of one forwarder's stdio.
pub struct Session<R> {
    reader: R,
    out: mpsc::UnboundedSender<Vec<u8>>,
    table: Table,
    pending: Pending,
    next_connect: Arc<AtomicU32>,
    writer: tokio::task::JoinHandle<Result<(), String>>,
}

/// Opens streams to the sandbox's published ports over a running [`Session`] (CONNECT).
#[derive(Clone)]
pub struct Connector {
    out: mpsc::UnboundedSender<Vec<u8>>,
    table: Table,
    pending: Pending,
    next: Arc<AtomicU32>,
}

/// The forwarder would not carry the connection: the port is not one it serves, it holds as
/// many connections as it may, nothing listens on the port inside, or the session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the sandbox refused the connection to port {port}")]
pub struct ConnectRefused {
    pub port: u16,
}

impl Connector {
    /// A stream to `port` on the sandbox's loopback, once the forwarder's dial succeeded.
    /// `peer` names the client for the records.
    pub async fn connect(&self, port: u16, peer: String) -> Result<MuxStream, ConnectRefused> {
        let stream = loop {
            let n = self.next.fetch_add(1, Ordering::Relaxed) & !HOST_STREAM;
            let id = HOST_STREAM | n;
            if n != 0 && !lock(&self.table).contains_key(&id) {
                break id;
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (entry, opened) = new_stream(stream, peer, &self.out, &self.table);
        lock(&self.table).insert(stream, entry);
        lock(&self.pending).insert(stream, tx);
        send_frame(&self.out, &Frame::Connect { stream, port });
        match rx.await {
            Ok(()) => Ok(opened),
            Err(_) => {
                // Refused (the waiter went with the CLOSE, or with the session): the stream
                // never existed on the other side, so dropping it resets nothing.
                let mut opened = opened;
                opened.writer.sent_eof = true;
                opened.reader.got_end = true;
                Err(ConnectRefused { port })
            }
        }
    }
}

impl<R: AsyncRead + Unpin> Session<R> {
    /// Starts the writer task on `stdin`.
    pub fn new<W: AsyncWrite + Unpin + Send + 'static>(stdout: R, stdin: W) -> Session<R> {
        let (out, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(buf) = rx.recv().await {
                stdin.write_all(&buf).await.map_err(|e| e.to_string())?;
            }
            // Every sender is gone: closing stdin tells the forwarder to exit.
            let _ = stdin.shutdown().await;
            Ok(())
        });
        Session {
            reader: stdout,
            out,
            table: Arc::new(Mutex::new(HashMap::new())),
            pending: Default::default(),
            next_connect: Arc::new(AtomicU32::new(1)),
            writer,
        }
    }

    /// Opens streams to the sandbox's published ports while [`Session::run`] carries frames.
    pub fn connector(&self) -> Connector {
        Connector {
            out: self.out.clone(),
            table: self.table.clone(),
            pending: self.pending.clone(),
            next: self.next_connect.clone(),
        }
    }

    async fn read_frame(&mut self) -> Result<Frame, SessionEnd> {
        let mut head = [0u8; HEADER_LEN];
        match self.reader.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(SessionEnd::Eof),
            Err(e) => return Err(SessionEnd::Read(e.to_string())),
        }
        let h = parse_header(&head).map_err(|e| SessionEnd::Protocol(e.to_string()))?;
        let mut payload = vec![0u8; h.len as usize];
        self.reader
            .read_exact(&mut payload)
            .await
            .map_err(|e| SessionEnd::Read(e.to_string()))?;
        frame_from_parts(h, payload).map_err(|e| SessionEnd::Protocol(e.to_string()))
    }

    /// Waits for the forwarder's HELLO: it is listening. Returns its listen address.
    pub async fn hello(&mut self) -> Result<String, SessionEnd> {
        match self.read_frame().await? {
            Frame::Hello { version, listen } if version == VERSION => Ok(listen),
            Frame::Hello { version, .. } => Err(SessionEnd::Protocol(format!(
                "forwarder speaks version {version}, the shim {VERSION}"
            ))),
            Frame::Fatal { message } => Err(SessionEnd::Fatal(message)),
            other => Err(SessionEnd::Protocol(format!(
                "expected HELLO, got {other:?}"
            ))),
        }
    }

    /// Carries frames until the forwarder goes away; `on_open` gets every new stream and every
    /// connection the forwarder refused.
    pub async fn run(&mut self, mut on_open: impl FnMut(Opened)) -> SessionEnd {
        loop {
            if self.writer.is_finished() {
                return SessionEnd::Write("the writer stopped".into());
            }
            let frame = match self.read_frame().await {
                Ok(f) => f,
                Err(end) => return end,
            };
            if let Err(end) = self.dispatch(frame, &mut on_open) {
                return end;
            }
        }
    }

    fn dispatch(
        &mut self,
        frame: Frame,
        on_open: &mut impl FnMut(Opened),
    ) -> Result<(), SessionEnd> {
        let get = |id: u32| {
            lock(&self.table)
                .get(&id)
                .map(|e| (e.tx.clone(), e.shared.clone()))
        };
        match frame {
            Frame::Open { stream, peer } => {
                let (entry, opened) = new_stream(stream, peer, &self.out, &self.table);
                let previous = lock(&self.table).insert(stream, entry);
                if previous.is_some() {
                    return Err(SessionEnd::Protocol(format!(
                        "stream {stream} opened twice"
                    )));
                }
                on_open(Opened::Stream(opened));
            }
            Frame::Accepted { stream } => {
                // Nobody waits any more (the caller gave up, its stream was dropped): the
                // forwarder's connection is reset.
                let waiter = lock(&self.pending).remove(&stream);
                if waiter.is_none_or(|w| w.send(()).is_err()) {
                    send_frame(&self.out, &Frame::Close { stream });
                }
            }
            Frame::Connect { stream, .. } => {
                return Err(SessionEnd::Protocol(format!(
                    "the forwarder sent CONNECT for stream {stream}"
                )));
            }
            Frame::Refused { peer } => on_open(Opened::Refused { peer }),
            Frame::Data { stream, data } => {
                let Some((tx, shared)) = get(stream) else {
                    return Ok(());
                };
                let n = data.len() as u32;
                let before = shared.outstanding.fetch_add(n, Ordering::AcqRel);
                if before + n > INITIAL_WINDOW {
                    return Err(SessionEnd::Protocol(format!(
                        "stream {stream}: DATA beyond the flow-control window"
                    )));
                }
                let _ = tx.send(Inbound::Data(data));
            }
            Frame::Eof { stream } => {
                if let Some((tx, _)) = get(stream) {
                    let _ = tx.send(Inbound::Eof);
                }
            }
            Frame::Close { stream } => {
                // A CONNECT refused: its waiter learns it from the dropped sender.
                lock(&self.pending).remove(&stream);
                if let Some(e) = lock(&self.table).remove(&stream) {
                    close(&e);
                }
            }
            Frame::Credit { stream, bytes } => {
                if let Some((_, shared)) = get(stream) {
                    let mut c = lock(&shared.credit);
                    c.bytes += bytes as u64;
                    if c.bytes > INITIAL_WINDOW as u64 {
                        return Err(SessionEnd::Protocol(format!(
                            "stream {stream}: credit beyond the window"
                        )));
                    }
                    drop(c);
                    shared.notify.notify_waiters();
                }
            }
            Frame::Fatal { message } => return Err(SessionEnd::Fatal(message)),
            Frame::Hello { .. } => {
                return Err(SessionEnd::Protocol("a second HELLO".into()));
            }
        }
        Ok(())
    }

    /// Resets every open stream (the forwarder is gone, so are the workload's connections) and
    /// refuses every CONNECT still waiting.
    pub fn reset_all(&self) -> usize {
        lock(&self.pending).clear();
        let entries: Vec<Entry> = lock(&self.table).drain().map(|(_, e)| e).collect();
        for e in &entries {
            close(e);
        }
        entries.len()
    }

    /// Open streams.
    pub fn open_streams(&self) -> usize {
        lock(&self.table).len()
    }
}

fn close(e: &Entry) {
    lock(&e.shared.credit).closed = true;
    e.shared.notify.notify_waiters();
    let _ = e.tx.send(Inbound::Reset);
}

impl<R> Drop for Session<R> {
    fn drop(&mut self) {
        // Streams hold senders to the writer; aborting it closes stdin now rather than when
        // the last proxy task ends.
        self.writer.abort();
        // A CONNECT still waiting is refused: no answer can come any more.
        lock(&self.pending).clear();
    }
}

/// A stream's table entry and its two halves.
fn new_stream(
    id: u32,
    peer: String,
    out: &mpsc::UnboundedSender<Vec<u8>>,
    table: &Table,
) -> (Entry, MuxStream) {
    let shared = Arc::new(Shared {
        credit: Mutex::new(Credit {
            bytes: INITIAL_WINDOW as u64,
            closed: false,
        }),
        notify: Notify::new(),
        outstanding: AtomicU32::new(0),
    });
    let (tx, rx) = mpsc::unbounded_channel();
    let stream = MuxStream {
        peer,
        reader: MuxReader {
            id,
            rx,
            out: out.clone(),
            shared: shared.clone(),
            consumed: 0,
            got_end: false,
        },
        writer: MuxWriter {
            id,
            out: out.clone(),
            shared: shared.clone(),
            sent_eof: false,
        },
        table: table.clone(),
    };
    (Entry { tx, shared }, stream)
}

#[cfg(test)]
#[path = "mux_tests.rs"]
mod tests;
