//! A blocking CRI client: the kubelet's side of the conversation, over containerd's unix socket.
//!
//! Tests are synchronous, so each client owns a single-threaded tokio runtime and blocks on one
//! call at a time. Every call has a deadline; an error names the call and carries the gRPC
//! status, whose message is what `kubectl describe pod` would show for a failed pod.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerStats, ContainerStatsRequest, ContainerStatus,
    ContainerStatusRequest, CreateContainerRequest, ExecSyncRequest, Image, ImageSpec,
    ImageStatusRequest, ListContainersRequest, ListImagesRequest, ListPodSandboxRequest,
    PodSandbox, PodSandboxConfig, PodSandboxStats, PodSandboxStatsRequest, PodSandboxStatus,
    PodSandboxStatusRequest, RemoveContainerRequest, RemovePodSandboxRequest, RunPodSandboxRequest,
    StartContainerRequest, StatusRequest, StatusResponse, StopContainerRequest,
    StopPodSandboxRequest, VersionRequest, VersionResponse,
};
use tonic::transport::{Channel, Endpoint, Uri};

/// Default deadline of one CRI call. Generous: the machine is shared and a pod start through
/// runsc takes a few hundred ms when idle, seconds under load.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A failed CRI call.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("connecting to the CRI socket {socket}: {reason}")]
    Connect { socket: PathBuf, reason: String },

    #[error("CRI {call}: {code:?}: {message}")]
    Rpc {
        call: &'static str,
        code: tonic::Code,
        message: String,
    },

    #[error("CRI {call} did not answer within {timeout:?}")]
    Timeout {
        call: &'static str,
        timeout: Duration,
    },

    #[error("starting the CRI client's tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),

    /// The runtime answered, but not with what the protocol promises (a missing field).
    #[error("CRI {call}: unexpected answer: {reason}")]
    Answer { call: &'static str, reason: String },
}

impl CriError {
    /// The gRPC code of a failed call (`None` for transport problems and timeouts).
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The runtime's error message (what the kubelet records as the pod's event).
    pub fn message(&self) -> String {
        match self {
            CriError::Rpc { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }
}

/// What `ExecSync` returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }
}

impl std::fmt::Display for ExecOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\nstdout: {}\nstderr: {}",
            self.exit_code, self.stdout, self.stderr
        )
    }
}

/// A connected CRI client (runtime and image services on one channel).
pub struct CriClient {
    socket: PathBuf,
    rt: tokio::runtime::Runtime,
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
    timeout: Duration,
}

impl std::fmt::Debug for CriClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriClient")
            .field("socket", &self.socket)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Runs one RPC with the client's deadline, mapping failures to [`CriError`].
macro_rules! call {
    ($self:ident, $svc:ident, $name:literal, $method:ident, $req:expr) => {{
        let timeout = $self.timeout;
        let mut svc = $self.$svc.clone();
        let req = $req;
        $self.rt.block_on(async move {
            match tokio::time::timeout(timeout, svc.$method(req)).await {
                Err(_) => Err(CriError::Timeout {
                    call: $name,
                    timeout,
                }),
                Ok(Err(status)) => Err(CriError::Rpc {
                    call: $name,
                    code: status.code(),
                    message: status.message().to_string(),
                }),
                Ok(Ok(resp)) => Ok(resp.into_inner()),
            }
        })
    }};
}

impl CriClient {
    /// Connects to the CRI server on `socket` (containerd's grpc socket).
    pub fn connect(socket: &Path) -> Result<CriClient, CriError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CriError::Runtime)?;
        let path = socket.to_path_buf();
        let connect_err = |reason: String| CriError::Connect {
            socket: socket.to_path_buf(),
            reason,
        };
        // tonic wants a URI; the connector ignores it and always dials the unix socket.
        let endpoint = Endpoint::try_from("http://[::]:50051")
            .map_err(|e| connect_err(e.to_string()))?
            .connect_timeout(Duration::from_secs(10));
        let channel = rt
            .block_on(
                endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(TokioIo::new(stream))
                    }
                })),
            )
            .map_err(|e| connect_err(format!("{e}: {:?}", std::error::Error::source(&e))))?;
        Ok(CriClient {
            socket: socket.to_path_buf(),
            rt,
            runtime: RuntimeServiceClient::new(channel.clone()),
            images: ImageServiceClient::new(channel),
            timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// Changes the deadline of every later call.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn version(&self) -> Result<VersionResponse, CriError> {
        call!(
            self,
            runtime,
            "Version",
            version,
            VersionRequest {
                version: "v1".into()
            }
        )
    }

    /// `Status`; with `verbose`, `info["config"]` holds the CRI plugin's effective config.
    pub fn status(&self, verbose: bool) -> Result<StatusResponse, CriError> {
        call!(self, runtime, "Status", status, StatusRequest { verbose })
    }

    /// Whether `Status` reports the named condition (`RuntimeReady`, `NetworkReady`) true.
    pub fn condition(&self, name: &str) -> Result<bool, CriError> {
        let s = self.status(false)?;
        Ok(s.status
            .map(|s| s.conditions.iter().any(|c| c.r#type == name && c.status))
            .unwrap_or(false))
    }

    /// `RunPodSandbox`; returns the sandbox id. `handler` is the RuntimeClass handler (`""`
    /// selects containerd's default runtime).
    pub fn run_pod_sandbox(
        &self,
        config: &PodSandboxConfig,
        handler: &str,
    ) -> Result<String, CriError> {
        let resp = call!(
            self,
            runtime,
            "RunPodSandbox",
            run_pod_sandbox,
            RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: handler.to_string(),
            }
        )?;
        Ok(resp.pod_sandbox_id)
    }

    pub fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        call!(
            self,
            runtime,
            "StopPodSandbox",
            stop_pod_sandbox,
            StopPodSandboxRequest {
                pod_sandbox_id: id.to_string()
            }
        )
        .map(drop)
    }

    pub fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        call!(
            self,
            runtime,
            "RemovePodSandbox",
            remove_pod_sandbox,
            RemovePodSandboxRequest {
                pod_sandbox_id: id.to_string()
            }
        )
        .map(drop)
    }

    /// `PodSandboxStatus`: the status and, with `verbose`, containerd's `info` map (whose
    /// `info` entry is JSON with the sandbox's pid, runtime spec and netns path).
    pub fn pod_sandbox_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<(PodSandboxStatus, HashMap<String, String>), CriError> {
        let resp = call!(
            self,
            runtime,
            "PodSandboxStatus",
            pod_sandbox_status,
            PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose,
            }
        )?;
        let status = resp.status.ok_or_else(|| CriError::Answer {
            call: "PodSandboxStatus",
            reason: "no status".into(),
        })?;
        Ok((status, resp.info))
    }

    pub fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, CriError> {
        Ok(call!(
            self,
            runtime,
            "ListPodSandbox",
            list_pod_sandbox,
            ListPodSandboxRequest { filter: None }
        )?
        .items)
    }

    /// `CreateContainer` in pod `pod_id` (whose config is passed again, as the kubelet does).
    pub fn create_container(
        &self,
        pod_id: &str,
        config: &ContainerConfig,
        sandbox_config: &PodSandboxConfig,
    ) -> Result<String, CriError> {
        let resp = call!(
            self,
            runtime,
            "CreateContainer",
            create_container,
            CreateContainerRequest {
                pod_sandbox_id: pod_id.to_string(),
                config: Some(config.clone()),
                sandbox_config: Some(sandbox_config.clone()),
            }
        )?;
        Ok(resp.container_id)
    }

    pub fn start_container(&self, id: &str) -> Result<(), CriError> {
        call!(
            self,
            runtime,
            "StartContainer",
            start_container,
            StartContainerRequest {
                container_id: id.to_string()
            }
        )
        .map(drop)
    }

    /// `StopContainer` with a grace period of `timeout_secs` before SIGKILL.
    pub fn stop_container(&self, id: &str, timeout_secs: i64) -> Result<(), CriError> {
        call!(
            self,
            runtime,
            "StopContainer",
            stop_container,
            StopContainerRequest {
                container_id: id.to_string(),
                timeout: timeout_secs,
            }
        )
        .map(drop)
    }

    pub fn remove_container(&self, id: &str) -> Result<(), CriError> {
        call!(
            self,
            runtime,
            "RemoveContainer",
            remove_container,
            RemoveContainerRequest {
                container_id: id.to_string()
            }
        )
        .map(drop)
    }

    /// Containers of every pod (or of `pod_id`).
    pub fn list_containers(
        &self,
        pod_id: Option<&str>,
    ) -> Result<Vec<k8s_cri::v1::Container>, CriError> {
        let filter = pod_id.map(|p| k8s_cri::v1::ContainerFilter {
            pod_sandbox_id: p.to_string(),
            ..Default::default()
        });
        Ok(call!(
            self,
            runtime,
            "ListContainers",
            list_containers,
            ListContainersRequest { filter }
        )?
        .containers)
    }

    pub fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<(ContainerStatus, HashMap<String, String>), CriError> {
        let resp = call!(
            self,
            runtime,
            "ContainerStatus",
            container_status,
            ContainerStatusRequest {
                container_id: id.to_string(),
                verbose,
            }
        )?;
        let status = resp.status.ok_or_else(|| CriError::Answer {
            call: "ContainerStatus",
            reason: "no status".into(),
        })?;
        Ok((status, resp.info))
    }

    /// `ExecSync` (what `kubectl exec` without a tty amounts to), with the runtime-side
    /// timeout `timeout_secs` (0: none; the client deadline still applies).
    pub fn exec_sync<S: AsRef<str>>(
        &self,
        id: &str,
        cmd: &[S],
        timeout_secs: i64,
    ) -> Result<ExecOutput, CriError> {
        let resp = call!(
            self,
            runtime,
            "ExecSync",
            exec_sync,
            ExecSyncRequest {
                container_id: id.to_string(),
                cmd: cmd.iter().map(|s| s.as_ref().to_string()).collect(),
                timeout: timeout_secs,
            }
        )?;
        Ok(ExecOutput {
            exit_code: resp.exit_code,
            stdout: String::from_utf8_lossy(&resp.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&resp.stderr).into_owned(),
        })
    }

    pub fn container_stats(&self, id: &str) -> Result<ContainerStats, CriError> {
        call!(
            self,
            runtime,
            "ContainerStats",
            container_stats,
            ContainerStatsRequest {
                container_id: id.to_string()
            }
        )?
        .stats
        .ok_or_else(|| CriError::Answer {
            call: "ContainerStats",
            reason: "no stats".into(),
        })
    }

    pub fn pod_sandbox_stats(&self, id: &str) -> Result<PodSandboxStats, CriError> {
        call!(
            self,
            runtime,
            "PodSandboxStats",
            pod_sandbox_stats,
            PodSandboxStatsRequest {
                pod_sandbox_id: id.to_string()
            }
        )?
        .stats
        .ok_or_else(|| CriError::Answer {
            call: "PodSandboxStats",
            reason: "no stats".into(),
        })
    }

    pub fn list_images(&self) -> Result<Vec<Image>, CriError> {
        Ok(call!(
            self,
            images,
            "ListImages",
            list_images,
            ListImagesRequest { filter: None }
        )?
        .images)
    }

    /// The image CRI resolves `reference` to, if it has it.
    pub fn image_status(&self, reference: &str) -> Result<Option<Image>, CriError> {
        Ok(call!(
            self,
            images,
            "ImageStatus",
            image_status,
            ImageStatusRequest {
                image: Some(ImageSpec {
                    image: reference.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            }
        )?
        .image)
    }
}
