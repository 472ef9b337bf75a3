//! Verification over CRI: what the kubelet will see after the restart.
//!
//! `RuntimeService/Status` with `verbose = true` returns the CRI plugin's effective config as
//! JSON (`info["config"]`), including the registered runtimes. A CRI plugin that failed to load
//! answers `Unimplemented`, which is how the drop-in trap shows up from outside.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::StatusRequest;
use thiserror::Error;
use tonic::transport::{Endpoint, Uri};

#[derive(Debug, Error)]
pub enum CriError {
    #[error("CRI socket {socket}: {reason}")]
    Connect { socket: PathBuf, reason: String },
    #[error("CRI Status on {socket}: {status}")]
    Rpc {
        socket: PathBuf,
        status: Box<tonic::Status>,
    },
    #[error("CRI Status on {socket}: verbose info has no usable `config`: {reason}")]
    Info { socket: PathBuf, reason: String },
    #[error("CRI on {socket} not as expected after {waited:?}: {last}")]
    Timeout {
        socket: PathBuf,
        waited: Duration,
        last: String,
    },
    #[error("tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// What CRI reports, reduced to what the installer checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriStatus {
    pub runtime_ready: bool,
    /// Handler name -> runtime type, from the effective CRI config.
    pub runtimes: BTreeMap<String, String>,
    /// Handler name -> options.ConfigPath (empty when unset).
    pub config_paths: BTreeMap<String, String>,
}

/// One `Status(verbose)` call.
pub fn status(socket: &Path, timeout: Duration) -> Result<CriStatus, CriError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CriError::Runtime)?;
    rt.block_on(status_async(socket, timeout))
}

async fn status_async(socket: &Path, timeout: Duration) -> Result<CriStatus, CriError> {
    let path = socket.to_path_buf();
    let connect_err = |reason: String| CriError::Connect {
        socket: socket.to_path_buf(),
        reason,
    };
    // The URI is required by tonic but unused: the connector always dials the unix socket.
    let channel = Endpoint::try_from("http://[::]:50051")
        .map_err(|e| connect_err(e.to_string()))?
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| connect_err(format!("{e}: {:?}", std::error::Error::source(&e))))?;
    let mut client = RuntimeServiceClient::new(channel);
    let resp = client
        .status(StatusRequest { verbose: true })
        .await
        .map_err(|status| CriError::Rpc {
            socket: socket.to_path_buf(),
            status: Box::new(status),
        })?
        .into_inner();
    let runtime_ready = resp
        .status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .any(|c| c.r#type == "RuntimeReady" && c.status)
        })
        .unwrap_or(false);
    let info_err = |reason: String| CriError::Info {
        socket: socket.to_path_buf(),
        reason,
    };
    let config = resp
        .info
        .get("config")
        .ok_or_else(|| info_err("missing".into()))?;
    let (runtimes, config_paths) = parse_runtimes(config).map_err(info_err)?;
    Ok(CriStatus {
        runtime_ready,
        runtimes,
        config_paths,
    })
}

type RuntimeMaps = (BTreeMap<String, String>, BTreeMap<String, String>);

/// Extracts runtimes from the CRI config JSON. containerd 1.x nests them under
/// `containerd.runtimes`; the field names are camelCase (`runtimeType`, `options.ConfigPath`).
pub fn parse_runtimes(config_json: &str) -> Result<RuntimeMaps, String> {
    let v: serde_json::Value = serde_json::from_str(config_json).map_err(|e| e.to_string())?;
    let runtimes = v
        .get("containerd")
        .and_then(|c| c.get("runtimes"))
        .or_else(|| v.get("runtimes"))
        .and_then(|r| r.as_object())
        .ok_or("no `containerd.runtimes` object")?;
    let mut types = BTreeMap::new();
    let mut paths = BTreeMap::new();
    for (name, rt) in runtimes {
        let ty = rt
            .get("runtimeType")
            .and_then(|t| t.as_str())
            .unwrap_or_default();
        types.insert(name.clone(), ty.to_string());
        let cp = rt
            .get("options")
            .and_then(|o| o.get("ConfigPath"))
            .and_then(|p| p.as_str())
            .unwrap_or_default();
        paths.insert(name.clone(), cp.to_string());
    }
    Ok((types, paths))
}

/// Polls `Status` until `accept` says yes or the deadline passes. containerd needs a moment
/// after a restart before its socket answers, so errors are retried until then.
pub fn wait_for(
    socket: &Path,
    within: Duration,
    mut accept: impl FnMut(&CriStatus) -> Result<(), String>,
) -> Result<CriStatus, CriError> {
    let start = Instant::now();
    let mut last;
    loop {
        match status(socket, Duration::from_secs(5)) {
            Ok(s) => match accept(&s) {
                Ok(()) => return Ok(s),
                Err(why) => last = why,
            },
            Err(e) => last = e.to_string(),
        }
        if start.elapsed() >= within {
            return Err(CriError::Timeout {
                socket: socket.to_path_buf(),
                waited: start.elapsed(),
                last,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtimes_are_read_from_the_containerd_1_x_layout() {
        let json = r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{
            "runc":{"runtimeType":"io.containerd.runc.v2","options":{"SystemdCgroup":false}},
            "gvisor-hardened":{"runtimeType":"io.containerd.gvisor-hardened.v1",
                               "options":{"ConfigPath":"/etc/gvisor-hardened/policy.toml","TypeUrl":"x"}}}}}"#;
        let (types, paths) = parse_runtimes(json).unwrap();
        assert_eq!(types["gvisor-hardened"], "io.containerd.gvisor-hardened.v1");
        assert_eq!(paths["gvisor-hardened"], "/etc/gvisor-hardened/policy.toml");
        assert_eq!(paths["runc"], "");
    }

    #[test]
    fn config_without_runtimes_is_an_error() {
        assert!(parse_runtimes(r#"{"containerd":{}}"#).is_err());
        assert!(parse_runtimes("not json").is_err());
    }

    #[test]
    fn unreachable_socket_times_out_with_the_last_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = wait_for(&dir.path().join("none.sock"), Duration::ZERO, |_| Ok(())).unwrap_err();
        assert!(matches!(err, CriError::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("none.sock"), "{err}");
    }
}
