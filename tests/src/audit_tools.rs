//! The audit chain's tools, as the tests use them: the `policy-injector` binary
//! (`audit verify`, `audit keygen`) and the record schema (`shim/audit-record.schema.json`),
//! checked with Python's `jsonschema` (installed by `hack/lib.sh`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::error::{HarnessError, Result};

/// `policy-injector`, built next to the test executable (`cargo build -p policy-injector --features cli`).
pub fn policy_injector_binary() -> Result<PathBuf> {
    let exe = std::env::current_exe()
        .map_err(|e| HarnessError::io("locating", "the test executable", e))?;
    let profile_dir = exe
        .parent()
        .filter(|d| d.ends_with("deps") || d.ends_with("examples"))
        .and_then(|d| d.parent())
        .or_else(|| exe.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let path = profile_dir.join("policy-injector");
    if path.is_file() {
        Ok(path)
    } else {
        Err(HarnessError::io(
            "policy-injector not built (run `cargo build -p policy-injector --features cli`)",
            path,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ))
    }
}

/// Runs `policy-injector audit <args>`.
pub fn policy_injector_audit(args: &[&str]) -> Result<Output> {
    let bin = policy_injector_binary()?;
    Command::new(&bin)
        .arg("audit")
        .args(args)
        .output()
        .map_err(|e| HarnessError::io("running", bin, e))
}

/// The schema of audit records, in the repository.
pub fn audit_schema_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shim/audit-record.schema.json")
}

const VALIDATE: &str = r#"
import json, sys
from jsonschema import Draft202012Validator, FormatChecker
schema = json.load(open(sys.argv[1]))
Draft202012Validator.check_schema(schema)
v = Draft202012Validator(schema, format_checker=FormatChecker())
bad = 0
n = 0
for path in sys.argv[2:]:
    for i, line in enumerate(open(path, encoding="utf-8"), 1):
        n += 1
        for e in v.iter_errors(json.loads(line)):
            bad += 1
            print(f"{path} line {i}: {e.message} at {list(e.absolute_path)}")
print(f"{n} records checked, {bad} errors")
sys.exit(1 if bad else 0)
"#;

/// Validates every line of `files` against the schema; `Err` lists what does not conform.
pub fn validate_against_schema(files: &[&Path]) -> std::result::Result<String, String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(VALIDATE)
        .arg(audit_schema_path())
        .args(files)
        .output()
        .map_err(|e| format!("running python3: {e}"))?;
    outcome(&out)
}

/// A tool's stdout and stderr together: `Ok` when it exited 0, else `Err`.
pub fn outcome(out: &Output) -> std::result::Result<String, String> {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// Panics unless `log` is one intact chain (`audit verify`) whose every record fits the schema.
pub fn assert_chain_intact_and_records_fit_the_schema(log: &Path) {
    validate_against_schema(&[log])
        .unwrap_or_else(|e| panic!("records that do not conform to the schema:\n{e}"));
    let verify = policy_injector_audit(&["verify", &log.display().to_string()]).unwrap();
    if let Err(e) = outcome(&verify) {
        panic!("audit verify {}: {e}", log.display());
    }
}

/// `policy-injector/tests/export/NAME`: the validators of `audit export`'s output.
fn export_validator(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policy-injector/tests/export")
        .join(name)
}

/// Validates OCSF events (one per line) against OCSF VERSION's published schema, per class and
/// profiles (`ocsf-json-schema`, installed by `hack/lib.sh`); `Ok` has the counts.
pub fn validate_ocsf(version: &str, file: &Path) -> std::result::Result<String, String> {
    let out = Command::new("python3")
        .arg(export_validator("validate_ocsf.py"))
        .arg(version)
        .arg(file)
        .output()
        .map_err(|e| format!("running python3: {e}"))?;
    outcome(&out)
}

/// Parses OTLP JSON LogsData (one per line) with `opentelemetry-proto`'s classes, unknown fields
/// refused; `Ok` has the counts.
pub fn validate_otlp(file: &Path) -> std::result::Result<String, String> {
    let out = Command::new("python3")
        .arg(export_validator("validate_otlp.py"))
        .arg(file)
        .output()
        .map_err(|e| format!("running python3: {e}"))?;
    outcome(&out)
}
