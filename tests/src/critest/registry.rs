//! A read-only OCI distribution registry on 127.0.0.1, for the CRI validation suite's image
//! pulls: no registry is reachable from these machines, so the suite's images are stand-ins
//! the harness builds (`images.rs`) and serves from memory. Just enough of the distribution
//! API for containerd's resolver and fetcher: `GET /v2/`, `GET|HEAD` of a manifest by tag or
//! digest, `GET|HEAD` of a blob by digest. One thread, one request per connection.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

/// Blobs and manifests by digest, and `(repository, tag)` -> manifest digest.
#[derive(Default)]
struct Store {
    blobs: HashMap<String, (Vec<u8>, String)>,
    tags: HashMap<(String, String), String>,
}

pub struct Registry {
    addr: String,
    store: Arc<Mutex<Store>>,
}

impl Registry {
    /// Listens on a free loopback port and serves until the process ends.
    pub fn start() -> std::io::Result<Registry> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let store: Arc<Mutex<Store>> = Arc::default();
        let serving = store.clone();
        thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let store = serving.clone();
                thread::spawn(move || {
                    let _ = serve(conn, &store);
                });
            }
        });
        Ok(Registry { addr, store })
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Adds a blob (a layer, a config, a manifest) under its sha256 digest; returns the digest.
    pub fn put_blob(&self, bytes: Vec<u8>, media_type: &str) -> String {
        let digest = format!("sha256:{}", crate::image::oci::sha256_hex(&bytes));
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .blobs
            .insert(digest.clone(), (bytes, media_type.to_string()));
        digest
    }

    /// Names the manifest `digest` `repository:tag`.
    pub fn tag(&self, repository: &str, tag: &str, digest: &str) {
        self.store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tags
            .insert(
                (repository.to_string(), tag.to_string()),
                digest.to_string(),
            );
    }
}

fn serve(conn: TcpStream, store: &Mutex<Store>) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    // The headers are not needed: read them off so the client sees its request taken.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut parts = request.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let found = lookup(store, path);
    let mut out = conn;
    match found {
        Some((body, media_type, digest)) => {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: {media_type}\r\nContent-Length: {}\r\nDocker-Content-Digest: {digest}\r\nDocker-Distribution-API-Version: registry/2.0\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            if method != "HEAD" {
                out.write_all(&body)?;
            }
        }
        None => {
            let body =
                br#"{"errors":[{"code":"MANIFEST_UNKNOWN","message":"not in the test registry"}]}"#;
            write!(
                out,
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nDocker-Distribution-API-Version: registry/2.0\r\nConnection: close\r\n\r\n",
                body.len()
            )?;
            if method != "HEAD" {
                out.write_all(body)?;
            }
        }
    }
    out.flush()
}

/// What `path` names: its bytes, media type and digest.
fn lookup(store: &Mutex<Store>, path: &str) -> Option<(Vec<u8>, String, String)> {
    let path = path.split('?').next().unwrap_or(path);
    if path == "/v2/" || path == "/v2" {
        return Some((b"{}".to_vec(), "application/json".into(), String::new()));
    }
    let rest = path.strip_prefix("/v2/")?;
    let store = store.lock().unwrap_or_else(|e| e.into_inner());
    let (repo, reference, manifest) = if let Some((repo, r)) = rest.rsplit_once("/manifests/") {
        (repo, r, true)
    } else {
        let (repo, r) = rest.rsplit_once("/blobs/")?;
        (repo, r, false)
    };
    let digest = if reference.starts_with("sha256:") {
        reference.to_string()
    } else if manifest {
        store
            .tags
            .get(&(repo.to_string(), reference.to_string()))?
            .clone()
    } else {
        return None;
    };
    let (bytes, media_type) = store.blobs.get(&digest)?;
    Some((bytes.clone(), media_type.clone(), digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn get(addr: &str, method: &str, path: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        write!(c, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn a_manifest_is_served_by_tag_and_by_digest_and_anything_else_is_not_found() {
        let r = Registry::start().unwrap();
        let digest = r.put_blob(
            b"{\"m\":1}".to_vec(),
            "application/vnd.oci.image.manifest.v1+json",
        );
        r.tag("e2e-test-images/busybox", "1.29-2", &digest);
        let by_tag = get(
            r.addr(),
            "GET",
            "/v2/e2e-test-images/busybox/manifests/1.29-2",
        );
        assert!(by_tag.starts_with("HTTP/1.1 200"), "{by_tag}");
        assert!(
            by_tag.contains(&format!("Docker-Content-Digest: {digest}")),
            "{by_tag}"
        );
        assert!(by_tag.ends_with("{\"m\":1}"), "{by_tag}");
        let head = get(
            r.addr(),
            "HEAD",
            &format!("/v2/e2e-test-images/busybox/manifests/{digest}"),
        );
        assert!(
            head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        assert!(get(r.addr(), "GET", "/v2/").starts_with("HTTP/1.1 200"));
        for missing in [
            "/v2/e2e-test-images/busybox/manifests/latest",
            "/v2/other/blobs/sha256:00",
            "/healthz",
        ] {
            assert!(
                get(r.addr(), "GET", missing).starts_with("HTTP/1.1 404"),
                "{missing}"
            );
        }
    }
}
