//! A runsc-hardened container's trail: the hashes of its audit records, kept in its state
//! directory, and its final record (`delete`'s) signed over them, as the shim's
//! [`Trail`](gvisor_hardened_core::audit::Trail) does in memory.
//!
//! The records of one container are written by different processes (`create`, `start`, the
//! guard and its egress proxy, `exec`, `update`, `delete`), some at the same time. Each takes
//! an exclusive lock on the trail file, appends its record to the log and its hash to the
//! file, and lets go: the hashes stay in log order, which is what the signature covers.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use policy_injector::audit_chain::Digest;
use serde::Serialize;

use super::state::{Record, StateDir};
use gvisor_hardened_core::audit::{open_locked, AuditError, AuditLog, AuditRecord, Signer};

/// The trail file's name in the state directory.
const TRAIL: &str = "audit-trail";
/// The line that ends the trail once the final record is written.
const SEALED: &str = "sealed";

#[derive(Clone)]
pub struct StateTrail {
    log: AuditLog,
    file: PathBuf,
    namespace: String,
    container_id: String,
}

impl StateTrail {
    pub fn open(record: &Record, state: &StateDir) -> StateTrail {
        StateTrail::new(
            AuditLog::new(&record.audit_path),
            state.path(),
            &record.subject.namespace,
            &record.subject.container_id,
        )
    }

    fn new(log: AuditLog, state_dir: &Path, namespace: &str, container_id: &str) -> StateTrail {
        StateTrail {
            log,
            file: state_dir.join(TRAIL),
            namespace: namespace.to_string(),
            container_id: container_id.to_string(),
        }
    }

    /// Starts the file with the records `create` wrote before the state directory existed.
    pub fn begin(&self, earlier: &[Digest]) -> Result<(), AuditError> {
        self.locked(|f, _| {
            let text: String = earlier.iter().map(|d| format!("{d}\n")).collect();
            f.write_all(text.as_bytes()).map_err(|e| self.io(e))
        })
    }

    pub fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
        self.locked(|f, sealed| {
            let hash = self.log.append(record)?;
            self.remember(f, sealed, hash)
        })
    }

    /// A record that is not a lifecycle record (egress), carrying this container's namespace
    /// and id.
    pub fn append_value(&self, record: &impl Serialize) -> Result<Digest, AuditError> {
        self.locked(|f, sealed| {
            let hash = self.log.append_value(record)?;
            self.remember(f, sealed, hash)
        })
    }

    /// Writes the final record, signed over every earlier record's hash when `signer` is given.
    /// A trail file that cannot be read leaves the record unsigned rather than unwritten: a
    /// verifier then reports the container as lacking its signed final record.
    pub fn seal(
        &self,
        record: &AuditRecord<'_>,
        signer: Option<&Signer>,
    ) -> Result<Digest, AuditError> {
        self.locked(|f, sealed| {
            let hash = match signer.filter(|_| !sealed) {
                Some(signer) => {
                    let earlier = read_hashes(f).map_err(|e| self.io(e))?;
                    let input = signer.seal_input(&self.namespace, &self.container_id, &earlier);
                    self.log.append_sealed(record, Some(&input))?
                }
                None => self.log.append(record)?,
            };
            f.write_all(format!("{SEALED}\n").as_bytes())
                .map_err(|e| self.io(e))?;
            Ok(hash)
        })
    }

    fn remember(&self, f: &mut File, sealed: bool, hash: Digest) -> Result<Digest, AuditError> {
        if !sealed {
            f.write_all(format!("{hash}\n").as_bytes())
                .map_err(|e| self.io(e))?;
        }
        Ok(hash)
    }

    /// Runs `f` holding the trail file's lock; `f` learns whether the trail is sealed.
    fn locked<T>(
        &self,
        f: impl FnOnce(&mut File, bool) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        let mut file = open_locked(&self.file).map_err(|e| self.io(e))?;
        let sealed = is_sealed(&mut file).map_err(|e| self.io(e))?;
        f(&mut file, sealed)
    }

    fn io(&self, source: std::io::Error) -> AuditError {
        AuditError::Io {
            path: self.file.clone(),
            source,
        }
    }
}

fn read_all(f: &mut File) -> std::io::Result<String> {
    use std::io::Seek;
    f.seek(std::io::SeekFrom::Start(0))?;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

fn is_sealed(f: &mut File) -> std::io::Result<bool> {
    Ok(read_all(f)?.lines().any(|l| l == SEALED))
}

fn read_hashes(f: &mut File) -> std::io::Result<Vec<Digest>> {
    read_all(f)?
        .lines()
        .map(|l| {
            Digest::from_hex(l).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not a record hash: {l:?}"),
                )
            })
        })
        .collect()
}

/// The lifecycle's records through the core's operations (the exec gate): written at once,
/// under the trail file's lock, like every other record of this front end.
#[async_trait::async_trait]
impl gvisor_hardened_core::sandbox::exec_gate::SandboxRecords for StateTrail {
    async fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
        StateTrail::append(self, record)
    }
}

#[cfg(test)]
mod tests;
