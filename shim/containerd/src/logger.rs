//! Logging to containerd's per-shim log fifo.
//!
//! containerd opens `<bundle>/log` for reading before it starts the shim and copies whatever
//! arrives into its own log, so lines are written in logrus' text format to blend in. The fifo
//! is opened non-blocking: with no reader (containerd restarting) a blocking open would hang the
//! shim, and a full pipe must cost a log line, never a stalled task service.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

use log::{Level, LevelFilter, Log, Metadata, Record};

pub struct FifoLogger {
    out: Mutex<Box<dyn Write + Send>>,
    namespace: String,
}

impl FifoLogger {
    fn line(&self, record: &Record<'_>) -> String {
        let level = match record.level() {
            Level::Error => "error",
            Level::Warn => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        };
        format!(
            "time=\"{}\" level={} msg={:?} namespace={} runtime=io.containerd.gvisor-hardened.v1 pid={}\n",
            humantime::format_rfc3339_micros(SystemTime::now()),
            level,
            record.args().to_string(),
            self.namespace,
            std::process::id(),
        )
    }
}

impl Log for FifoLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = self.line(record);
        if let Ok(mut out) = self.out.lock() {
            // EAGAIN (full pipe) and EPIPE (containerd gone) both cost this line only.
            let _ = out.write_all(line.as_bytes());
        }
    }

    fn flush(&self) {
        if let Ok(mut out) = self.out.lock() {
            let _ = out.flush();
        }
    }
}

fn open_fifo(path: &Path) -> Option<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()
}

/// Installs the logger: the `log` fifo in `bundle_dir` when containerd provides one, stderr
/// otherwise (the `delete` action, manual runs).
pub fn init(bundle_dir: &Path, namespace: &str, debug: bool) {
    let out: Box<dyn Write + Send> = match open_fifo(&bundle_dir.join("log")) {
        Some(f) => Box::new(f),
        None => Box::new(std::io::stderr()),
    };
    let logger = FifoLogger {
        out: Mutex::new(out),
        namespace: namespace.to_string(),
    };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(if debug {
            LevelFilter::Debug
        } else {
            LevelFilter::Info
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_use_logrus_text_format_with_quoted_message() {
        let logger = FifoLogger {
            out: Mutex::new(Box::new(std::io::sink())),
            namespace: "k8s.io".into(),
        };
        let line = logger.line(
            &Record::builder()
                .args(format_args!("container \"c1\" created"))
                .level(Level::Warn)
                .build(),
        );
        assert!(line.starts_with("time=\""), "{line}");
        assert!(line.contains(" level=warning "), "{line}");
        assert!(line.contains(r#"msg="container \"c1\" created""#), "{line}");
        assert!(line.contains("namespace=k8s.io"), "{line}");
        assert!(line.ends_with('\n'));
    }

    #[test]
    fn missing_fifo_falls_back_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_fifo(&dir.path().join("log")).is_none());
        // A fifo without a reader: a blocking open would hang here; ours returns at once.
        let fifo = dir.path().join("log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_fifo(&fifo).is_none());
    }
}
