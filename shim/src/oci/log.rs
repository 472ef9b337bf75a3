//! The log the engine reads back: runc's `--log FILE --log-format json|text`. On a failed call,
//! Docker shows the last error line's `msg` ("OCI runtime create failed: <msg>") and Podman
//! the JSON `msg` (with `runtime_supports_json`); without `--log` the line goes to stderr only.

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
