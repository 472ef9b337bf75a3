//! A minimal, deterministic OCI image-layout archive writer: one uncompressed layer, a config,
//! a manifest, `index.json` and `oci-layout`, all in one tar that `ctr images import` reads.
//!
//! Determinism (same inputs, same bytes, same digests) comes from sorted entries, fixed
//! owner/mtime and serde_json's sorted object keys.

use serde_json::json;
use sha2::{Digest, Sha256};

pub(crate) const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
pub(crate) const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
pub(crate) const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// Fixed modification time of every entry (the epoch): timestamps must not change digests.
const MTIME: u64 = 0;

/// What a layer entry is.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(String),
    /// A hard link to the entry at that path (which must come first in path order).
    Hardlink(String),
}

/// One entry of the layer, owned by root.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    /// Relative path without a leading slash, e.g. `bin/sh`.
    pub path: String,
    pub mode: u32,
    pub kind: Kind,
    /// Extended attributes (PAX `SCHILY.xattr.*` records), e.g. `security.capability`.
    pub xattrs: Vec<(String, Vec<u8>)>,
}

impl Entry {
    pub fn dir(path: &str, mode: u32) -> Self {
        Entry::new(path, mode, Kind::Dir)
    }

    pub fn file(path: &str, mode: u32, data: impl Into<Vec<u8>>) -> Self {
        Entry::new(path, mode, Kind::File(data.into()))
    }

    pub fn symlink(path: &str, target: &str) -> Self {
        Entry::new(path, 0o777, Kind::Symlink(target.to_string()))
    }

    pub fn hardlink(path: &str, target: &str) -> Self {
        Entry::new(path, 0o755, Kind::Hardlink(target.to_string()))
    }

    pub fn with_xattr(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.xattrs.push((name.to_string(), value.into()));
        self
    }

    fn new(path: &str, mode: u32, kind: Kind) -> Self {
        Entry {
            path: path.to_string(),
            mode,
            kind,
            xattrs: Vec::new(),
        }
    }
}

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    format!("{:x}", Sha256::digest(data))
}

fn header(path: &str, mode: u32, entry_type: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(entry_type);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(MTIME);
    h.set_size(size);
    // set_path cannot fail for our short relative ASCII paths; a failure is a harness bug.
    h.set_path(path)
        .unwrap_or_else(|e| panic!("tar path {path:?}: {e}"));
    h
}

/// A tar of `entries`, sorted by path so the bytes do not depend on the caller's order (hard
/// links after everything else: their targets must come first).
pub(crate) fn tar_of(entries: &[Entry]) -> std::io::Result<Vec<u8>> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| {
        let link = |e: &Entry| matches!(e.kind, Kind::Hardlink(_));
        (link(a), &a.path).cmp(&(link(b), &b.path))
    });
    let mut builder = tar::Builder::new(Vec::new());
    for e in sorted {
        if !e.xattrs.is_empty() {
            let records: Vec<(String, &[u8])> = e
                .xattrs
                .iter()
                .map(|(k, v)| (format!("SCHILY.xattr.{k}"), v.as_slice()))
                .collect();
            builder.append_pax_extensions(records.iter().map(|(k, v)| (k.as_str(), *v)))?;
        }
        match &e.kind {
            Kind::Dir => {
                let mut h = header(
                    &format!("{}/", e.path),
                    e.mode,
                    tar::EntryType::Directory,
                    0,
                );
                h.set_cksum();
                builder.append(&h, std::io::empty())?;
            }
            Kind::File(data) => {
                let mut h = header(&e.path, e.mode, tar::EntryType::Regular, data.len() as u64);
                h.set_cksum();
                builder.append(&h, data.as_slice())?;
            }
            Kind::Symlink(target) => {
                let mut h = header(&e.path, e.mode, tar::EntryType::Symlink, 0);
                h.set_link_name(target)?;
                h.set_cksum();
                builder.append(&h, std::io::empty())?;
            }
            Kind::Hardlink(target) => {
                let mut h = header(&e.path, e.mode, tar::EntryType::Link, 0);
                h.set_link_name(target)?;
                h.set_cksum();
                builder.append(&h, std::io::empty())?;
            }
        }
    }
    builder.into_inner()
}

/// The image's runtime defaults (OCI image config `config` object).
#[derive(Debug, Clone)]
pub(crate) struct ImageConfig {
    pub env: Vec<String>,
    pub cmd: Vec<String>,
    pub working_dir: String,
}

/// An OCI layout archive and the digests that identify it.
#[derive(Debug, Clone)]
pub(crate) struct Archive {
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of the manifest: the image's identity.
    pub manifest_digest: String,
}

/// Go architecture name of the machine we run on (what containerd matches platforms with).
pub(crate) fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Builds the OCI layout archive of a single-layer image named `reference`.
pub(crate) fn archive(
    layer: &[u8],
    config: &ImageConfig,
    reference: &str,
) -> std::io::Result<Archive> {
    let layer_digest = format!("sha256:{}", sha256_hex(layer));
    let config_json = serde_json::to_vec(&json!({
        "architecture": oci_architecture(),
        "os": "linux",
        "config": {
            "Env": config.env,
            "Cmd": config.cmd,
            "WorkingDir": config.working_dir,
        },
        // Uncompressed layer: its diff id is its digest.
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    }))?;
    let config_digest = format!("sha256:{}", sha256_hex(&config_json));
    let manifest_json = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": CONFIG_MEDIA_TYPE,
            "digest": config_digest,
            "size": config_json.len(),
        },
        "layers": [{
            "mediaType": LAYER_MEDIA_TYPE,
            "digest": layer_digest,
            "size": layer.len(),
        }],
    }))?;
    let manifest_digest = format!("sha256:{}", sha256_hex(&manifest_json));
    let tag = reference.rsplit_once(':').map_or("latest", |(_, t)| t);
    let index_json = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX_MEDIA_TYPE,
        "manifests": [{
            "mediaType": MANIFEST_MEDIA_TYPE,
            "digest": manifest_digest,
            "size": manifest_json.len(),
            "platform": { "architecture": oci_architecture(), "os": "linux" },
            "annotations": {
                // containerd names the imported image after this one...
                "io.containerd.image.name": reference,
                // ...and other OCI tools after this one.
                "org.opencontainers.image.ref.name": tag,
            },
        }],
    }))?;

    let blob = |digest: &str, data: &[u8]| {
        let hex = digest.trim_start_matches("sha256:");
        Entry::file(&format!("blobs/sha256/{hex}"), 0o644, data.to_vec())
    };
    let entries = vec![
        Entry::file(
            "oci-layout",
            0o644,
            br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        ),
        Entry::file("index.json", 0o644, index_json),
        Entry::dir("blobs", 0o755),
        Entry::dir("blobs/sha256", 0o755),
        blob(&layer_digest, layer),
        blob(&config_digest, &config_json),
        blob(&manifest_digest, &manifest_json),
    ];
    Ok(Archive {
        bytes: tar_of(&entries)?,
        manifest_digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Entry> {
        vec![
            Entry::file("bin/busybox", 0o755, b"binary".to_vec()),
            Entry::dir("bin", 0o755),
            Entry::symlink("bin/sh", "busybox"),
            Entry::file("bin/caps", 0o755, b"x".to_vec())
                .with_xattr("security.capability", vec![1, 2, 3]),
        ]
    }

    fn config() -> ImageConfig {
        ImageConfig {
            env: vec!["PATH=/bin".into()],
            cmd: vec!["/bin/sh".into()],
            working_dir: "/".into(),
        }
    }

    #[test]
    fn the_same_entries_in_any_order_give_the_same_digest() {
        let a = archive(&tar_of(&sample()).unwrap(), &config(), "localhost/x:latest").unwrap();
        let mut reversed = sample();
        reversed.reverse();
        let b = archive(&tar_of(&reversed).unwrap(), &config(), "localhost/x:latest").unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest);
        assert_eq!(a.bytes, b.bytes);
    }

    #[test]
    fn different_content_gives_a_different_digest() {
        let a = archive(&tar_of(&sample()).unwrap(), &config(), "localhost/x:latest").unwrap();
        let mut other = sample();
        other.push(Entry::dir("tmp", 0o1777));
        let b = archive(&tar_of(&other).unwrap(), &config(), "localhost/x:latest").unwrap();
        assert_ne!(a.manifest_digest, b.manifest_digest);
    }

    #[test]
    fn layer_entries_keep_modes_links_and_xattrs() {
        let layer = tar_of(&sample()).unwrap();
        let mut ar = tar::Archive::new(layer.as_slice());
        let mut seen = Vec::new();
        for entry in ar.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mode = entry.header().mode().unwrap();
            let link = entry
                .link_name()
                .unwrap()
                .map(|l| l.to_string_lossy().into_owned());
            let xattrs: Vec<String> = entry
                .pax_extensions()
                .unwrap()
                .map(|exts| {
                    exts.map(|ext| ext.unwrap().key().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default();
            seen.push((path, mode, link, xattrs));
        }
        assert_eq!(seen[0].0, "bin/");
        assert_eq!(seen[1].0, "bin/busybox");
        assert_eq!(
            seen[2],
            (
                "bin/caps".into(),
                0o755,
                None,
                vec!["SCHILY.xattr.security.capability".into()]
            )
        );
        assert_eq!(seen[3].2.as_deref(), Some("busybox"));
    }

    #[test]
    fn index_names_the_image_and_points_at_the_manifest() {
        let a = archive(&tar_of(&sample()).unwrap(), &config(), "localhost/x:v1").unwrap();
        let mut ar = tar::Archive::new(a.bytes.as_slice());
        let mut index = None;
        for entry in ar.entries().unwrap() {
            let mut entry = entry.unwrap();
            if entry.path().unwrap().to_str() == Some("index.json") {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut entry, &mut s).unwrap();
                index = Some(serde_json::from_str::<serde_json::Value>(&s).unwrap());
            }
        }
        let index = index.expect("index.json in the archive");
        let m = &index["manifests"][0];
        assert_eq!(m["digest"], a.manifest_digest.as_str());
        assert_eq!(
            m["annotations"]["io.containerd.image.name"],
            "localhost/x:v1"
        );
        assert_eq!(m["annotations"]["org.opencontainers.image.ref.name"], "v1");
    }
}
