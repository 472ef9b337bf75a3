//! `audit verify` and `audit keygen`: file I/O around `policy_injector::audit_chain`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context as _};

use policy_injector::audit_chain::sign::{self, verifying_key_from_pem};
use policy_injector::audit_chain::{Summary, Verifier};

/// `Ok(Ok(report))` when intact, `Ok(Err(report))` when broken, `Err` when a file or the key
/// cannot be read.
pub fn verify(
    files: &[PathBuf],
    public_key: Option<&Path>,
    allow_open: bool,
) -> anyhow::Result<Result<String, String>> {
    let key = match public_key {
        Some(path) => {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read public key {}", path.display()))?;
            Some(
                verifying_key_from_pem(&pem)
                    .map_err(|e| anyhow!("public key {}: {e}", path.display()))?,
            )
        }
        None => None,
    };
    let mut v = Verifier::new(key, allow_open);
    super::follow::read_files(files, &mut v, Verifier::settled)?;
    Ok(match v.finish() {
        Ok(summary) => Ok(report(&summary, public_key.is_some())),
        Err(b) => Err(format!("chain broken: {b}")),
    })
}

fn report(s: &Summary, keyed: bool) -> String {
    let mut out = format!("{} records, chain intact\n", s.records);
    match (s.first_seq, s.last_seq) {
        (Some(first), Some(last)) if s.from_origin => out.push_str(&format!(
            "{} file(s), seq {first}..{last}, from the log's first record\n",
            s.files
        )),
        (Some(first), Some(last)) => out.push_str(&format!(
            "{} file(s), seq {first}..{last}; older records were rotated away: the first \
             file's link to them is not checked\n",
            s.files
        )),
        _ => out.push_str(&format!("{} file(s), all empty\n", s.files)),
    }
    match &s.signatures {
        Some(sig) => {
            out.push_str(&format!(
                "signatures: {} sandbox(es) signed and verified",
                sig.sealed
            ));
            if sig.standalone > 0 {
                out.push_str(&format!(
                    "; {} create-rejected/create-failed record(s) of containers that never \
                     had a sandbox (unsigned)",
                    sig.standalone
                ));
            }
            if sig.partial > 0 {
                out.push_str(&format!(
                    "; {} sandbox(es) created before the first file (not checkable)",
                    sig.partial
                ));
            }
            out.push('\n');
            if !sig.open.is_empty() {
                out.push_str(&format!(
                    "open (no signed final record yet: running, or the log was cut after \
                     them): {}\n",
                    sig.open.join(", ")
                ));
            }
        }
        None if keyed => {}
        None => out.push_str("signatures: not checked (no --public-key)\n"),
    }
    out
}

/// Writes PREFIX.key and PREFIX.pub; refuses to touch either if one exists.
pub fn keygen(prefix: &Path) -> anyhow::Result<String> {
    let with_ext = |ext: &str| {
        let mut p = prefix.as_os_str().to_owned();
        p.push(ext);
        PathBuf::from(p)
    };
    let (private_path, public_path) = (with_ext(".key"), with_ext(".pub"));
    for p in [&private_path, &public_path] {
        if p.symlink_metadata().is_ok() {
            return Err(anyhow!("{} exists; not overwriting it", p.display()));
        }
    }
    let mut seed = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut seed))
        .context("reading /dev/urandom")?;
    let (private, public) = sign::key_pair_pem(seed);
    seed.fill(0);
    write_new(&private_path, private.as_bytes(), 0o600)?;
    if let Err(e) = write_new(&public_path, public.as_bytes(), 0o644) {
        let _ = std::fs::remove_file(&private_path);
        return Err(e);
    }
    let key = verifying_key_from_pem(&public).expect("the key just written parses");
    Ok(format!(
        "wrote {} (private, mode 0600: [audit] signing_key) and {} (public: audit verify \
         --public-key); key id {}\n",
        private_path.display(),
        public_path.display(),
        sign::key_id(&key)
    ))
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    if let Err(e) = f.write_all(bytes).and_then(|()| f.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(e).with_context(|| format!("writing {}", path.display()));
    }
    Ok(())
}
