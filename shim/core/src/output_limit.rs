//! Bounded output: the shim copies a process's stdout and stderr from pipes runsc writes to into
//! the client's fifos, against one byte budget for the whole container (`[output] max_bytes`).
//!
//! Past the budget the rest is read and thrown away, so the sandbox never blocks on a full pipe
//! because of the bound; each stream that lost bytes gets one marker line; the copy ends when
//! every writer of the pipe is gone (the process and runsc closed their ends). What it reports:
//! bytes delivered, bytes discarded, whether the bound cut anything, and the sha256 of the bytes
//! delivered on each stream (the marker line is not part of it).
//!
//! Without a bound (`OutputBudget::new(None)`) the bytes are moved by `splice(2)` and only
//! counted (no hash), which gives the idle detector its "no output" signal cheaply. Past the
//! bound the rest is spliced into /dev/null. Only used when the policy asks for a bound or an
//! idle timeout: otherwise the fifos go to runsc directly and the shim copies nothing
//! (`stdio.rs`).
//!
//! Before the budget is spent a slow client still slows the sandbox down, exactly as when runsc
//! writes to the fifo itself: the copy holds nothing back and buffers nothing extra.
//!
//! The copy may also read a terminal's master (the console copier in `stdio.rs`): there the
//! end of the stream is EIO once the sandbox closed the last slave, and it is taken as such.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Bytes moved per read; also the most one write to the client can be.
const CHUNK: usize = 128 << 10;

/// Pipe capacity asked for the pipes runsc writes to: fewer wake-ups per MiB than the 64 KiB
/// default. Best effort (the kernel may cap it at /proc/sys/fs/pipe-max-size).
const PIPE_SIZE: libc::c_int = 1 << 20;

/// How long the exit path waits for a process's output copy to reach the end of its streams.
/// The pipe holds at most a MiB once the process is gone; what keeps a stream open longer is a
/// client that stopped reading or a process left in the sandbox holding it.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// The container's output budget, shared by all its streams (and processes, if the caller
/// passes the same budget to each, or maps the same budget file: [`OutputBudget::in_file`]).
#[derive(Debug, Clone)]
pub struct OutputBudget(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    max: Option<u64>,
    /// Bytes still allowed (unused when `max` is `None`) and whether the bound cut anything.
    own: Arc<Store>,
    /// Whose `seen` counts every byte read from the sandbox, delivered or not: the activity
    /// signal. Budgets of containers in one sandbox may share it (see
    /// [`OutputBudget::sharing_activity`]); otherwise it is `own`.
    activity: Arc<Store>,
}

impl OutputBudget {
    pub fn new(max_bytes: Option<u64>) -> OutputBudget {
        let own = Arc::new(Store::in_memory(max_bytes));
        OutputBudget(Arc::new(Shared {
            max: max_bytes,
            activity: own.clone(),
            own,
        }))
    }

    /// The budget a container needs: one when the policy bounds its output (`max_bytes`) or
    /// has an idle timeout (which counts the output as activity); `None`: nothing to
    /// interpose, the streams go to runsc as they are.
    pub fn when_needed(max_bytes: Option<u64>, idle_timeout: bool) -> Option<OutputBudget> {
        Self::needed(max_bytes, idle_timeout).then(|| OutputBudget::new(max_bytes))
    }

    /// Whether a container needs a budget (see [`Self::when_needed`]).
    pub fn needed(max_bytes: Option<u64>, idle_timeout: bool) -> bool {
        max_bytes.is_some() || idle_timeout
    }

    /// A budget of its own (`max_bytes`) whose activity counter is `other`'s: what either
    /// copies counts as output of both. For the containers of one pod, which share a sandbox
    /// and with it the CPU time the idle detector reads: the pod's output must count the same
    /// way, or the pod's first container would be judged idle while another one writes.
    pub fn sharing_activity(max_bytes: Option<u64>, other: &OutputBudget) -> OutputBudget {
        OutputBudget(Arc::new(Shared {
            max: max_bytes,
            own: Arc::new(Store::in_memory(max_bytes)),
            activity: other.0.activity.clone(),
        }))
    }

    /// The budget of a container whose processes are copied by different processes
    /// (runsc-hardened's guard for its init, one exec guard per exec): its counters live in
    /// the file at `path`, which each of them maps, so all draw from one budget and the
    /// init's guard sees every byte as activity. `create` makes the file (it must not exist);
    /// otherwise it must.
    pub fn in_file(path: &Path, max_bytes: Option<u64>, create: bool) -> io::Result<OutputBudget> {
        let own = Arc::new(Store::Mapped(shared::Mapped::open(path, create)?));
        if create {
            own.counters()
                .remaining
                .store(max_bytes.unwrap_or(0), Ordering::Release);
        }
        Ok(OutputBudget(Arc::new(Shared {
            max: max_bytes,
            activity: own.clone(),
            own,
        })))
    }

    /// The bound, if any.
    pub fn max_bytes(&self) -> Option<u64> {
        self.0.max
    }

    /// Bytes the container has written so far (delivered or discarded; with a shared activity
    /// counter, the whole sandbox's). The idle detector samples this.
    pub fn bytes_seen(&self) -> u64 {
        self.0.activity.counters().seen.load(Ordering::Relaxed)
    }

    /// Whether the bound has cut any output yet.
    pub fn truncated(&self) -> bool {
        self.0.own.counters().truncated.load(Ordering::Relaxed) != 0
    }

    /// Counts `n` bytes read and thrown away without asking the budget (past the bound, or
    /// the client is gone).
    fn saw(&self, n: u64) {
        self.0
            .activity
            .counters()
            .seen
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Takes up to `n` bytes from the budget; returns how many may be delivered.
    fn take(&self, n: u64) -> u64 {
        self.saw(n);
        if self.0.max.is_none() {
            return n;
        }
        let prev = self
            .0
            .own
            .counters()
            .remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| Some(r - r.min(n)))
            .expect("the closure always returns Some");
        let granted = prev.min(n);
        if granted < n {
            self.0.own.counters().truncated.store(1, Ordering::Relaxed);
        }
        granted
    }

    fn marker(&self) -> String {
        format!(
            "[gvisor-hardened: output limit of {} bytes (stdout and stderr together) reached; the rest is discarded]\n",
            self.0.max.unwrap_or(0)
        )
    }
}

/// A budget's counters; `#[repr(C)]` because a budget file holds them as they are.
#[repr(C)]
#[derive(Debug, Default)]
struct Counters {
    remaining: AtomicU64,
    seen: AtomicU64,
    /// Non-zero once the bound cut something.
    truncated: AtomicU64,
}

/// Where a budget's counters are: this process's memory, or a file the guards of one
/// container share.
#[derive(Debug)]
enum Store {
    Memory(Counters),
    Mapped(shared::Mapped),
}

impl Store {
    fn in_memory(max_bytes: Option<u64>) -> Store {
        Store::Memory(Counters {
            remaining: AtomicU64::new(max_bytes.unwrap_or(0)),
            ..Counters::default()
        })
    }

    fn counters(&self) -> &Counters {
        match self {
            Store::Memory(c) => c,
            Store::Mapped(m) => m.counters(),
        }
    }
}

/// One stream to copy: the read end of the pipe runsc writes to, and the client's fifo.
pub struct StreamPair {
    pub from_sandbox: File,
    pub to_client: File,
}

/// What one stream delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamReport {
    pub delivered_bytes: u64,
    pub discarded_bytes: u64,
    /// sha256 of the delivered bytes, without the marker line; only with a bound (without one
    /// the kernel moves the bytes and the shim never sees them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub marker_written: bool,
    /// Writing to the client failed; what came after was read and discarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_error: Option<String>,
    /// Reading from the sandbox's pipe failed; the copy ended there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_error: Option<String>,
}

/// What one process's streams delivered, for its exit audit record. `output_bytes` and
/// `output_truncated` are fields of the record itself; the rest goes in its `output` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputReport {
    /// Delivered on stdout and stderr together.
    #[serde(skip)]
    pub output_bytes: u64,
    /// The bound cut this process's output (a marker line was written on a stream of it).
    #[serde(skip)]
    pub output_truncated: bool,
    /// Every stream reached its end before the report was taken. False when the exit path's
    /// deadline passed first: the counts are those copied by then, and no stream has a sha256.
    pub complete: bool,
    pub discarded_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<StreamReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<StreamReport>,
}

/// The copy threads of one process.
pub struct Interposer {
    budget: OutputBudget,
    stdout: Option<JoinHandle<Ended>>,
    stderr: Option<JoinHandle<Ended>>,
    progress: Progress,
}

/// A stream's copy once the sandbox's end closed: its report, and the client's end, still open
/// so that a note can follow the last byte before the client sees the end of the stream.
struct Ended {
    report: StreamReport,
    sink: File,
    at_line_start: bool,
}

/// What one stream has copied so far, updated as it goes.
#[derive(Debug, Default)]
struct Live {
    delivered: AtomicU64,
    discarded: AtomicU64,
    marker: AtomicBool,
}

impl Live {
    fn report(&self) -> StreamReport {
        StreamReport {
            delivered_bytes: self.delivered.load(Ordering::Relaxed),
            discarded_bytes: self.discarded.load(Ordering::Relaxed),
            sha256: None,
            marker_written: self.marker.load(Ordering::Relaxed),
            client_error: None,
            read_error: None,
        }
    }
}

/// A view of an [`Interposer`]'s progress that outlives it: what the exit path reports when
/// the streams did not end in time.
#[derive(Debug, Clone)]
pub struct Progress {
    stdout: Option<Arc<Live>>,
    stderr: Option<Arc<Live>>,
}

impl Progress {
    /// The counts so far, as an incomplete report (no sha256: a stream's hash exists only
    /// once it ended).
    pub fn snapshot(&self) -> OutputReport {
        summarise(
            false,
            self.stdout.as_ref().map(|l| l.report()),
            self.stderr.as_ref().map(|l| l.report()),
        )
    }
}

fn summarise(
    complete: bool,
    stdout: Option<StreamReport>,
    stderr: Option<StreamReport>,
) -> OutputReport {
    let sum =
        |f: fn(&StreamReport) -> u64| stdout.as_ref().map_or(0, f) + stderr.as_ref().map_or(0, f);
    let cut = |s: &Option<StreamReport>| s.as_ref().is_some_and(|s| s.marker_written);
    OutputReport {
        output_bytes: sum(|s| s.delivered_bytes),
        discarded_bytes: sum(|s| s.discarded_bytes),
        output_truncated: cut(&stdout) || cut(&stderr),
        complete,
        stdout,
        stderr,
    }
}

/// Starts copying `stdout` and `stderr` (either may be absent) against `budget`.
pub fn interpose(
    budget: &OutputBudget,
    stdout: Option<StreamPair>,
    stderr: Option<StreamPair>,
) -> io::Result<Interposer> {
    let live = |pair: &Option<StreamPair>| pair.as_ref().map(|_| Arc::new(Live::default()));
    let progress = Progress {
        stdout: live(&stdout),
        stderr: live(&stderr),
    };
    let spawn = |name: &str, pair: Option<StreamPair>, live: &Option<Arc<Live>>| {
        let (Some(pair), Some(live)) = (pair, live.clone()) else {
            return Ok(None);
        };
        let budget = budget.clone();
        std::thread::Builder::new()
            .name(format!("output-{name}"))
            .spawn(move || copy_stream(pair, &budget, &live))
            .map(Some)
    };
    Ok(Interposer {
        budget: budget.clone(),
        stdout: spawn("stdout", stdout, &progress.stdout)?,
        stderr: spawn("stderr", stderr, &progress.stderr)?,
        progress,
    })
}

/// Puts the copy between a process and where its output goes: for each of `stdout` and
/// `stderr` given (the client's fifo, the engine's pipe), a pipe takes its place for runsc and a
/// copy thread moves the pipe's bytes to it against `budget`. Returns runsc's write ends and the
/// copy (`None` when neither stream is given). The caller drops the write ends once runsc has
/// them. Both front ends interpose this way: the shim on containerd's fifos, runsc-hardened's
/// guards on the streams the engine gave them.
pub fn bound(
    budget: &OutputBudget,
    stdout: Option<File>,
    stderr: Option<File>,
) -> io::Result<(Option<File>, Option<File>, Option<Interposer>)> {
    let pair = |to_client: Option<File>| -> io::Result<(Option<File>, Option<StreamPair>)> {
        let Some(to_client) = to_client else {
            return Ok((None, None));
        };
        let (from_sandbox, for_runsc) = sandbox_pipe()?;
        Ok((
            Some(for_runsc),
            Some(StreamPair {
                from_sandbox,
                to_client,
            }),
        ))
    };
    let (out_w, out) = pair(stdout)?;
    let (err_w, err) = pair(stderr)?;
    let copy = if out.is_some() || err.is_some() {
        Some(interpose(budget, out, err)?)
    } else {
        None
    };
    Ok((out_w, err_w, copy))
}

impl Interposer {
    pub fn budget(&self) -> &OutputBudget {
        &self.budget
    }

    /// A handle on the counts so far, for a caller that may stop waiting (see [`Self::wait`]).
    pub fn progress(&self) -> Progress {
        self.progress.clone()
    }

    /// Waits until both streams are drained (every writer closed its end) and reports. Call it
    /// before announcing the exit, so the exit event does not overtake the last bytes. It
    /// blocks for as long as some writer keeps a stream open (a process left in the sandbox
    /// holding it, a client that stopped reading): bound it with [`Self::progress`] as the
    /// fallback.
    pub fn wait(self) -> OutputReport {
        self.wait_then_note(None)
    }

    /// [`Self::wait`], then `note` as a line of its own after the last byte on stderr (stdout
    /// when there is no stderr, as with a terminal), before the client sees the end: why the
    /// runtime ended the process, in the log where a user looks. Outside the budget, like the
    /// marker line; never waits more than [`NOTE_DEADLINE`] on a client that stopped reading.
    pub fn wait_then_note(self, note: Option<&str>) -> OutputReport {
        let join = |h: Option<JoinHandle<Ended>>| {
            h.map(|h| h.join().expect("the output copy never panics"))
        };
        let (stdout, stderr) = (join(self.stdout), join(self.stderr));
        if let Some(note) = note {
            if let Some(end) = stderr.as_ref().or(stdout.as_ref()) {
                if end.report.client_error.is_none() {
                    let sep = if end.at_line_start { "" } else { "\n" };
                    let _ = write_note(&end.sink, &format!("{sep}{note}\n"));
                }
            }
        }
        summarise(true, stdout.map(|e| e.report), stderr.map(|e| e.report))
    }
}

/// How a stream is being copied.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Read, hash, write: a bound is set and not yet reached.
    Copy,
    /// No bound: the kernel moves the bytes (`splice`), the copy only counts them.
    Splice,
    /// Past the bound, or the client is gone: read and throw away.
    Discard,
}

fn copy_stream(pair: StreamPair, budget: &OutputBudget, live: &Live) -> Ended {
    let StreamPair {
        from_sandbox: mut src,
        to_client: mut sink,
    } = pair;
    let mut buf = vec![0u8; CHUNK];
    let mut hasher = budget.0.max.map(|_| Sha256::new());
    let mut report = StreamReport {
        delivered_bytes: 0,
        discarded_bytes: 0,
        sha256: None,
        marker_written: false,
        client_error: None,
        read_error: None,
    };
    let mut mode = if hasher.is_some() {
        Mode::Copy
    } else {
        Mode::Splice
    };
    // Whether the last delivered byte ended a line, so the marker starts on a line of its own.
    let mut at_line_start = true;
    // Cleared at the first EINVAL (a source or sink splice cannot serve): from then on read and
    // write, without asking the kernel again for every chunk. Never tried on a terminal: kernels
    // that accept splice from a pty master (6.x) can leave it waiting on a line the slave
    // already wrote (seen here, intermittently, on 6.18), where read(2) always returns it.
    let mut can_splice = !nix::unistd::isatty(src.as_raw_fd()).unwrap_or(false);
    let null = File::options().write(true).open("/dev/null").ok();
    loop {
        if mode != Mode::Copy && can_splice {
            let out = match (mode, &null) {
                (Mode::Splice, _) => Some(&sink),
                (_, Some(null)) => Some(null),
                _ => None,
            };
            if let Some(out) = out {
                match splice(&src, out) {
                    Ok(0) => break,
                    Ok(n) => {
                        if mode == Mode::Splice {
                            // The kernel moved the bytes unseen: whether the last one ended
                            // a line is unknown, so a note starts a line of its own.
                            at_line_start = false;
                            let d = budget.take(n);
                            report.delivered_bytes += d;
                            live.delivered.fetch_add(d, Ordering::Relaxed);
                        } else {
                            budget.saw(n);
                            report.discarded_bytes += n;
                            live.discarded.fetch_add(n, Ordering::Relaxed);
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // EINVAL: not a pipe (a test's regular file, a terminal): read and write
                    // instead.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => can_splice = false,
                    Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
                    Err(e) if mode == Mode::Splice && e.raw_os_error() == Some(libc::EPIPE) => {
                        report.client_error = Some(e.to_string());
                        mode = Mode::Discard;
                        continue;
                    }
                    Err(e) => {
                        report.read_error = Some(e.to_string());
                        break;
                    }
                }
            }
        }
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A terminal's master once the last slave is closed: its end of stream. (A pipe
            // never says EIO.)
            Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
            Err(e) => {
                report.read_error = Some(e.to_string());
                break;
            }
        };
        let granted = if mode == Mode::Discard {
            budget.saw(n as u64);
            0
        } else {
            budget.take(n as u64) as usize
        };
        let deliver = &buf[..granted];
        let mut delivered = 0;
        if !deliver.is_empty() {
            match sink.write_all(deliver) {
                Ok(()) => {
                    if let Some(h) = hasher.as_mut() {
                        h.update(deliver);
                    }
                    delivered = deliver.len();
                    at_line_start = deliver.last() == Some(&b'\n');
                }
                Err(e) => {
                    report.client_error = Some(e.to_string());
                    mode = Mode::Discard;
                }
            }
        }
        report.delivered_bytes += delivered as u64;
        report.discarded_bytes += (n - delivered) as u64;
        live.delivered
            .fetch_add(delivered as u64, Ordering::Relaxed);
        live.discarded
            .fetch_add((n - delivered) as u64, Ordering::Relaxed);
        if granted < n && mode != Mode::Discard {
            mode = Mode::Discard;
            report.marker_written = true;
            live.marker.store(true, Ordering::Relaxed);
            let mut marker = budget.marker();
            if !at_line_start {
                marker.insert(0, '\n');
            }
            if let Err(e) = sink.write_all(marker.as_bytes()) {
                report.client_error = Some(e.to_string());
            }
        }
    }
    report.sha256 = hasher.map(|h| crate::artifacts::hex(&h.finalize()));
    Ended {
        report,
        sink,
        at_line_start,
    }
}

/// How long a note waits for room in the client's pipe.
const NOTE_DEADLINE: Duration = Duration::from_secs(1);

/// The note of [`Interposer::wait_then_note`] for a front end that holds the client's end
/// without copying (no budget), written once the process's last writer is gone. Nothing saw
/// whether the last byte ended a line, so the note starts a line of its own.
pub fn write_note_after_unseen_output(sink: &File, note: &str) -> io::Result<()> {
    write_note(sink, &format!("\n{note}\n"))
}

/// One write of a short line, once the client's end has room: a line under `PIPE_BUF` goes into
/// a pipe or fifo whole, and a client that stopped reading costs at most [`NOTE_DEADLINE`].
fn write_note(mut sink: &File, line: &str) -> io::Result<()> {
    let mut fds = [libc::pollfd {
        fd: sink.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: one pollfd we own, for a descriptor we own.
    let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, NOTE_DEADLINE.as_millis() as i32) };
    if ready < 0 {
        return Err(io::Error::last_os_error());
    }
    if ready == 0 || fds[0].revents & libc::POLLOUT == 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client's end has no room",
        ));
    }
    sink.write_all(line.as_bytes())
}

/// Moves up to a pipe's worth of bytes from `src` to `dst` inside the kernel.
fn splice(src: &File, dst: &File) -> io::Result<u64> {
    // SAFETY: splice between two descriptors we own, no offsets.
    let n = unsafe {
        libc::splice(
            src.as_raw_fd(),
            std::ptr::null_mut(),
            dst.as_raw_fd(),
            std::ptr::null_mut(),
            PIPE_SIZE as usize,
            libc::SPLICE_F_MOVE,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as u64)
    }
}

/// Waits for `copy` to reach the end of its streams, at most `deadline`; past it the report
/// says so and holds the counts so far (the copy goes on by itself until its writers close).
pub async fn drain(
    copy: Interposer,
    deadline: Duration,
    who: &str,
    note: Option<String>,
) -> OutputReport {
    let progress = copy.progress();
    let waiting = tokio::task::spawn_blocking(move || copy.wait_then_note(note.as_deref()));
    match tokio::time::timeout(deadline, waiting).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => {
            log::error!("{who}: the output copy failed: {e}");
            progress.snapshot()
        }
        Err(_) => {
            log::warn!(
                "{who}: output still open {deadline:?} after the exit (a client that stopped reading, or a process still holding the stream); reporting the exit with what was copied so far"
            );
            progress.snapshot()
        }
    }
}

/// A pipe for runsc to write a stream to: (read end for the interposer, write end for runsc).
/// Both ends are close-on-exec; the command runner hands the write end to runsc as a standard
/// stream. The caller must drop its copy of the write end once runsc has it, or the copy never
/// sees the end of the stream.
pub fn sandbox_pipe() -> io::Result<(File, File)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills both descriptors on success; they are owned right away.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: F_SETPIPE_SZ on a pipe we own; failure leaves the default size.
    unsafe { libc::fcntl(r.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE) };
    Ok((r, w))
}

mod shared;
#[cfg(test)]
mod tests;
