//! DSSE (Dead Simple Signing Envelope, <https://github.com/secure-systems-lab/dsse>, v1.0):
//! the signature is over PAE(payloadType, payload), never over the JSON of the envelope, so a
//! verifier needs no canonical JSON. The key is the audit signing key (`[audit] signing_key`)
//! and its `keyid` is the short id the audit log's signatures carry (`sign::key_id`).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, Verifier as _};
use serde::{Deserialize, Serialize};

use crate::audit_chain::sign::{key_id, SigningKey, VerifyingKey};

/// A DSSE envelope as JSON carries it: the payload and each signature in standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub payload: String,
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    #[serde(default)]
    pub keyid: String,
    pub sig: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DsseError {
    #[error("payloadType is {found:?}, not {expected:?}")]
    PayloadType { expected: String, found: String },
    #[error("the payload is not base64: {0}")]
    PayloadEncoding(String),
    #[error("no signature by key {key_id} (the envelope is signed by: {signed_by})")]
    NoSignatureByKey { key_id: String, signed_by: String },
    #[error("the signature by key {0} is not a base64 ed25519 signature")]
    MalformedSignature(String),
    #[error("the signature by key {0} does not match the payload: altered, or signed by another key with the same id")]
    Mismatch(String),
}

/// The pre-authentication encoding: `"DSSEv1" SP len(type) SP type SP len(body) SP body`,
/// lengths in ASCII decimal.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// `payload` signed with `key` in an envelope of `payload_type`.
pub fn sign(key: &SigningKey, payload_type: &str, payload: &[u8]) -> Envelope {
    let sig = key.sign(&pae(payload_type, payload));
    Envelope {
        payload: B64.encode(payload),
        payload_type: payload_type.to_string(),
        signatures: vec![EnvelopeSignature {
            keyid: key_id(&key.verifying_key()),
            sig: B64.encode(sig.to_bytes()),
        }],
    }
}

/// The payload of `envelope`, once its type is `payload_type` and a signature by `key` holds.
/// Signatures by other keys are ignored (DSSE allows several); the one whose `keyid` is this
/// key's must verify.
pub fn open(
    envelope: &Envelope,
    payload_type: &str,
    key: &VerifyingKey,
) -> Result<Vec<u8>, DsseError> {
    if envelope.payload_type != payload_type {
        return Err(DsseError::PayloadType {
            expected: payload_type.to_string(),
            found: envelope.payload_type.clone(),
        });
    }
    let payload = B64
        .decode(&envelope.payload)
        .map_err(|e| DsseError::PayloadEncoding(e.to_string()))?;
    let id = key_id(key);
    let Some(entry) = envelope.signatures.iter().find(|s| s.keyid == id) else {
        let ids: Vec<&str> = envelope
            .signatures
            .iter()
            .map(|s| s.keyid.as_str())
            .collect();
        return Err(DsseError::NoSignatureByKey {
            key_id: id,
            signed_by: if ids.is_empty() {
                "no key".to_string()
            } else {
                ids.join(", ")
            },
        });
    };
    let bytes = B64
        .decode(&entry.sig)
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
        .ok_or_else(|| DsseError::MalformedSignature(id.clone()))?;
    let sig = ed25519_dalek::Signature::from_bytes(&bytes);
    key.verify(&pae(&envelope.payload_type, &payload), &sig)
        .map_err(|_| DsseError::Mismatch(id))?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    /// The example from the DSSE protocol document.
    #[test]
    fn pae_is_the_dsse_v1_encoding() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ".to_vec());
    }

    #[test]
    fn a_signed_payload_opens_with_its_key() {
        let k = key(1);
        let env = sign(&k, "t/x", b"{\"a\":1}");
        assert_eq!(env.signatures[0].keyid, key_id(&k.verifying_key()));
        assert_eq!(open(&env, "t/x", &k.verifying_key()).unwrap(), b"{\"a\":1}");
    }

    #[test]
    fn an_altered_payload_or_type_is_refused() {
        let k = key(1);
        let mut env = sign(&k, "t/x", b"{\"a\":1}");
        env.payload = B64.encode(b"{\"a\":2}");
        assert!(matches!(
            open(&env, "t/x", &k.verifying_key()),
            Err(DsseError::Mismatch(_))
        ));
        let env = sign(&k, "t/y", b"{}");
        assert!(matches!(
            open(&env, "t/x", &k.verifying_key()),
            Err(DsseError::PayloadType { .. })
        ));
    }

    #[test]
    fn another_key_is_refused_even_under_the_same_keyid() {
        let (a, b) = (key(1), key(2));
        let env = sign(&a, "t", b"p");
        assert!(matches!(
            open(&env, "t", &b.verifying_key()),
            Err(DsseError::NoSignatureByKey { .. })
        ));
        let mut forged = sign(&b, "t", b"p");
        forged.signatures[0].keyid = key_id(&a.verifying_key());
        assert!(matches!(
            open(&forged, "t", &a.verifying_key()),
            Err(DsseError::Mismatch(_))
        ));
    }
}
