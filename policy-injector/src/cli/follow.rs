//! Following the audit log: its files in rotation order, then the live file as it grows, into a
//! [`LineSink`]: the pure `Metrics` fold (`audit metrics`) or an `Exporter` (`audit export
//! --follow`). Each byte is read once; nothing is re-read to check the chain.
//!
//! Rotation (shim/core/src/audit/file.rs) renames the live file to PATH.1 under the writer's lock and
//! the next record starts a new PATH, so the descriptor we hold keeps reading the old file to
//! its true end, and only then do we move on to what came after it. A file is known by its
//! (device, inode), not its name: names shift by one at every rotation.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use policy_injector::audit_chain::Verifier;
use policy_injector::metrics::Metrics;

/// What a follower feeds: each file as it is begun, then its lines in order, without their
/// newlines; `terminated` is false only for bytes a rotated-away file ended with (the live
/// file's unfinished last line is held back until its newline comes).
pub trait LineSink {
    fn begin_file(&mut self, name: &str);
    fn line(&mut self, bytes: &[u8], terminated: bool);

    /// A line of `len` bytes (newline included when it had one) longer than the follower's
    /// bound, streamed past without being kept. Its bytes are unknown, so to a chain check it
    /// is a cut line: by default it is fed as one, empty.
    fn skipped(&mut self, _len: u64) {
        self.line(&[], false)
    }
}

impl LineSink for Metrics {
    fn begin_file(&mut self, name: &str) {
        Metrics::begin_file(self, name)
    }

    fn line(&mut self, bytes: &[u8], terminated: bool) {
        Metrics::line(self, bytes, terminated)
    }

    fn skipped(&mut self, len: u64) {
        Metrics::skipped_line(self, len)
    }
}

impl LineSink for Verifier {
    fn begin_file(&mut self, name: &str) {
        Verifier::begin_file(self, name)
    }

    fn line(&mut self, bytes: &[u8], terminated: bool) {
        Verifier::line(self, bytes, terminated)
    }
}

/// The files of the log whose live file is `live`: `live.N` ... `live.1`, then `live`.
pub fn files_of_log(live: &Path) -> Vec<PathBuf> {
    let numbered = |n: u32| {
        let mut name = live.as_os_str().to_owned();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    let mut files: Vec<PathBuf> = (1..).map(numbered).take_while(|p| p.exists()).collect();
    files.reverse();
    files.push(live.to_path_buf());
    files
}

/// Feeds `files`, in order and once each, to `sink`, as a follower would but without waiting
/// for more (`audit verify`, `audit attest`, `audit export` of FILEs). Stops early once
/// `settled(sink)` says more lines cannot change its verdict.
pub fn read_files<S: LineSink>(
    files: &[PathBuf],
    sink: &mut S,
    settled: impl Fn(&S) -> bool,
) -> anyhow::Result<()> {
    let mut line = Vec::new();
    for path in files {
        let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
        let mut reader = BufReader::with_capacity(1 << 20, file);
        sink.begin_file(&path.display().to_string());
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .with_context(|| format!("reading {}", path.display()))?;
            if n == 0 {
                break;
            }
            let terminated = line.last() == Some(&b'\n');
            if terminated {
                line.pop();
            }
            sink.line(&line, terminated);
            if settled(sink) {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// A line longer than this is not a record a writer made (a real log's records average under
/// 2 KB): it is streamed past and reported as skipped ([`LineSink::skipped`]), never held. The
/// follower's memory is then at most this, a read chunk and the sink's state, well under the
/// exporter DaemonSet's 64Mi limit whatever the log holds. A restarted exporter reads the log
/// from its start again (the log is its state; it keeps no offset), and skips the line again the
/// same way.
pub const MAX_LINE: usize = 1 << 20;

const CHUNK: usize = 256 << 10;

struct Open {
    file: File,
    id: (u64, u64),
    name: String,
    /// Bytes read past the last newline: the live file's line still being written.
    pending: Vec<u8>,
    /// Where the next read starts, to notice a file that shrank (truncated in place).
    offset: u64,
    /// Bytes of an over-long line streamed past so far, while its newline has not come.
    skipping: Option<u64>,
}

pub struct Follower<S> {
    live: PathBuf,
    metrics: Arc<Mutex<S>>,
    current: Option<Open>,
    max_line: usize,
}

impl<S: LineSink> Follower<S> {
    pub fn new(live: &Path, metrics: Arc<Mutex<S>>) -> Follower<S> {
        Follower {
            live: live.to_path_buf(),
            metrics,
            current: None,
            max_line: MAX_LINE,
        }
    }

    /// A follower whose line bound is `max_line` bytes instead of [`MAX_LINE`].
    #[cfg(test)]
    fn with_max_line(live: &Path, metrics: Arc<Mutex<S>>, max_line: usize) -> Follower<S> {
        Follower {
            max_line,
            ..Follower::new(live, metrics)
        }
    }

    /// Reads what there is and follows the log for ever, looking again every `poll` once at
    /// the end of the live file. A log that does not exist yet is waited for.
    pub fn run(self, poll: Duration) -> ! {
        match self.run_until(poll, |_| Ok(())) {
            Ok(never) => match never {},
            // The check above never fails.
            Err(_) => unreachable!(),
        }
    }

    /// Like `run`, and after every round asks `check` whether to go on: its error ends the
    /// follow (an export whose reader went away).
    pub fn run_until(
        mut self,
        poll: Duration,
        mut check: impl FnMut(&mut S) -> anyhow::Result<()>,
    ) -> anyhow::Result<std::convert::Infallible> {
        let mut last_error = String::new();
        loop {
            match self.step() {
                Ok(true) => {
                    check(&mut lock(&self.metrics))?;
                    continue;
                }
                Ok(false) => check(&mut lock(&self.metrics))?,
                Err(e) => {
                    // Said once, not every poll: a missing log is normal before the first
                    // sandbox of a node.
                    let msg = format!("{e:#}");
                    if msg != last_error {
                        eprintln!("following {}: {msg}", self.live.display());
                        last_error = msg;
                    }
                }
            }
            std::thread::sleep(poll);
        }
    }

    /// One round: true when it read something (so the caller reads again at once).
    fn step(&mut self) -> anyhow::Result<bool> {
        let Some(cur) = self.current.as_mut() else {
            // First round: every file of the log, oldest first; the live one stays open. Not
            // before the live file exists: the rotated ones would be read twice.
            if !self.live.exists() {
                anyhow::bail!("{}: no such file (yet)", self.live.display());
            }
            let files = files_of_log(&self.live);
            self.read_files(&files, None)?;
            return Ok(self.current.is_some());
        };
        if read_available(cur, &self.metrics, self.max_line)? {
            return Ok(true);
        }
        let now = match std::fs::metadata(&self.live) {
            Ok(m) => Some(((m.dev(), m.ino()), m.len())),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(anyhow::Error::new(e).context(self.live.display().to_string())),
        };
        match now {
            Some((id, len)) if id == cur.id && len < cur.offset => {
                // Truncated in place: a writer never does this. Read it again as a new file;
                // its first line cannot link to what we read before, so the chain gauge drops.
                let name = cur.name.clone();
                self.current = None;
                self.read_files(&[PathBuf::from(name)], None)?;
                Ok(true)
            }
            Some((id, _)) if id == cur.id => Ok(false),
            // Renamed away and nothing new yet (or a new file whose first line is not there
            // yet): wait.
            None => Ok(false),
            Some(_) => {
                // Rotated: the old file is complete (the rename happened under the writer's lock,
                // after its last write), so read it to the end and finish its last line.
                read_available(cur, &self.metrics, self.max_line)?;
                let done = self.current.take().expect("checked above");
                let done_id = done.id;
                finish(done, &self.metrics);
                // The files newer than it, oldest first. When it is no longer among them (more
                // rotations than the log keeps happened between two looks), only the live file
                // is left to read, and the chain gauge reports the gap.
                let files = files_of_log(&self.live);
                let after = files
                    .iter()
                    .position(|p| file_id(p) == Some(done_id))
                    .map_or(files.len() - 1, |i| i + 1);
                self.read_files(&files[after..], Some(done_id))?;
                Ok(true)
            }
        }
    }

    /// Reads `files` in order; all but the last are finished, the last stays open.
    fn read_files(&mut self, files: &[PathBuf], skip: Option<(u64, u64)>) -> anyhow::Result<()> {
        for (i, path) in files.iter().enumerate() {
            let file = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(
                        anyhow::Error::new(e).context(format!("cannot read {}", path.display()))
                    )
                }
            };
            let meta = file.metadata()?;
            let id = (meta.dev(), meta.ino());
            if Some(id) == skip {
                continue;
            }
            let name = path.display().to_string();
            lock(&self.metrics).begin_file(&name);
            let mut open = Open {
                file,
                id,
                name,
                pending: Vec::new(),
                offset: 0,
                skipping: None,
            };
            while read_available(&mut open, &self.metrics, self.max_line)? {}
            if i + 1 == files.len() {
                self.current = Some(open);
            } else {
                finish(open, &self.metrics);
            }
        }
        Ok(())
    }
}

/// Reads one chunk and feeds its whole lines; false at the end of the file. A line growing past
/// `max_line` is dropped as soon as it does, and the rest of it is streamed past up to its
/// newline, so no more than `max_line` bytes of one line are ever held.
fn read_available<S: LineSink>(
    open: &mut Open,
    metrics: &Mutex<S>,
    max_line: usize,
) -> anyhow::Result<bool> {
    let mut buf = vec![0u8; CHUNK];
    let n = loop {
        match open.file.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(anyhow::Error::new(e).context(format!("reading {}", open.name))),
        }
    };
    if n == 0 {
        return Ok(false);
    }
    open.offset += n as u64;
    let mut m = lock(metrics);
    let mut rest = &buf[..n];
    while let Some(i) = rest.iter().position(|b| *b == b'\n') {
        let part = &rest[..i];
        if let Some(skipped) = open.skipping.take() {
            m.skipped(skipped + i as u64 + 1);
        } else if open.pending.len() + part.len() > max_line {
            m.skipped((open.pending.len() + part.len() + 1) as u64);
            open.pending = Vec::new();
        } else if open.pending.is_empty() {
            m.line(part, true);
        } else {
            open.pending.extend_from_slice(part);
            m.line(&open.pending, true);
            open.pending.clear();
        }
        rest = &rest[i + 1..];
    }
    if let Some(skipped) = open.skipping.as_mut() {
        *skipped += rest.len() as u64;
    } else if open.pending.len() + rest.len() > max_line {
        // Over the bound with no newline yet: let go of what was kept (its memory too).
        open.skipping = Some((open.pending.len() + rest.len()) as u64);
        open.pending = Vec::new();
    } else {
        open.pending.extend_from_slice(rest);
    }
    Ok(true)
}

/// A file the log has moved past: bytes after its last newline were a cut line.
fn finish<S: LineSink>(open: Open, metrics: &Mutex<S>) {
    if let Some(skipped) = open.skipping {
        lock(metrics).skipped(skipped);
    } else if !open.pending.is_empty() {
        lock(metrics).line(&open.pending, false);
    }
}

fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The state stays consistent even if a holder panicked (each line is folded whole or not at
/// all as far as the gauges a scrape shows go), so a poisoned lock is taken over.
pub fn lock<S>(m: &Mutex<S>) -> std::sync::MutexGuard<'_, S> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum Seen {
        File(String),
        Line(String, bool),
        Skipped(u64),
    }

    #[derive(Default)]
    struct Record(Vec<Seen>);

    impl LineSink for Record {
        fn begin_file(&mut self, name: &str) {
            let base = name.rsplit('/').next().unwrap_or(name);
            self.0.push(Seen::File(base.to_string()));
        }

        fn line(&mut self, bytes: &[u8], terminated: bool) {
            let text = String::from_utf8_lossy(bytes).into_owned();
            self.0.push(Seen::Line(text, terminated));
        }

        fn skipped(&mut self, len: u64) {
            self.0.push(Seen::Skipped(len));
        }
    }

    const BOUND: usize = 16;

    fn follower(live: &Path) -> (Follower<Record>, Arc<Mutex<Record>>) {
        let sink = Arc::new(Mutex::new(Record::default()));
        (Follower::with_max_line(live, sink.clone(), BOUND), sink)
    }

    /// Steps until the follower is at the end of what is there.
    fn drain(f: &mut Follower<Record>) {
        while f.step().unwrap() {}
    }

    fn take(sink: &Mutex<Record>) -> Vec<Seen> {
        std::mem::take(&mut lock(sink).0)
    }

    fn line(s: &str) -> Seen {
        Seen::Line(s.to_string(), true)
    }

    fn append(path: &Path, bytes: &[u8]) {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn a_line_over_the_bound_is_skipped_whole_and_the_next_line_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.jsonl");
        let long = vec![b'x'; 100];
        append(&live, b"a\n");
        append(&live, &long);
        append(&live, b"\nb\n");
        let (mut f, sink) = follower(&live);
        drain(&mut f);
        assert_eq!(
            take(&sink),
            [
                Seen::File("audit.jsonl".into()),
                line("a"),
                Seen::Skipped(101),
                line("b")
            ]
        );
    }

    #[test]
    fn a_line_exactly_at_the_bound_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.jsonl");
        append(&live, &[b'y'; BOUND]);
        append(&live, b"\n");
        let (mut f, sink) = follower(&live);
        drain(&mut f);
        assert_eq!(take(&sink)[1], line(&"y".repeat(BOUND)));
    }

    #[test]
    fn an_over_long_line_still_being_written_is_streamed_past_without_being_held() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.jsonl");
        append(&live, b"a\n");
        let (mut f, sink) = follower(&live);
        drain(&mut f);
        assert_eq!(take(&sink), [Seen::File("audit.jsonl".into()), line("a")]);
        // Written in pieces bigger than a read chunk, with no newline yet: nothing of it is
        // kept, whatever its length so far.
        let piece = vec![b'x'; CHUNK + 7];
        for _ in 0..3 {
            append(&live, &piece);
            drain(&mut f);
            let cur = f.current.as_ref().unwrap();
            assert_eq!(cur.pending.capacity(), 0);
            assert!(cur.skipping.is_some());
            assert_eq!(take(&sink), []);
        }
        append(&live, b"tail\nb\n");
        drain(&mut f);
        let len = 3 * piece.len() as u64 + 5;
        assert_eq!(take(&sink), [Seen::Skipped(len), line("b")]);
    }

    #[test]
    fn a_rotated_file_ending_in_an_over_long_cut_line_reports_it_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.jsonl");
        let rotated = dir.path().join("audit.jsonl.1");
        append(&rotated, b"a\n");
        append(&rotated, &[b'x'; 40]);
        append(&live, b"b\n");
        let (mut f, sink) = follower(&live);
        drain(&mut f);
        assert_eq!(
            take(&sink),
            [
                Seen::File("audit.jsonl.1".into()),
                line("a"),
                Seen::Skipped(40),
                Seen::File("audit.jsonl".into()),
                line("b")
            ]
        );
    }

    #[test]
    fn a_skipped_line_reaches_the_exposition_as_a_count() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("audit.jsonl");
        append(&live, &[b'x'; 64]);
        append(&live, b"\n");
        let metrics = Arc::new(Mutex::new(Metrics::new()));
        let mut f = Follower::with_max_line(&live, metrics.clone(), BOUND);
        while f.step().unwrap() {}
        let text = lock(&metrics).render();
        assert!(
            text.contains("\ngvh_exporter_skipped_lines_total 1\n"),
            "{text}"
        );
        assert!(text.contains("\ngvh_audit_chain_intact 0\n"), "{text}");
    }
}
