//! `audit export`: the log's files read (or followed) into `policy_injector::export`, one JSON
//! document per line to stdout. The chain is verified as the lines go by (an export is evidence
//! for whoever receives it): a break is said on stderr, and over files the exit status is 3.

use std::convert::Infallible;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;

use policy_injector::audit_chain::Verifier;
use policy_injector::export::{Exporter, Format};

use super::args::ExportFormat;
use super::follow::{lock, read_files, Follower, LineSink};

/// This host's name: the node, when the export runs on it and a log file starts mid-way.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn format(f: ExportFormat) -> Format {
    match f {
        ExportFormat::Ocsf => Format::Ocsf,
        ExportFormat::Otel => Format::Otel,
    }
}

/// The exporter and stdout. A write error is kept (and nothing more written) so the follower,
/// which cannot fail on a line, can be stopped by the caller that checks it.
struct Sink {
    exporter: Exporter,
    verifier: Verifier,
    /// Where the reading is, to name a break while following.
    file: String,
    line_no: u64,
    break_said: bool,
    out: std::io::BufWriter<std::io::Stdout>,
    error: Option<std::io::Error>,
}

impl Sink {
    fn new(format: Format, node: &str) -> Sink {
        Sink {
            exporter: Exporter::new(format, node),
            verifier: Verifier::new(None, false),
            file: String::new(),
            line_no: 0,
            break_said: false,
            out: std::io::BufWriter::with_capacity(1 << 16, std::io::stdout()),
            error: None,
        }
    }

    /// Flushes; the first write error, if any.
    fn flush(&mut self) -> anyhow::Result<()> {
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e);
            }
        }
        match self.error.take() {
            Some(e) => Err(anyhow!(e).context("writing to stdout")),
            None => Ok(()),
        }
    }

    fn summary(&self) {
        let x = &self.exporter;
        eprintln!(
            "{} exported, {} without a class in this format, {} unparsable line(s)",
            x.exported, x.skipped, x.unparsed
        );
    }
}

impl LineSink for Sink {
    fn begin_file(&mut self, name: &str) {
        self.verifier.begin_file(name);
        self.file = name.to_string();
        self.line_no = 0;
    }

    fn line(&mut self, bytes: &[u8], terminated: bool) {
        self.verifier.line(bytes, terminated);
        self.line_no += 1;
        if !self.break_said && !self.verifier.intact() {
            // Once, where it is first seen: `audit verify` names the break exactly.
            eprintln!(
                "audit export: the chain is not intact at {} line {} (see policy-injector audit verify)",
                self.file, self.line_no
            );
            self.break_said = true;
        }
        if !terminated {
            // A rotated file's cut last line: no record.
            self.exporter.unparsed += 1;
            return;
        }
        let Some(mut out) = self.exporter.line(bytes) else {
            return;
        };
        if self.error.is_none() {
            out.push('\n');
            if let Err(e) = self.out.write_all(out.as_bytes()) {
                self.error = Some(e);
            }
        }
    }
}

/// Exports `files`, in order: `Ok(Err(verdict))` when their chain is broken.
pub fn files(files: &[PathBuf], f: ExportFormat, node: &str) -> anyhow::Result<Result<(), String>> {
    let mut sink = Sink::new(format(f), node);
    read_files(files, &mut sink, |_| false)?;
    sink.flush()?;
    sink.summary();
    Ok(sink
        .verifier
        .finish()
        .map(|_| ())
        .map_err(|b| format!("chain broken: {b}")))
}

/// Exports the log's files, then what is appended, until killed or stdout is closed.
pub fn follow(
    live: &Path,
    f: ExportFormat,
    node: &str,
    poll: Duration,
) -> anyhow::Result<Infallible> {
    let sink = Arc::new(Mutex::new(Sink::new(format(f), node)));
    let follower = Follower::new(live, sink.clone());
    let result = follower.run_until(poll, Sink::flush);
    lock(&sink).summary();
    result
}
