//! The local test image: busybox-static, its applets, /etc/passwd and /etc/group, an empty
//! /tmp and the sandbox probe, as an OCI layout archive built here (no registry).

mod git;
pub(crate) mod oci;

pub use git::{git_rootfs_tar, GIT_IMAGE_REF};

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::probe::{PROBE_FCAPS_IN_IMAGE, PROBE_IN_IMAGE, PROBE_PATH, PROBE_SUID_IN_IMAGE};
use oci::{Entry, ImageConfig};

/// Name under which the image is imported.
pub const TEST_IMAGE_REF: &str = "localhost/gvh-test:latest";

/// Debian's busybox-static.
const BUSYBOX: &str = "/usr/bin/busybox";

/// Applets linked into /bin. Each must exist in the installed busybox (checked at build time).
pub const APPLETS: &[&str] = &[
    "[",
    "awk",
    "base64",
    "basename",
    "cat",
    "chmod",
    "chown",
    "chroot",
    "cp",
    "cut",
    "date",
    "dd",
    "df",
    "dirname",
    "dmesg",
    "du",
    "echo",
    "env",
    "false",
    "find",
    "free",
    "grep",
    "head",
    "hexdump",
    "hostname",
    "id",
    "ifconfig",
    "ip",
    "kill",
    "ln",
    "ls",
    "mkdir",
    "mkfifo",
    "mknod",
    "mount",
    "mv",
    "nc",
    "netstat",
    "nproc",
    "nslookup",
    "od",
    "ping",
    "printf",
    "ps",
    "pwd",
    "readlink",
    "realpath",
    "rm",
    "rmdir",
    "sed",
    "seq",
    "setpriv",
    "sh",
    "sha256sum",
    "sleep",
    "sort",
    "stat",
    "su",
    "sync",
    "tail",
    // kubectl cp runs tar in the container.
    "tar",
    "tee",
    "test",
    "timeout",
    "top",
    "touch",
    "tr",
    "true",
    "umount",
    "uname",
    "uniq",
    "unshare",
    "usleep",
    "wc",
    "wget",
    "which",
    "whoami",
    "xargs",
    "yes",
];

/// Bumped whenever the layout of the image changes in a way the inputs do not show.
const FORMAT_VERSION: u32 = 2;

/// A built test image archive, ready for `Containerd::import`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestImage {
    path: PathBuf,
    reference: String,
    manifest_digest: String,
}

impl TestImage {
    /// Builds the test image (or finds it in the cache under `target/`) and returns it.
    /// The archive is deterministic: the same busybox and probe always give the same digest,
    /// and the cached file is named after that digest.
    pub fn ensure() -> Result<TestImage> {
        static BUILT: Mutex<Option<TestImage>> = Mutex::new(None);
        let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(image) = built.as_ref() {
            return Ok(image.clone());
        }
        let image = build(&cache_dir())?;
        *built = Some(image.clone());
        Ok(image)
    }

    /// The OCI layout archive on disk.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The image name, e.g. `localhost/gvh-test:latest`.
    pub fn reference(&self) -> &str {
        &self.reference
    }

    /// `sha256:<hex>` of the image manifest.
    pub fn manifest_digest(&self) -> &str {
        &self.manifest_digest
    }
}

/// The test image's single layer as a plain tarball, for engines that import a root filesystem
/// (`docker import`, `podman import`). Built once, cached under the same name for the same
/// inputs.
pub fn rootfs_tar() -> Result<PathBuf> {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.as_ref() {
        return Ok(p.clone());
    }
    let busybox = read(Path::new(BUSYBOX))?;
    let probe = read(Path::new(PROBE_PATH))?;
    let layer = oci::tar_of(&layer_entries(busybox, probe))
        .map_err(|e| HarnessError::Image(format!("writing the layer: {e}")))?;
    let path = store_layer(&format!("gvh-test-rootfs-v{FORMAT_VERSION}"), &layer)?;
    *built = Some(path.clone());
    Ok(path)
}

/// Writes a layer as a plain tarball into the cache as `<prefix>-<digest prefix>.tar` (unless
/// that file exists: same name, same bytes) and returns its path, for `docker import`.
pub(crate) fn store_layer(prefix: &str, layer: &[u8]) -> Result<PathBuf> {
    let cache = cache_dir();
    let hex = oci::sha256_hex(layer);
    let path = cache.join(format!("{prefix}-{}.tar", &hex[..16]));
    if !path.exists() {
        fs::create_dir_all(&cache).map_err(|e| HarnessError::io("creating", &cache, e))?;
        // Write then rename: parallel test binaries may build the same layer at once.
        let tmp = cache.join(format!(".tmp-{}", random_hex(8)));
        fs::write(&tmp, layer).map_err(|e| HarnessError::io("writing", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| HarnessError::io("renaming into", &path, e))?;
    }
    Ok(path)
}

pub(crate) fn cache_dir() -> PathBuf {
    Path::new(env!("GVH_OUT_DIR")).join("image-cache")
}

fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| HarnessError::io("reading", path, e))
}

fn busybox_applets() -> Result<BTreeSet<String>> {
    let out = Command::new(BUSYBOX).arg("--list").output().map_err(|e| {
        HarnessError::Image(format!(
            "running `{BUSYBOX} --list`: {e} (install busybox-static)"
        ))
    })?;
    if !out.status.success() {
        return Err(HarnessError::Image(format!(
            "`{BUSYBOX} --list` failed: {}",
            out.status
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// `security.capability` value (VFS_CAP_REVISION_2, effective) granting cap_setuid (7) and
/// cap_net_raw (13) as permitted. Both are in ctr's default bounding set: with the effective
/// bit set, the kernel refuses to exec a file whose permitted caps exceed the bounding set, so
/// a cap outside it (cap_sys_admin) would make the probe unusable as a baseline.
fn file_caps_xattr() -> Vec<u8> {
    const VFS_CAP_REVISION_2: u32 = 0x0200_0000;
    const VFS_CAP_FLAGS_EFFECTIVE: u32 = 0x1;
    let permitted: u32 = (1 << 7) | (1 << 13);
    [
        VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE,
        permitted,
        0,
        0,
        0,
    ]
    .iter()
    .flat_map(|w| w.to_le_bytes())
    .collect()
}

fn layer_entries(busybox: Vec<u8>, probe: Vec<u8>) -> Vec<Entry> {
    let rel = |p: &str| p.trim_start_matches('/').to_string();
    let mut entries = vec![
        Entry::dir("bin", 0o755),
        Entry::dir("dev", 0o755),
        Entry::dir("etc", 0o755),
        Entry::dir("mnt", 0o755),
        Entry::dir("proc", 0o755),
        Entry::dir("root", 0o700),
        Entry::dir("sys", 0o755),
        Entry::dir("tmp", 0o1777),
        // World-writable on the image's root filesystem: a write here fails only because the
        // root is mounted read-only (EROFS), not because of file permissions (EACCES).
        Entry::dir("srv", 0o1777),
        Entry::file("bin/busybox", 0o755, busybox),
        Entry::file(
            "etc/passwd",
            0o644,
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
        ),
        Entry::file("etc/group", 0o644, "root:x:0:\nnobody:x:65534:\n"),
        Entry::file("etc/hosts", 0o644, "127.0.0.1\tlocalhost\n::1\tlocalhost\n"),
        Entry::file(&rel(PROBE_IN_IMAGE), 0o755, probe.clone()),
        Entry::file(&rel(PROBE_SUID_IN_IMAGE), 0o4755, probe.clone()),
        Entry::file(&rel(PROBE_FCAPS_IN_IMAGE), 0o755, probe)
            .with_xattr("security.capability", file_caps_xattr()),
    ];
    entries.extend(
        APPLETS
            .iter()
            .map(|a| Entry::symlink(&format!("bin/{a}"), "busybox")),
    );
    entries
}

/// Removes archives of earlier inputs so the cache does not grow with every probe change.
fn prune_other_archives(cache: &Path, keep: &Path, prefix: &str) {
    let Ok(entries) = fs::read_dir(cache) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name();
        if path != keep && name.to_string_lossy().starts_with(&format!("{prefix}-v")) {
            let _ = fs::remove_file(path);
        }
    }
}

fn build(cache: &Path) -> Result<TestImage> {
    let available = busybox_applets()?;
    let missing: Vec<&str> = APPLETS
        .iter()
        .copied()
        .filter(|a| !available.contains(*a))
        .collect();
    if !missing.is_empty() {
        return Err(HarnessError::Image(format!(
            "{BUSYBOX} lacks applets the tests need: {missing:?}"
        )));
    }
    let busybox = read(Path::new(BUSYBOX))?;
    let probe = read(Path::new(PROBE_PATH))?;
    let layer = oci::tar_of(&layer_entries(busybox, probe))
        .map_err(|e| HarnessError::Image(format!("writing the layer: {e}")))?;
    let config = ImageConfig {
        env: vec!["PATH=/bin".into()],
        cmd: vec!["/bin/sh".into()],
        working_dir: "/".into(),
    };
    let archive = oci::archive(&layer, &config, TEST_IMAGE_REF)
        .map_err(|e| HarnessError::Image(format!("writing the archive: {e}")))?;

    store_archive(cache, "gvh-test", archive, TEST_IMAGE_REF)
}

/// Writes `archive` into `cache` as `<prefix>-v<FORMAT_VERSION>-<digest prefix>.tar` (unless
/// that file exists: same name, same bytes), prunes older archives of the same prefix, and
/// returns the image. Shared by every locally built image (test image, pause image).
pub(crate) fn store_archive(
    cache: &Path,
    prefix: &str,
    archive: oci::Archive,
    reference: &str,
) -> Result<TestImage> {
    let hex = archive.manifest_digest.trim_start_matches("sha256:");
    let path = cache.join(format!("{prefix}-v{FORMAT_VERSION}-{}.tar", &hex[..16]));
    if !path.exists() {
        fs::create_dir_all(cache).map_err(|e| HarnessError::io("creating", cache, e))?;
        // Write then rename: parallel test binaries may build the same image at once.
        let tmp = cache.join(format!(".tmp-{}", random_hex(8)));
        fs::write(&tmp, &archive.bytes).map_err(|e| HarnessError::io("writing", &tmp, e))?;
        fs::rename(&tmp, &path).map_err(|e| HarnessError::io("renaming into", &path, e))?;
        prune_other_archives(cache, &path, prefix);
    }
    Ok(TestImage {
        path,
        reference: reference.to_string(),
        manifest_digest: archive.manifest_digest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ensure_is_stable_and_the_archive_exists() {
        let a = TestImage::ensure().unwrap();
        let b = TestImage::ensure().unwrap();
        assert_eq!(a, b);
        assert!(a.path().is_file());
        assert_eq!(a.reference(), TEST_IMAGE_REF);
    }

    #[test]
    fn rebuilding_from_the_same_inputs_gives_the_same_digest() {
        let dir = std::env::temp_dir().join(format!("gvh-image-test-{}", random_hex(6)));
        let a = build(&dir).unwrap();
        let b = build(&dir).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(a.manifest_digest(), b.manifest_digest());
        assert_eq!(a.path(), b.path());
    }

    #[test]
    fn file_caps_xattr_is_a_revision_2_effective_capability_set() {
        let x = file_caps_xattr();
        assert_eq!(x.len(), 20);
        assert_eq!(&x[..4], &[0x01, 0, 0, 0x02]);
        let permitted = u32::from_le_bytes(x[4..8].try_into().unwrap());
        assert_eq!(permitted, 0x2080, "cap_setuid and cap_net_raw");
    }
}
