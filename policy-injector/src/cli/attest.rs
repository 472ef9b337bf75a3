//! `audit attest` and `audit verify-attestation`: file I/O around
//! `policy_injector::attestation`. The log is verified (chain and signed trails, with the
//! public half of the signing key) in the same pass that folds the run, so a statement is only
//! ever signed over records the key already vouched for.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use anyhow::{anyhow, Context as _};
use sha2::{Digest as _, Sha256};

use policy_injector::attestation::{self, Envelope, RunFold};
use policy_injector::audit_chain::sign::{key_id, signing_key_from_pem, verifying_key_from_pem};
use policy_injector::audit_chain::Verifier;

use super::follow::{read_files, LineSink};

/// One pass over the log: the chain and signatures checked, and the run folded, line by line.
struct VerifyAndFold {
    verifier: Verifier,
    fold: RunFold,
}

impl LineSink for VerifyAndFold {
    fn begin_file(&mut self, name: &str) {
        self.verifier.begin_file(name);
    }

    fn line(&mut self, bytes: &[u8], terminated: bool) {
        self.verifier.line(bytes, terminated);
        self.fold.line(bytes);
    }
}

/// What `attest` was asked for.
pub struct AttestRequest<'a> {
    pub files: &'a [PathBuf],
    pub container_id: &'a str,
    pub namespace: Option<&'a str>,
    pub key: &'a Path,
    /// Where the exit manifest is, when not at the path the exit record names.
    pub manifest: Option<&'a Path>,
}

/// The envelope as one JSON line, `Err(Ok(verdict))` when the log does not verify (exit 3).
pub fn attest(req: &AttestRequest<'_>) -> anyhow::Result<Result<String, String>> {
    let pem = std::fs::read_to_string(req.key)
        .with_context(|| format!("cannot read signing key {}", req.key.display()))?;
    let key = signing_key_from_pem(&pem).map_err(|e| anyhow!("{}: {e}", req.key.display()))?;
    let mut pass = VerifyAndFold {
        verifier: Verifier::new(Some(key.verifying_key()), true),
        fold: RunFold::new(req.container_id, req.namespace),
    };
    read_files(req.files, &mut pass, |_| false)?;
    let VerifyAndFold { verifier, fold } = pass;
    if let Err(b) = verifier.finish() {
        return Ok(Err(format!(
            "not attested: the audit log does not verify with this key: {b}"
        )));
    }
    let run = fold.finish()?;
    let written = match (&run.artifacts.manifest, req.manifest) {
        (Some(recorded), given) => {
            let path = given.unwrap_or(Path::new(&recorded.path));
            let bytes = std::fs::read(path)
                .with_context(|| format!("cannot read the exit manifest {}", path.display()))?;
            attestation::written_files(&bytes, &recorded.sha256, req.container_id)
                .map_err(|e| anyhow!("{}: {e}", path.display()))?
        }
        (None, _) => attestation::Written {
            subjects: Vec::new(),
            unattested: Vec::new(),
            exact: false,
        },
    };
    let statement = attestation::statement(run, written)?;
    let mut out = serde_json::to_string(&attestation::sign(&statement, &key))
        .context("serialising the envelope")?;
    out.push('\n');
    Ok(Ok(out))
}

/// Writes the envelope to a new file (never over an existing one).
pub fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// `Ok(Ok(report))` when the envelope and (with `artifacts`) the files hold, `Ok(Err(verdict))`
/// when not, `Err` when a file cannot be read.
pub fn verify(
    public_key: &Path,
    envelope: &Path,
    artifacts: Option<&Path>,
) -> anyhow::Result<Result<String, String>> {
    let pem = std::fs::read_to_string(public_key)
        .with_context(|| format!("cannot read public key {}", public_key.display()))?;
    let key = verifying_key_from_pem(&pem).map_err(|e| anyhow!("{}: {e}", public_key.display()))?;
    let text =
        std::fs::read(envelope).with_context(|| format!("cannot read {}", envelope.display()))?;
    let env: Envelope = match serde_json::from_slice(&text) {
        Ok(env) => env,
        Err(e) => return Ok(Err(format!("refused: not a DSSE envelope: {e}"))),
    };
    let statement = match attestation::verify(&env, &key) {
        Ok(s) => s,
        Err(e) => return Ok(Err(format!("refused: {e}"))),
    };
    let p = &statement.predicate;
    let mut out = format!(
        "attestation verified: signed by key {}, {} subject(s), sandbox {}/{}, exit {} ({})\n",
        key_id(&key),
        statement.subject.len(),
        p.pointer("/sandbox/namespace")
            .and_then(|v| v.as_str())
            .unwrap_or("?"),
        p.pointer("/sandbox/container_id")
            .and_then(|v| v.as_str())
            .unwrap_or("?"),
        p.pointer("/exit/status")
            .map_or("?".to_string(), |v| v.to_string()),
        p.pointer("/exit/cause")
            .and_then(|v| v.as_str())
            .unwrap_or("no exit record"),
    );
    if let Some(dir) = artifacts {
        for s in &statement.subject {
            let Some(path) = under(dir, &s.name) else {
                return Ok(Err(format!(
                    "refused: subject {:?} is not a path that stays under {}",
                    s.name,
                    dir.display()
                )));
            };
            let want = &s.digest["sha256"];
            match sha256_of_file(&path) {
                Ok(got) if &got == want => {}
                Ok(got) => {
                    return Ok(Err(format!(
                        "refused: {} has sha256 {got}, the attestation says {want}",
                        path.display()
                    )))
                }
                Err(e) => return Ok(Err(format!("refused: subject {}: {e}", s.name))),
            }
        }
        out.push_str(&format!(
            "artifacts: all {} subject(s) under {} hash as attested\n",
            statement.subject.len(),
            dir.display()
        ));
    }
    Ok(Ok(out))
}

/// `dir` joined with a subject's container path, or `None` when the name could climb out.
fn under(dir: &Path, name: &str) -> Option<PathBuf> {
    let rel = Path::new(name.trim_start_matches('/'));
    let normal = rel.components().all(|c| matches!(c, Component::Normal(_)));
    (normal && !name.is_empty()).then(|| dir.join(rel))
}

/// The file's sha256; a symlink or anything but a regular file is refused, not followed (the
/// files were written by the sandbox). The inode looked at is the inode read.
fn sha256_of_file(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::MetadataExt as _;
    let seen = std::fs::symlink_metadata(path)
        .with_context(|| format!("cannot stat {}", path.display()))?;
    if !seen.is_file() {
        return Err(anyhow!(
            "{} is not a regular file (symlinks are not followed)",
            path.display()
        ));
    }
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let opened = f.metadata()?;
    if (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
        return Err(anyhow!(
            "{} was replaced while it was opened",
            path.display()
        ));
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}
