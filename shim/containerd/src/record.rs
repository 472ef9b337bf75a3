//! containerd's own record of a container: what `ctr containers info`, `nerdctl inspect` and
//! `crictl inspect` show. Those read containerd's copy of the spec and labels, never the hardened
//! spec in the bundle, so after a Create the shim writes the one-line summary of what the
//! hardening changed there too: the label `gvisor-hardened.dev/decisions` and the same
//! annotation in the stored spec (the spec as the client wrote it, plus that one annotation; a
//! later task from it is hardened again and the annotation replaced).
//!
//! The call is containerd's `Containers.Update` over its gRPC socket (the shim's `-address`):
//! one unary request on HTTP/2, encoded here by hand since it needs four protobuf messages.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;

use policy_injector::annotations::DECISIONS;

/// How long the update may take before the shim gives up on it (it never holds up a task).
const UPDATE_DEADLINE: Duration = Duration::from_secs(10);
/// The type URL containerd stores an OCI spec under.
const SPEC_TYPE_URL: &str = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const UPDATE_PATH: &str = "/containerd.services.containers.v1.Containers/Update";

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("connecting to containerd at {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("HTTP/2 with containerd: {0}")]
    Http2(#[from] h2::Error),
    #[error("the request to containerd: {0}")]
    Request(#[from] http::Error),
    #[error("containerd answered HTTP {0}")]
    Http(u16),
    #[error("containerd refused the update: gRPC status {code}: {message}")]
    Status { code: u32, message: String },
    #[error("the container's spec is not JSON: {0}")]
    Spec(serde_json::Error),
    #[error("containerd did not answer within {0:?}")]
    Timeout(Duration),
}

/// Where the shim writes what containerd's clients show of a container.
#[async_trait]
pub trait ContainerRecords: Send + Sync {
    /// Puts `summary` in container `id`'s labels and, on `original_spec` (the spec containerd
    /// gave the bundle), in its stored spec's annotations.
    async fn note_decisions(
        &self,
        id: &str,
        summary: &str,
        original_spec: &[u8],
    ) -> Result<(), RecordError>;
}

/// containerd's gRPC API on its socket, for one namespace.
pub struct Containerd {
    pub socket: PathBuf,
    pub namespace: String,
}

#[async_trait]
impl ContainerRecords for Containerd {
    async fn note_decisions(
        &self,
        id: &str,
        summary: &str,
        original_spec: &[u8],
    ) -> Result<(), RecordError> {
        let request = update_request(id, summary, original_spec)?;
        tokio::time::timeout(UPDATE_DEADLINE, self.unary(UPDATE_PATH, request))
            .await
            .map_err(|_| RecordError::Timeout(UPDATE_DEADLINE))?
    }
}

impl Containerd {
    /// One gRPC call: a length-prefixed message out, the status back (the answer's message
    /// itself is not needed).
    async fn unary(&self, path: &str, message: Vec<u8>) -> Result<(), RecordError> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|source| RecordError::Connect {
                path: self.socket.clone(),
                source,
            })?;
        let (client, connection) = h2::client::handshake(stream).await?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        let result = async {
            let mut client = client.ready().await?;
            let request = http::Request::builder()
                .method("POST")
                .uri(format!("http://localhost{path}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header("containerd-namespace", &self.namespace)
                .body(())?;
            let (response, mut send) = client.send_request(request, false)?;
            let mut framed = Vec::with_capacity(message.len() + 5);
            framed.push(0);
            framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
            framed.extend_from_slice(&message);
            send.send_data(Bytes::from(framed), true)?;
            let response = response.await?;
            if response.status() != http::StatusCode::OK {
                return Err(RecordError::Http(response.status().as_u16()));
            }
            // A refusal may come as headers alone ("trailers-only").
            if let Some(status) = grpc_status(response.headers()) {
                return status;
            }
            let mut body = response.into_body();
            while let Some(chunk) = body.data().await {
                let chunk = chunk?;
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            match body.trailers().await? {
                Some(trailers) => grpc_status(&trailers).unwrap_or(Ok(())),
                None => Ok(()),
            }
        }
        .await;
        driver.abort();
        result
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<Result<(), RecordError>> {
    let code: u32 = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    if code == 0 {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .unwrap_or_default()
        .to_string();
    Some(Err(RecordError::Status { code, message }))
}

/// `UpdateContainerRequest { container: { id, labels: {DECISIONS: summary}, spec: Any },
/// update_mask: { paths: ["labels.DECISIONS", "spec"] } }`.
fn update_request(id: &str, summary: &str, original_spec: &[u8]) -> Result<Vec<u8>, RecordError> {
    let mut spec: Value = serde_json::from_slice(original_spec).map_err(RecordError::Spec)?;
    if let Some(object) = spec.as_object_mut() {
        let annotations = object
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(DECISIONS.to_string(), Value::String(summary.to_string()));
        }
    }
    let spec = serde_json::to_vec(&spec).map_err(RecordError::Spec)?;

    let mut label = Vec::new();
    proto::bytes_field(&mut label, 1, DECISIONS.as_bytes());
    proto::bytes_field(&mut label, 2, summary.as_bytes());
    let mut any = Vec::new();
    proto::bytes_field(&mut any, 1, SPEC_TYPE_URL.as_bytes());
    proto::bytes_field(&mut any, 2, &spec);
    let mut container = Vec::new();
    proto::bytes_field(&mut container, 1, id.as_bytes());
    proto::bytes_field(&mut container, 2, &label);
    proto::bytes_field(&mut container, 5, &any);
    let mut mask = Vec::new();
    proto::bytes_field(&mut mask, 1, format!("labels.{DECISIONS}").as_bytes());
    proto::bytes_field(&mut mask, 1, b"spec");
    let mut request = Vec::new();
    proto::bytes_field(&mut request, 1, &container);
    proto::bytes_field(&mut request, 2, &mask);
    Ok(request)
}

/// The two pieces of the protobuf wire format the request needs.
mod proto {
    pub fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    /// A length-delimited field (strings, bytes, messages, map entries).
    pub fn bytes_field(out: &mut Vec<u8>, number: u32, bytes: &[u8]) {
        varint(out, (u64::from(number) << 3) | 2);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }

    /// Reads the length-delimited fields of `buf` as (number, bytes), for the tests.
    #[cfg(test)]
    pub fn fields(mut buf: &[u8]) -> Vec<(u32, Vec<u8>)> {
        fn read_varint(buf: &mut &[u8]) -> u64 {
            let mut v = 0u64;
            for shift in (0..64).step_by(7) {
                let b = buf[0];
                *buf = &buf[1..];
                v |= u64::from(b & 0x7f) << shift;
                if b < 0x80 {
                    break;
                }
            }
            v
        }
        let mut out = Vec::new();
        while !buf.is_empty() {
            let key = read_varint(&mut buf);
            assert_eq!(key & 7, 2, "only length-delimited fields here");
            let len = read_varint(&mut buf) as usize;
            out.push(((key >> 3) as u32, buf[..len].to_vec()));
            buf = &buf[len..];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_varint_takes_seven_bits_a_byte() {
        let mut out = Vec::new();
        proto::varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
    }

    #[test]
    fn the_update_names_the_label_and_the_spec_with_the_summary_in_both() {
        let original = br#"{"ociVersion":"1.0.2","process":{"args":["sh"]},"annotations":{"a":"b","gvisor-hardened.dev/decisions":"forged"}}"#;
        let request =
            update_request("c1", "gvisor-hardened changed user: set 1", original).unwrap();
        let top = proto::fields(&request);
        assert_eq!(top.iter().map(|f| f.0).collect::<Vec<_>>(), [1, 2]);
        let container = proto::fields(&top[0].1);
        assert_eq!(container[0], (1, b"c1".to_vec()));
        let label = proto::fields(&container[1].1);
        assert_eq!(label[0].1, DECISIONS.as_bytes());
        assert_eq!(label[1].1, b"gvisor-hardened changed user: set 1");
        assert_eq!(container[2].0, 5);
        let any = proto::fields(&container[2].1);
        assert_eq!(any[0].1, SPEC_TYPE_URL.as_bytes());
        let spec: Value = serde_json::from_slice(&any[1].1).unwrap();
        assert_eq!(
            spec["process"]["args"][0], "sh",
            "the client's spec otherwise"
        );
        assert_eq!(spec["annotations"]["a"], "b");
        assert_eq!(
            spec["annotations"][DECISIONS],
            "gvisor-hardened changed user: set 1"
        );
        let mask: Vec<Vec<u8>> = proto::fields(&top[1].1).into_iter().map(|f| f.1).collect();
        assert_eq!(
            mask,
            [format!("labels.{DECISIONS}").into_bytes(), b"spec".to_vec()]
        );
    }

    #[test]
    fn a_spec_that_is_no_json_is_not_sent() {
        assert!(matches!(
            update_request("c1", "s", b"{not json"),
            Err(RecordError::Spec(_))
        ));
    }

    #[tokio::test]
    async fn no_containerd_at_the_address_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let records = Containerd {
            socket: dir.path().join("containerd.sock"),
            namespace: "default".into(),
        };
        let err = records.note_decisions("c1", "s", b"{}").await.unwrap_err();
        assert!(matches!(err, RecordError::Connect { .. }), "{err}");
    }
}
