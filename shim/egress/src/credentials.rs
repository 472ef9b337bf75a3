//! Credentials that never enter the sandbox: the sandbox's own CA (made at create; its private
//! key lives only in this process's memory), the CA bundle the sandbox trusts it through, the
//! TLS configurations of the proxy's two sides for a credential host, and the credential's
//! value, read from its host file when a request needs it.
//!
//! What may leak where: the CA's certificate and the bundle are public (the sandbox reads
//! them). The CA's key and the credential's value appear in no `Debug`, `Display`, error, log
//! line or audit record: nothing here derives `Debug` over them, and errors name files and
//! causes only.

use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use policy_injector::egress::{ca_bundle_host_path, CredentialPlan, NODE_TRUST_STORE};
use policy_injector::EgressPlan;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    KeyPair, KeyUsagePurpose, NameConstraints, PKCS_ECDSA_P256_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why the CA, a leaf, a TLS configuration or a credential could not be had. Never carries a
/// key or a credential's value.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("making the sandbox's egress CA: {0}")]
    Ca(String),
    #[error("writing the sandbox's CA bundle {path}: {source}")]
    Bundle {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the upstream trust anchors {path}: {why}")]
    UpstreamCa { path: String, why: String },
    #[error("TLS configuration: {0}")]
    Tls(String),
    #[error("the credential file {path} for {host}: {why}")]
    Value {
        host: String,
        path: String,
        why: String,
    },
}

/// How long the sandbox's CA and its leaves are valid: longer than any sandbox lives under
/// a policy's `max_runtime`, short enough that a copied certificate expires.
const VALIDITY: time::Duration = time::Duration::days(30);

/// One sandbox's CA: signs a leaf per credential host, only for those hosts (name
/// constraints), and nothing else. Its key is never serialised anywhere but into the rustls
/// configurations of this process.
pub struct SandboxCa {
    key: KeyPair,
    /// Signs the leaves. In a confined proxy process it is the same name and key re-signed
    /// there (`from_material`); the certificate the sandbox trusts is `der`.
    cert: rcgen::Certificate,
    der: CertificateDer<'static>,
    pem: String,
    /// What `new` made it from, so a confined proxy process can rebuild the signer.
    sandbox: String,
    hosts: Vec<String>,
    not_before: time::OffsetDateTime,
    not_after: time::OffsetDateTime,
    /// Per host: the acceptor's configuration with that host's leaf.
    servers: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl fmt::Debug for SandboxCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of every debug print.
        f.debug_struct("SandboxCa").finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl SandboxCa {
    /// A new CA for `sandbox`, allowed to sign for `hosts` only.
    pub fn new(sandbox: &str, hosts: &[String]) -> Result<SandboxCa, CredentialError> {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
            .map_err(|e| CredentialError::Ca(e.to_string()))?;
        let now = time::OffsetDateTime::now_utc();
        let (not_before, not_after) = (now - time::Duration::hours(1), now + VALIDITY);
        let cert = Self::params(sandbox, hosts, not_before, not_after)
            .self_signed(&key)
            .map_err(|e| CredentialError::Ca(e.to_string()))?;
        Ok(SandboxCa {
            der: cert.der().clone(),
            pem: cert.pem(),
            key,
            cert,
            sandbox: sandbox.to_string(),
            hosts: hosts.to_vec(),
            not_before,
            not_after,
            servers: Mutex::new(HashMap::new()),
        })
    }

    /// What a confined proxy process needs to sign this sandbox's leaves: the key, the
    /// certificate the sandbox trusts, and what the certificate was made from.
    pub fn material(&self) -> CaMaterial {
        CaMaterial {
            key_pem: self.key.serialize_pem(),
            cert_pem: self.pem.clone(),
            sandbox: self.sandbox.clone(),
            hosts: self.hosts.clone(),
            not_before: self.not_before.unix_timestamp(),
            not_after: self.not_after.unix_timestamp(),
        }
    }

    /// The CA again from its material (in the confined proxy process): the same key and
    /// name, so leaves signed here chain to the certificate the sandbox trusts, which is the
    /// one presented.
    pub fn from_material(m: &CaMaterial) -> Result<SandboxCa, CredentialError> {
        let ca = |e: rcgen::Error| CredentialError::Ca(e.to_string());
        let key = KeyPair::from_pem(&m.key_pem).map_err(ca)?;
        let time = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t)
                .map_err(|e| CredentialError::Ca(e.to_string()))
        };
        let (not_before, not_after) = (time(m.not_before)?, time(m.not_after)?);
        let cert = Self::params(&m.sandbox, &m.hosts, not_before, not_after)
            .self_signed(&key)
            .map_err(ca)?;
        let der = CertificateDer::from_pem_slice(m.cert_pem.as_bytes())
            .map_err(|e| CredentialError::Ca(e.to_string()))?;
        Ok(SandboxCa {
            key,
            cert,
            der,
            pem: m.cert_pem.clone(),
            sandbox: m.sandbox.clone(),
            hosts: m.hosts.clone(),
            not_before,
            not_after,
            servers: Mutex::new(HashMap::new()),
        })
    }

    fn params(
        sandbox: &str,
        hosts: &[String],
        not_before: time::OffsetDateTime,
        not_after: time::OffsetDateTime,
    ) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            format!("gvisor-hardened egress CA for sandbox {sandbox}"),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        // Even the sandbox's own trust in it covers the credential hosts only.
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: hosts
                .iter()
                .map(|h| GeneralSubtree::DnsName(h.clone()))
                .collect(),
            excluded_subtrees: Vec::new(),
        });
        params.not_before = not_before;
        params.not_after = not_after;
        params
    }

    /// The CA's certificate (public).
    pub fn cert_pem(&self) -> String {
        self.pem.clone()
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.der.clone()
    }

    /// The TLS server configuration the proxy presents to the workload for `host`: a leaf for
    /// that name signed by this CA, HTTP/1.1 only. Made once per host.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CredentialError> {
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = servers.get(host) {
            return Ok(c.clone());
        }
        let ca = |e: rcgen::Error| CredentialError::Ca(e.to_string());
        let leaf_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(ca)?;
        let mut params = CertificateParams::new(vec![host.to_string()]).map_err(ca)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + VALIDITY;
        let leaf = params
            .signed_by(&leaf_key, &self.cert, &self.key)
            .map_err(ca)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| CredentialError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone(), self.cert_der()], key)
            .map_err(|e| CredentialError::Tls(e.to_string()))?;
        // One request per connection, parsed as HTTP/1.1: no h2 for the workload to pick.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        servers.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

/// A sandbox CA's key and certificate, for the sandbox's confined proxy process only. Its
/// `Debug` prints no key.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct CaMaterial {
    key_pem: String,
    cert_pem: String,
    sandbox: String,
    hosts: Vec<String>,
    not_before: i64,
    not_after: i64,
}

impl fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaMaterial").finish_non_exhaustive()
    }
}

impl Drop for CaMaterial {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.key_pem);
    }
}

/// The upstream trust anchors' text, read where the file can be read (the shim, as root) for
/// a proxy that cannot (the confined process); `Err`: why not, said when a request needs it.
pub fn read_upstream_anchors(ca_file: &str) -> Result<String, String> {
    std::fs::read_to_string(ca_file).map_err(|e| {
        CredentialError::UpstreamCa {
            path: ca_file.to_string(),
            why: e.to_string(),
        }
        .to_string()
    })
}

/// The TLS client configuration toward credential hosts' upstreams: their certificates must
/// chain to the certificates of `ca_file` (the policy's `upstream_ca` or the node's store).
pub fn upstream_config(ca_file: &str) -> Result<Arc<rustls::ClientConfig>, CredentialError> {
    let text = std::fs::read(ca_file).map_err(|e| CredentialError::UpstreamCa {
        path: ca_file.to_string(),
        why: e.to_string(),
    })?;
    upstream_config_from_pem(ca_file, &text)
}

/// [`upstream_config`] from the file's text (`name` only for errors).
pub fn upstream_config_from_pem(
    name: &str,
    pem: &[u8],
) -> Result<Arc<rustls::ClientConfig>, CredentialError> {
    let bad = |why: String| CredentialError::UpstreamCa {
        path: name.to_string(),
        why,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(bad("no usable CA certificate in it".into()));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| CredentialError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A credential's value: read from its file when a request needs it (a rotated file takes
/// effect at the next request). Its `Debug` prints nothing of it.
pub struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl Drop for Secret {
    // Overwritten before the memory is freed: a later core dump or heap reuse finds no copy
    // here (rustls's own buffers are beyond reach).
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// Where a credential's value comes from when a request needs it: its file (in the shim), or
/// the shim asked over the confined proxy process's channel (the file is root's).
#[async_trait::async_trait]
pub trait CredentialValues: Send + Sync + 'static {
    async fn value(
        &self,
        host: &str,
        port: u16,
        cred: &CredentialPlan,
    ) -> Result<Secret, CredentialError>;
}

/// Reads the value from the credential's file, at each request.
#[derive(Debug, Default)]
pub struct FileValues;

#[async_trait::async_trait]
impl CredentialValues for FileValues {
    async fn value(
        &self,
        host: &str,
        _port: u16,
        cred: &CredentialPlan,
    ) -> Result<Secret, CredentialError> {
        read_value(host, cred)
    }
}

impl Secret {
    /// A value received whole from the shim (already checked there by [`read_value`]).
    pub fn received(value: String) -> Secret {
        Secret(value)
    }
}

/// The most a credential file may hold.
const MAX_VALUE: u64 = 16 * 1024;

/// Reads `cred`'s value for `host`: one line (a trailing newline dropped), printable, bounded.
/// The error says what is wrong, never what the file holds.
pub fn read_value(host: &str, cred: &CredentialPlan) -> Result<Secret, CredentialError> {
    let bad = |why: String| CredentialError::Value {
        host: host.to_string(),
        path: cred.file.clone(),
        why,
    };
    let file = std::fs::File::open(&cred.file).map_err(|e| bad(e.kind().to_string()))?;
    let len = file
        .metadata()
        .map_err(|e| bad(e.kind().to_string()))?
        .len();
    if len > MAX_VALUE {
        return Err(bad(format!("larger than {MAX_VALUE} bytes")));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_VALUE), &mut text)
        .map_err(|_| bad("not UTF-8 text".into()))?;
    // Owned by a Secret from here, so every way out overwrites it.
    let mut text = Secret(text);
    let value = text.0.strip_suffix('\n').unwrap_or(&text.0);
    let value = value.strip_suffix('\r').unwrap_or(value);
    let len = value.len();
    if len == 0 {
        return Err(bad("empty".into()));
    }
    if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
        return Err(bad(
            "holds control characters or more than one line: not a header value".into(),
        ));
    }
    text.0.truncate(len);
    Ok(text)
}

/// The CAs made at create, by sandbox id, until the sandbox's delete: the proxy started later
/// for that sandbox finds its CA here (the key never leaves this process).
static CAS: Mutex<Option<HashMap<String, Arc<SandboxCa>>>> = Mutex::new(None);

/// At the create of a sandbox whose plan has credentials: a new CA, the bundle (node store +
/// this CA) written where the hardened spec bind-mounts it from, and the CA kept for the
/// proxy. Nothing to do without credentials.
pub fn prepare_sandbox(
    plan: Option<&EgressPlan>,
    namespace: &str,
    sandbox_id: &str,
) -> Result<(), CredentialError> {
    let Some(plan) = plan.filter(|p| !p.credentials.is_empty()) else {
        return Ok(());
    };
    let hosts = plan.credential_hosts();
    let ca = SandboxCa::new(sandbox_id, &hosts)?;
    let path = ca_bundle_host_path(namespace, sandbox_id);
    write_bundle(
        Path::new(&path),
        Path::new(NODE_TRUST_STORE),
        &ca.cert_pem(),
    )?;
    CAS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(sandbox_id.to_string(), Arc::new(ca));
    Ok(())
}

/// The CA made at `sandbox_id`'s create, if any.
pub fn sandbox_ca(sandbox_id: &str) -> Option<Arc<SandboxCa>> {
    CAS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(sandbox_id).cloned())
}

/// At the sandbox's delete (or a failed create): the CA is dropped and the bundle removed.
pub fn forget_sandbox(namespace: &str, sandbox_id: &str) {
    if let Some(m) = CAS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        m.remove(sandbox_id);
    }
    let path = ca_bundle_host_path(namespace, sandbox_id);
    let path = Path::new(&path);
    if std::fs::remove_file(path).is_ok() {
        if let Some(dir) = path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The bundle: the node's trust store (so the sandbox's tools still verify every other host
/// the allowlist names) followed by the sandbox's CA; world-readable, written whole or not at
/// all (a temporary file renamed into place).
pub fn write_bundle(path: &Path, node_store: &Path, ca_pem: &str) -> Result<(), CredentialError> {
    let fail = |source: std::io::Error| CredentialError::Bundle {
        path: path.display().to_string(),
        source,
    };
    let dir = path.parent().expect("the bundle path has a directory");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(fail)?;
    let mut text = match std::fs::read_to_string(node_store) {
        Ok(t) => t,
        // A node without a trust store: the sandbox trusts only its CA.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(fail(e)),
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(ca_pem);
    let options = gvisor_hardened_proc::atomic_file::Options {
        mode: 0o644,
        durable: true,
    };
    gvisor_hardened_proc::atomic_file::write(path, text.as_bytes(), options).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(file: &str) -> CredentialPlan {
        CredentialPlan {
            header: "x-api-key".into(),
            file: file.into(),
            rules: Vec::new(),
        }
    }

    #[test]
    fn values_are_one_printable_line_and_errors_never_show_them() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("k");
        std::fs::write(&f, "sk-planted-1234\n").unwrap();
        let p = f.display().to_string();
        assert_eq!(
            read_value("h", &cred(&p)).unwrap().expose(),
            "sk-planted-1234"
        );
        assert_eq!(
            format!("{:?}", read_value("h", &cred(&p)).unwrap()),
            "Secret(..)"
        );
        std::fs::write(&f, "sk-planted-1234\nsecond\n").unwrap();
        let e = read_value("h", &cred(&p)).unwrap_err().to_string();
        assert!(
            e.contains("more than one line") && !e.contains("planted"),
            "{e}"
        );
        std::fs::write(&f, "").unwrap();
        assert!(read_value("h", &cred(&p))
            .unwrap_err()
            .to_string()
            .contains("empty"));
        let missing = dir.path().join("none").display().to_string();
        let e = read_value("h", &cred(&missing)).unwrap_err().to_string();
        assert!(e.contains(&missing), "{e}");
    }

    #[test]
    fn the_bundle_holds_the_node_store_then_the_ca_and_no_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store.pem");
        std::fs::write(
            &store,
            "-----BEGIN CERTIFICATE-----\nnode\n-----END CERTIFICATE-----",
        )
        .unwrap();
        let ca = SandboxCa::new("sb", &["api.example.test".into()]).unwrap();
        let bundle = dir.path().join("ns/sb/ca-bundle.pem");
        write_bundle(&bundle, &store, &ca.cert_pem()).unwrap();
        let text = std::fs::read_to_string(&bundle).unwrap();
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----\nnode\n"));
        assert!(text.ends_with(&ca.cert_pem()));
        assert!(!text.contains("PRIVATE KEY"));
        assert_eq!(format!("{ca:?}"), "SandboxCa { .. }");
        // A leaf for the host verifies against the bundle's CA.
        ca.server_config("api.example.test").unwrap();
    }
}
