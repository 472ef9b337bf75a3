//! A sandbox's trail: the hashes of its records, kept as they are appended, and a signature
//! over them on its final record (`policy_injector::audit_chain::sign`).
//!
//! A container holds one [`Trail`] from its Create to its Delete: `append` for each lifecycle
//! record, `seal` for the last one. With `[audit] signing_key` set, the sealed record carries
//! the signature; without it, `seal` is a plain append.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use policy_injector::audit_chain::sign::{self, SigningKey};
use policy_injector::audit_chain::{Digest, SealInput};
use policy_injector::policy::AuditPolicy;

use super::{writer, AuditError, AuditLog, AuditRecord, Line, Subject};

/// A PEM private key is a few hundred bytes; anything much larger is not one.
const MAX_KEY_BYTES: u64 = 16 << 10;

/// The node's audit signing key, loaded from `[audit] signing_key`.
pub struct Signer {
    key: SigningKey,
    path: PathBuf,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("Signer")
            .field("path", &self.path)
            .field("key_id", &sign::key_id(&self.key.verifying_key()))
            .finish()
    }
}

impl Signer {
    /// What `AuditLog::append_sealed` signs with: this key over a sandbox's earlier records.
    pub fn seal_input<'a>(
        &'a self,
        namespace: &'a str,
        container_id: &'a str,
        earlier: &'a [Digest],
    ) -> SealInput<'a> {
        SealInput {
            key: &self.key,
            namespace,
            container_id,
            earlier,
        }
    }

    /// Loads an ed25519 private key (PKCS#8 PEM). The file must be a regular file (not a
    /// symlink) that neither group nor others can read: a key others can read signs nothing
    /// they could not forge.
    pub fn load(path: &Path) -> Result<Signer, AuditError> {
        let err = |reason: String| AuditError::SigningKey {
            path: path.to_path_buf(),
            reason,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| err(format!("cannot open: {e}")))?;
        let meta = file
            .metadata()
            .map_err(|e| err(format!("cannot stat: {e}")))?;
        if !meta.is_file() {
            return Err(err("not a regular file".into()));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(err(format!(
                "readable or writable by group or others (mode {:04o}); chmod 600 it",
                meta.mode() & 0o7777
            )));
        }
        let mut pem = String::new();
        file.by_ref()
            .take(MAX_KEY_BYTES + 1)
            .read_to_string(&mut pem)
            .map_err(|e| err(format!("cannot read: {e}")))?;
        if pem.len() as u64 > MAX_KEY_BYTES {
            return Err(err(format!("larger than {MAX_KEY_BYTES} bytes")));
        }
        let key = sign::signing_key_from_pem(&pem).map_err(|e| err(e.to_string()))?;
        Ok(Signer {
            key,
            path: path.to_path_buf(),
        })
    }

    /// The policy's signer, or `None` when `[audit] signing_key` is empty.
    pub fn for_policy(audit: &AuditPolicy) -> Result<Option<Signer>, AuditError> {
        if audit.signing_key.is_empty() {
            return Ok(None);
        }
        Signer::load(Path::new(&audit.signing_key)).map(Some)
    }

    /// The short id verification messages name this key by.
    pub fn key_id(&self) -> String {
        sign::key_id(&self.key.verifying_key())
    }
}

/// One sandbox's records in the shared log.
#[derive(Debug)]
pub struct Trail {
    log: AuditLog,
    signer: Option<Arc<Signer>>,
    namespace: String,
    container_id: String,
    /// Hashes of the records appended so far; `None` once sealed.
    hashes: Mutex<Option<Vec<Digest>>>,
}

impl Trail {
    pub fn new(log: AuditLog, signer: Option<Arc<Signer>>, subject: &Subject) -> Trail {
        Trail {
            log,
            signer,
            namespace: subject.namespace.clone(),
            container_id: subject.container_id.clone(),
            hashes: Mutex::new(Some(Vec::new())),
        }
    }

    /// The trail a Create starts: the policy's log and, when the policy names one, its signing
    /// key, read now. A key that cannot be used is an error: the Create must fail rather than
    /// run a sandbox whose history cannot be signed as the policy demands.
    pub fn for_policy(
        audit: &AuditPolicy,
        policy_sha256: &str,
        subject: &Subject,
    ) -> Result<Trail, AuditError> {
        let signer = Signer::for_policy(audit)?.map(Arc::new);
        Ok(Trail::new(
            AuditLog::for_policy(audit, policy_sha256),
            signer,
            subject,
        ))
    }

    pub fn log(&self) -> &AuditLog {
        &self.log
    }

    /// True when the final record carries a signature.
    pub fn signs(&self) -> bool {
        self.signer.is_some()
    }

    pub fn is_sealed(&self) -> bool {
        self.lock().is_none()
    }

    /// The hashes of the records appended so far (none once sealed): for a trail another
    /// process continues (runsc-hardened's, kept in the container's state directory).
    pub fn hashes(&self) -> Vec<Digest> {
        self.lock().clone().unwrap_or_default()
    }

    /// The signer, if the policy names a key.
    pub fn signer(&self) -> Option<&Arc<Signer>> {
        self.signer.as_ref()
    }

    /// Appends one of the sandbox's records and remembers its hash.
    pub fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
        self.check_subject(record);
        self.append_line(&Line::of(record))
    }

    /// [`append`](Self::append) on the audit writer thread: queued now, behind every record
    /// queued before it, so the caller's async thread never waits on the log's lock or the
    /// disk. The record is written even if the returned future is dropped.
    pub fn append_queued(
        self: &Arc<Self>,
        record: &AuditRecord<'_>,
    ) -> impl std::future::Future<Output = Result<Digest, AuditError>> + Send + 'static {
        self.queue(record, Trail::append_line)
    }

    /// [`seal`](Self::seal) on the audit writer thread, after every record queued before it.
    pub fn seal_queued(
        self: &Arc<Self>,
        record: &AuditRecord<'_>,
    ) -> impl std::future::Future<Output = Result<Digest, AuditError>> + Send + 'static {
        self.queue(record, Trail::seal_line)
    }

    fn queue(
        self: &Arc<Self>,
        record: &AuditRecord<'_>,
        write: fn(&Trail, &Line) -> Result<Digest, AuditError>,
    ) -> impl std::future::Future<Output = Result<Digest, AuditError>> + Send + 'static {
        self.check_subject(record);
        let line = Line::of(record);
        let me = self.clone();
        writer::queue(self.log.path(), move || write(&me, &line))
    }

    fn append_line(&self, line: &Line) -> Result<Digest, AuditError> {
        // Held across the append, so the hashes are kept in the order the lines were written.
        let mut hashes = self.lock();
        let hash = self.log.write_line(line, None)?;
        match hashes.as_mut() {
            Some(h) => h.push(hash),
            None => log::warn!(
                "container {}: audit record {:?} written after the sandbox's final record; \
                 no signature covers it",
                self.container_id,
                line.event()
            ),
        }
        Ok(hash)
    }

    /// Appends one of the sandbox's records that is not a lifecycle record (egress); it must
    /// carry this trail's `namespace` and `container_id` so a verifier files it under the
    /// sandbox, and it is covered by the final record's signature like the others.
    pub fn append_value(&self, record: &impl serde::Serialize) -> Result<Digest, AuditError> {
        let mut hashes = self.lock();
        let hash = self.log.append_value(record)?;
        match hashes.as_mut() {
            Some(h) => h.push(hash),
            None => log::warn!(
                "container {}: an audit record written after the sandbox's final record; no \
                 signature covers it",
                self.container_id
            ),
        }
        Ok(hash)
    }

    /// The namespace and container id every record of this trail carries.
    pub fn owner(&self) -> (&str, &str) {
        (&self.namespace, &self.container_id)
    }

    /// Appends the sandbox's final record, signed over the hashes of all its records when the
    /// trail has a signer. Later records are still written, but no signature covers them.
    pub fn seal(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
        self.check_subject(record);
        self.seal_line(&Line::of(record))
    }

    fn seal_line(&self, line: &Line) -> Result<Digest, AuditError> {
        let mut hashes = self.lock();
        let Some(earlier) = hashes.as_ref() else {
            drop(hashes);
            return self.append_line(line);
        };
        let hash = match &self.signer {
            Some(signer) => {
                let input = signer.seal_input(&self.namespace, &self.container_id, earlier);
                self.log.write_line(line, Some(&input))?
            }
            None => self.log.write_line(line, None)?,
        };
        *hashes = None;
        Ok(hash)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Digest>>> {
        // A panic elsewhere while holding it leaves the hashes as they were: still usable.
        self.hashes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_subject(&self, record: &AuditRecord<'_>) {
        debug_assert!(
            record.subject.namespace == self.namespace
                && record.subject.container_id == self.container_id,
            "a trail holds one container's records"
        );
    }
}

#[cfg(test)]
mod tests;
