//! The log the engine reads back: runc's `--log FILE --log-format json|text`. On a failed call,
//! Docker shows the last error line's `msg` ("OCI runtime create failed: <msg>") and Podman
//! the JSON `msg` (with `runtime_supports_json`); without `--log` the line goes to stderr only.
//!
//! The code runsc-hardened shares with the shim logs through the `log` crate (the hardening's
//! "policy is in audit mode" warning, an exit's enforcement, a failed audit append):
//! [`install`] makes those lines reach the same log, in the engine's format, as the warnings and
//! errors runsc-hardened writes itself.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::cli::LogFormat;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineLog {
    path: Option<PathBuf>,
    json: bool,
}

impl EngineLog {
    pub fn new(path: Option<&Path>, format: LogFormat) -> EngineLog {
        EngineLog {
            path: path.map(Path::to_path_buf),
            json: format == LogFormat::Json,
        }
    }

    pub fn error(&self, msg: &str) {
        self.line("error", msg);
    }

    pub fn warn(&self, msg: &str) {
        self.line("warning", msg);
    }

    fn line(&self, level: &str, msg: &str) {
        eprintln!("runsc-hardened: {msg}");
        let Some(path) = &self.path else { return };
        let line = format_line(self.json, level, msg, SystemTime::now());
        // Best effort: the error is also on stderr, and failing to log must not hide it.
        if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(path) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// The `log` crate's lines, written to an [`EngineLog`].
struct EngineLogger(EngineLog);

impl log::Log for EngineLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let msg = record.args().to_string();
        match record.level() {
            log::Level::Error => self.0.error(&msg),
            _ => self.0.warn(&msg),
        }
    }

    fn flush(&self) {}
}

/// Sends the `log` crate's warnings and errors to `log` for the rest of the process (a guard
/// forked later keeps it: the create's `--log`, which its record names too). Info stays out:
/// runc writes only what the engine should show, and the engines copy every line they get.
pub fn install(log: &EngineLog) {
    if log::set_boxed_logger(Box::new(EngineLogger(log.clone()))).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}

fn format_line(json: bool, level: &str, msg: &str, at: SystemTime) -> String {
    let time = humantime::format_rfc3339_millis(at).to_string();
    if json {
        let mut line = serde_json::json!({"level": level, "msg": msg, "time": time}).to_string();
        line.push('\n');
        line
    } else {
        // logrus's text form, which runc writes.
        format!("time=\"{time}\" level={level} msg={:?}\n", msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_level_and_msg_as_docker_reads_them() {
        let line = format_line(
            true,
            "error",
            "rejected by policy: hooks: x",
            SystemTime::UNIX_EPOCH,
        );
        let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(v["level"], "error");
        assert_eq!(v["msg"], "rejected by policy: hooks: x");
        assert!(line.ends_with('\n'));
    }

    #[test]
    fn text_lines_quote_the_message() {
        let line = format_line(false, "error", "a \"b\"", SystemTime::UNIX_EPOCH);
        assert_eq!(
            line,
            "time=\"1970-01-01T00:00:00.000Z\" level=error msg=\"a \\\"b\\\"\"\n"
        );
    }

    #[test]
    fn the_shared_code_s_warnings_reach_the_engine_log_in_its_format() {
        use log::Log;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.json");
        let logger = EngineLogger(EngineLog::new(Some(&path), LogFormat::Json));
        let warning = "policy is in audit mode: NO hardening is applied";
        logger.log(
            &log::Record::builder()
                .args(format_args!("{warning}"))
                .level(log::Level::Warn)
                .build(),
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(
            (v["level"].as_str(), v["msg"].as_str()),
            (Some("warning"), Some(warning))
        );
    }

    #[test]
    fn text_logs_get_the_shared_code_s_errors_as_runc_writes_them() {
        use log::Log;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let logger = EngineLogger(EngineLog::new(Some(&path), LogFormat::Text));
        logger.log(
            &log::Record::builder()
                .args(format_args!("audit: disk full"))
                .level(log::Level::Error)
                .build(),
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(r#"level=error msg="audit: disk full""#),
            "{text}"
        );
    }

    #[test]
    fn lines_are_appended_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.json");
        let log = EngineLog::new(Some(&path), LogFormat::Json);
        log.error("one");
        log.warn("two");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
    }
}
