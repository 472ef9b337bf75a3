//! Signed sandbox trails: the final record of a sandbox carries an ed25519 signature over the
//! hashes of all that sandbox's records, so a verifier holding the public key can tell a
//! complete, unaltered history from one with a record altered, added or removed, and a
//! sandbox whose signed final record is missing (cut, or still running).
//!
//! The signed message is
//!
//! ```text
//! gvisor-hardened audit trail v1\n
//! <namespace as a JSON string>\n
//! <container id as a JSON string>\n
//! <number of records>\n
//! <hash of each record, in log order, one per line>\n
//! ```
//!
//! The records are those of the container (namespace and id) from its `create` record to the
//! final record; the final record's own hash is taken of its line *without* the `sig` member
//! (the signature cannot cover itself). That line still carries `seq` and `prev`, so the
//! signature also pins where in the log the sandbox ended.
//!
//! On the line, `sig` is the last member: `...,"sig":{"alg":"ed25519","key_id":"..",
//! "records":N,"value":"<128 hex>"}}`, in exactly this serialisation, so the unsigned line is
//! recovered byte for byte by cutting it off.

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use ed25519_dalek::{Signer as _, Verifier as _};
use serde::{Deserialize, Serialize};

pub use ed25519_dalek::{SigningKey, VerifyingKey};

use super::{hash_line, Digest};

const DOMAIN: &str = "gvisor-hardened audit trail v1";
const ALG: &str = "ed25519";
const SIG_MEMBER: &[u8] = b",\"sig\":";

/// What sealing a sandbox's final record needs besides the line itself.
pub struct SealInput<'a> {
    pub key: &'a SigningKey,
    pub namespace: &'a str,
    pub container_id: &'a str,
    /// Hashes of the sandbox's earlier records (from its `create`), in log order.
    pub earlier: &'a [Digest],
}

/// The `sig` member of a final record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub alg: String,
    /// First 16 hex digits of sha256 of the raw public key: which key signed, for messages.
    pub key_id: String,
    /// How many records the signature covers, the final one included.
    pub records: u64,
    /// The 64-byte ed25519 signature in hex.
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("not an ed25519 private key in PKCS#8 PEM (\"-----BEGIN PRIVATE KEY-----\"): {0}")]
    PrivateKey(String),
    #[error("not an ed25519 public key in PEM (\"-----BEGIN PUBLIC KEY-----\"): {0}")]
    PublicKey(String),
    #[error("a record to sign must be a JSON object")]
    NotAnObject,
}

/// Why a sandbox's signature does not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigFailure {
    /// The `sig` member is not what this writer produces.
    Malformed(String),
    /// Signed by a different key than the one given.
    WrongKey { signed_with: String, given: String },
    /// The log holds a different number of records for the sandbox than were signed.
    Count { signed: u64, found: u64 },
    /// Same count, but the hashes or the key do not match the signature.
    Mismatch,
}

/// A short, stable name for a public key.
pub fn key_id(key: &VerifyingKey) -> String {
    Digest::of(key.as_bytes()).to_string()[..16].to_string()
}

/// The bytes the signature is over (see the module documentation).
pub fn message<'a>(
    namespace: &str,
    container_id: &str,
    hashes: impl ExactSizeIterator<Item = &'a Digest>,
) -> Vec<u8> {
    let quote = |s: &str| serde_json::to_string(s).expect("strings serialise");
    let mut out = format!(
        "{DOMAIN}\n{}\n{}\n{}\n",
        quote(namespace),
        quote(container_id),
        hashes.len()
    );
    for h in hashes {
        out.push_str(&h.to_string());
        out.push('\n');
    }
    out.into_bytes()
}

/// `unsigned` (a chained record line, no newline) with the sandbox's signature as its last
/// member.
pub fn seal(input: &SealInput<'_>, unsigned: &[u8]) -> Result<Vec<u8>, SigningError> {
    let open = unsigned
        .strip_suffix(b"}")
        .filter(|_| unsigned.starts_with(b"{"))
        .ok_or(SigningError::NotAnObject)?;
    let own = hash_line(unsigned);
    let hashes: Vec<&Digest> = input.earlier.iter().chain([&own]).collect();
    let msg = message(input.namespace, input.container_id, hashes.into_iter());
    let sig = Signature {
        alg: ALG.to_string(),
        key_id: key_id(&input.key.verifying_key()),
        records: input.earlier.len() as u64 + 1,
        value: hex(&input.key.sign(&msg).to_bytes()),
    };
    let mut out = open.to_vec();
    out.extend_from_slice(SIG_MEMBER);
    out.extend_from_slice(&serde_json::to_vec(&sig).expect("a signature serialises"));
    out.push(b'}');
    Ok(out)
}

/// Splits a final record into its unsigned line and its signature, checking that the `sig`
/// member is exactly where and as the writer puts it. `sig` is the parsed member.
pub fn split<'a>(line: &'a [u8], sig: &Signature) -> Result<Vec<u8>, SigFailure> {
    let canonical = serde_json::to_vec(sig).expect("a signature serialises");
    let tail_len = SIG_MEMBER.len() + canonical.len() + 1;
    let at = line.len().checked_sub(tail_len).ok_or_else(not_last)?;
    let tail: &'a [u8] = &line[at..];
    if !tail.starts_with(SIG_MEMBER)
        || &tail[SIG_MEMBER.len()..tail.len() - 1] != canonical.as_slice()
        || !tail.ends_with(b"}")
    {
        return Err(not_last());
    }
    let mut unsigned = line[..at].to_vec();
    unsigned.push(b'}');
    Ok(unsigned)
}

fn not_last() -> SigFailure {
    SigFailure::Malformed("the sig member is not the record's last member as written".into())
}

/// Checks a sandbox's signature: `hashes` are the hashes of all its records in log order, the
/// final one taken of its unsigned line.
pub fn check(
    key: &VerifyingKey,
    namespace: &str,
    container_id: &str,
    hashes: &[Digest],
    sig: &Signature,
) -> Result<(), SigFailure> {
    if sig.alg != ALG {
        return Err(SigFailure::Malformed(format!(
            "unknown signature algorithm {:?}",
            sig.alg
        )));
    }
    let given = key_id(key);
    if sig.key_id != given {
        return Err(SigFailure::WrongKey {
            signed_with: sig.key_id.clone(),
            given,
        });
    }
    if sig.records != hashes.len() as u64 {
        return Err(SigFailure::Count {
            signed: sig.records,
            found: hashes.len() as u64,
        });
    }
    let bytes = unhex(&sig.value)
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .ok_or_else(|| SigFailure::Malformed("the signature is not 128 hex digits".into()))?;
    let signature = ed25519_dalek::Signature::from_bytes(&bytes);
    let msg = message(namespace, container_id, hashes.iter());
    key.verify(&msg, &signature)
        .map_err(|_| SigFailure::Mismatch)
}

/// A private key from PKCS#8 PEM (what `policy-injector audit keygen` and
/// `openssl genpkey -algorithm ed25519` write).
pub fn signing_key_from_pem(pem: &str) -> Result<SigningKey, SigningError> {
    SigningKey::from_pkcs8_pem(pem).map_err(|e| SigningError::PrivateKey(e.to_string()))
}

/// A public key from SPKI PEM (`openssl pkey -pubout` writes the same).
pub fn verifying_key_from_pem(pem: &str) -> Result<VerifyingKey, SigningError> {
    VerifyingKey::from_public_key_pem(pem).map_err(|e| SigningError::PublicKey(e.to_string()))
}

/// A new key pair from 32 random bytes, as (private PKCS#8 PEM, public SPKI PEM).
pub fn key_pair_pem(seed: [u8; 32]) -> (String, String) {
    let key = SigningKey::from_bytes(&seed);
    // PKCS#8 v1 (the seed alone), as openssl writes it: OpenSSL 3.0 refuses the v2 form
    // with the public key embedded, which is what the dalek key type would write.
    let private = ed25519_dalek::pkcs8::KeypairBytes {
        secret_key: seed,
        public_key: None,
    }
    .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
    .expect("an ed25519 key encodes")
    .to_string();
    let public = key
        .verifying_key()
        .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .expect("an ed25519 key encodes");
    (private, public)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    s.as_bytes()
        .chunks(2)
        .map(|p| {
            let hi = (p[0] as char).to_digit(16)?;
            let lo = (p[1] as char).to_digit(16)?;
            Some((hi << 4 | lo) as u8)
        })
        .collect()
}
