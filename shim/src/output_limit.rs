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

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Bytes moved per read; also the most one write to the client can be.
const CHUNK: usize = 128 << 10;

/// Pipe capacity asked for the pipes runsc writes to: fewer wake-ups per MiB than the 64 KiB
/// default. Best effort (the kernel may cap it at /proc/sys/fs/pipe-max-size).
const PIPE_SIZE: libc::c_int = 1 << 20;

/// The container's output budget, shared by all its streams (and processes, if the caller
/// passes the same budget to each).
#[derive(Debug, Clone)]
pub struct OutputBudget(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    max: Option<u64>,
    /// Bytes still allowed; unused when `max` is `None`.
    remaining: AtomicU64,
    /// Every byte read from the sandbox, delivered or not: the activity signal.
    seen: AtomicU64,
    truncated: AtomicBool,
}

impl OutputBudget {
    pub fn new(max_bytes: Option<u64>) -> OutputBudget {
        OutputBudget(Arc::new(Shared {
            max: max_bytes,
            remaining: AtomicU64::new(max_bytes.unwrap_or(0)),
            seen: AtomicU64::new(0),
            truncated: AtomicBool::new(false),
        }))
    }

    /// Bytes the container has written so far (delivered or discarded). The idle detector
    /// samples this.
    pub fn bytes_seen(&self) -> u64 {
        self.0.seen.load(Ordering::Relaxed)
    }

    /// Whether the bound has cut any output yet.
    pub fn truncated(&self) -> bool {
        self.0.truncated.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes read and thrown away without asking the budget (past the bound, or
    /// the client is gone).
    fn saw(&self, n: u64) {
        self.0.seen.fetch_add(n, Ordering::Relaxed);
    }

    /// Takes up to `n` bytes from the budget; returns how many may be delivered.
    fn take(&self, n: u64) -> u64 {
        self.saw(n);
        if self.0.max.is_none() {
            return n;
        }
        let prev = self
            .0
            .remaining
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| Some(r - r.min(n)))
            .expect("the closure always returns Some");
        let granted = prev.min(n);
        if granted < n {
            self.0.truncated.store(true, Ordering::Relaxed);
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

/// For the exit audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutputReport {
    /// Delivered on stdout and stderr together.
    pub output_bytes: u64,
    pub output_truncated: bool,
    pub discarded_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<StreamReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<StreamReport>,
}

/// The copy threads of one process.
pub struct Interposer {
    budget: OutputBudget,
    stdout: Option<JoinHandle<StreamReport>>,
    stderr: Option<JoinHandle<StreamReport>>,
}

/// Starts copying `stdout` and `stderr` (either may be absent) against `budget`.
pub fn interpose(
    budget: &OutputBudget,
    stdout: Option<StreamPair>,
    stderr: Option<StreamPair>,
) -> io::Result<Interposer> {
    let spawn = |name: &str, pair: Option<StreamPair>| -> io::Result<_> {
        let Some(pair) = pair else { return Ok(None) };
        let budget = budget.clone();
        std::thread::Builder::new()
            .name(format!("output-{name}"))
            .spawn(move || copy_stream(pair, &budget))
            .map(Some)
    };
    Ok(Interposer {
        budget: budget.clone(),
        stdout: spawn("stdout", stdout)?,
        stderr: spawn("stderr", stderr)?,
    })
}

impl Interposer {
    pub fn budget(&self) -> &OutputBudget {
        &self.budget
    }

    /// Waits until both streams are drained (every writer closed its end) and reports. Call it
    /// before announcing the exit, so the exit event does not overtake the last bytes.
    pub fn wait(self) -> OutputReport {
        let join = |h: Option<JoinHandle<StreamReport>>| {
            h.map(|h| h.join().expect("the output copy never panics"))
        };
        let stdout = join(self.stdout);
        let stderr = join(self.stderr);
        let sum = |f: fn(&StreamReport) -> u64| {
            stdout.as_ref().map_or(0, f) + stderr.as_ref().map_or(0, f)
        };
        OutputReport {
            output_bytes: sum(|s| s.delivered_bytes),
            discarded_bytes: sum(|s| s.discarded_bytes),
            output_truncated: self.budget.truncated(),
            stdout,
            stderr,
        }
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

fn copy_stream(pair: StreamPair, budget: &OutputBudget) -> StreamReport {
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
    let null = File::options().write(true).open("/dev/null").ok();
    loop {
        if mode != Mode::Copy {
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
                            report.delivered_bytes += budget.take(n);
                        } else {
                            budget.saw(n);
                            report.discarded_bytes += n;
                        }
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // EINVAL: not a pipe (a test's regular file, say): read and write instead.
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
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
        if granted < n && mode != Mode::Discard {
            mode = Mode::Discard;
            report.marker_written = true;
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
    report
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

#[cfg(test)]
mod tests;
