//! A very small Kubernetes API client: merge-patch one label on one Node.
//!
//! In-cluster it uses the service account token and CA; the API URL is configurable so tests
//! can point it at a local fake server over plain HTTP.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;
use ureq::tls::{Certificate, RootCerts, TlsConfig};

pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Debug, Error)]
pub enum KubeError {
    #[error(
        "Kubernetes API URL unknown: pass --kube-api-url or run in a pod (KUBERNETES_SERVICE_HOST)"
    )]
    NoApiUrl,
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("CA bundle {path}: {reason}")]
    Ca { path: PathBuf, reason: String },
    #[error("PATCH {url}: {reason}")]
    Http { url: String, reason: String },
    #[error("PATCH {url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
}

#[derive(Clone)]
pub struct KubeClient {
    agent: ureq::Agent,
    base_url: String,
    token: Option<String>,
}

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("KubeClient")
            .field("base_url", &self.base_url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// The API URL from the in-cluster environment variables.
pub fn in_cluster_url() -> Option<String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok()?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Some(format!("https://{host}:{port}"))
}

impl KubeClient {
    /// `token_file` / `ca_file` that do not exist are skipped (a local fake server needs neither).
    pub fn new(
        base_url: Option<String>,
        token_file: &Path,
        ca_file: &Path,
    ) -> Result<KubeClient, KubeError> {
        let base_url = base_url
            .or_else(in_cluster_url)
            .ok_or(KubeError::NoApiUrl)?
            .trim_end_matches('/')
            .to_string();
        let token = match std::fs::read_to_string(token_file) {
            Ok(t) => Some(t.trim().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(KubeError::Read {
                    path: token_file.to_path_buf(),
                    source,
                })
            }
        };
        let mut tls = TlsConfig::builder();
        match std::fs::read(ca_file) {
            Ok(pem) => {
                let cert = Certificate::from_pem(&pem).map_err(|e| KubeError::Ca {
                    path: ca_file.to_path_buf(),
                    reason: e.to_string(),
                })?;
                tls = tls.root_certs(RootCerts::Specific(Arc::new(vec![cert])));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(KubeError::Read {
                    path: ca_file.to_path_buf(),
                    source,
                })
            }
        }
        let config = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_secs(30)))
            .build();
        Ok(KubeClient {
            agent: ureq::Agent::new_with_config(config),
            base_url,
            token,
        })
    }

    /// Sets (`Some`) or removes (`None`) one label on a node with a JSON merge patch. Only the
    /// label is sent, so the patch cannot clobber anything else on the Node.
    pub fn set_node_label(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
    ) -> Result<(), KubeError> {
        let url = format!("{}/api/v1/nodes/{node}", self.base_url);
        let body = serde_json::json!({ "metadata": { "labels": { key: value } } }).to_string();
        let mut req = self
            .agent
            .patch(&url)
            .header("Content-Type", "application/merge-patch+json")
            .header("Accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.send(body.as_bytes()).map_err(|e| KubeError::Http {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = resp
                .body_mut()
                .read_to_string()
                .unwrap_or_else(|e| format!("<unreadable body: {e}>"));
            return Err(KubeError::Status {
                url,
                status,
                body: body.chars().take(500).collect(),
            });
        }
        Ok(())
    }
}
