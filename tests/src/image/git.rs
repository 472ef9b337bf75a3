//! The git test image: the test image with the host's git added (Debian's `git`, the libraries
//! it links, git-core's helpers and templates) and a user `agent` (1000), for tests where an
//! agent runs git inside the sandbox. Built from the host's files like the test image, so no
//! registry and no package download is needed; only helpers whose libraries are all in the
//! image are taken. curl and git's HTTP transport (which links libcurl-gnutls) come with
//! their libraries, so a test can make HTTPS requests and clone over HTTPS from inside the
//! sandbox (through the egress proxy).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use super::oci::{self, Entry, ImageConfig};
use super::{cache_dir, layer_entries, read, store_archive, store_layer, TestImage, BUSYBOX};
use crate::error::{HarnessError, Result};
use crate::probe::PROBE_PATH;

/// Name under which the git image is imported.
pub const GIT_IMAGE_REF: &str = "localhost/gvh-git:latest";

const GIT_CORE: &str = "/usr/lib/git-core";
const TEMPLATES: &str = "/usr/share/git-core/templates";
const CURL: &str = "/usr/bin/curl";

impl TestImage {
    /// The git image (see the module's comment), built once per process and cached.
    pub fn git() -> Result<TestImage> {
        static BUILT: Mutex<Option<TestImage>> = Mutex::new(None);
        let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(image) = built.as_ref() {
            return Ok(image.clone());
        }
        let layer = oci::tar_of(&entries()?)
            .map_err(|e| HarnessError::Image(format!("writing the git layer: {e}")))?;
        let config = ImageConfig {
            env: vec!["PATH=/usr/bin:/bin".into()],
            cmd: vec!["/bin/sh".into()],
            working_dir: "/".into(),
        };
        let archive = oci::archive(&layer, &config, GIT_IMAGE_REF)
            .map_err(|e| HarnessError::Image(format!("writing the git archive: {e}")))?;
        let image = store_archive(&cache_dir(), "gvh-git", archive, GIT_IMAGE_REF)?;
        *built = Some(image.clone());
        Ok(image)
    }
}

/// The git image's layer as a plain tarball, for `docker import` / `podman import`.
pub fn git_rootfs_tar() -> Result<PathBuf> {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.as_ref() {
        return Ok(p.clone());
    }
    let layer = oci::tar_of(&entries()?)
        .map_err(|e| HarnessError::Image(format!("writing the git layer: {e}")))?;
    let path = store_layer("gvh-git-rootfs", &layer)?;
    *built = Some(path.clone());
    Ok(path)
}

/// The libraries (and the loader) an ELF file needs, as `ldd` names them; `None` for a file
/// that is not a dynamic executable (a script).
fn libraries_of(path: &Path) -> Result<Option<Vec<PathBuf>>> {
    let head = fs::read(path).map_err(|e| HarnessError::io("reading", path, e))?;
    if !head.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    let out = Command::new("ldd")
        .arg(path)
        .output()
        .map_err(|e| HarnessError::Image(format!("running ldd {}: {e}", path.display())))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut libs = Vec::new();
    for line in text.lines() {
        // `libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)` or `/lib64/ld-linux... (0x...)`
        let target = match line.split_once("=>") {
            Some((_, rhs)) => rhs.trim(),
            None => line.trim(),
        };
        if let Some(p) = target
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            libs.push(PathBuf::from(p));
        }
    }
    Ok(Some(libs))
}

fn rel(p: &Path) -> String {
    p.to_string_lossy().trim_start_matches('/').to_string()
}

fn entries() -> Result<Vec<Entry>> {
    let busybox = read(Path::new(BUSYBOX))?;
    let probe = read(Path::new(PROBE_PATH))?;
    let mut out: Vec<Entry> = layer_entries(busybox, probe)
        .into_iter()
        .filter(|e| e.path != "etc/passwd" && e.path != "etc/group")
        .collect();
    out.push(Entry::file(
        "etc/passwd",
        0o644,
        "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    ));
    out.push(Entry::file(
        "etc/group",
        0o644,
        "root:x:0:\nagent:x:1000:\nnobody:x:65534:\n",
    ));
    let mut dirs: BTreeSet<String> = ["home", "home/agent", "usr", "usr/bin"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    let git = Path::new(GIT_CORE).join("git");
    let git_libs = libraries_of(&git)?.ok_or_else(|| {
        HarnessError::Image(format!(
            "{} is not an executable (install git)",
            git.display()
        ))
    })?;
    let mut allowed: BTreeSet<PathBuf> = git_libs.iter().cloned().collect();
    files.extend(git_libs);
    // curl, and the libraries of git's HTTP transport (the HTTPS, FTP helpers are its links).
    for (program, package) in [
        (Path::new(CURL).to_path_buf(), "curl"),
        (Path::new(GIT_CORE).join("git-remote-http"), "git"),
    ] {
        let libs = libraries_of(&program)?.ok_or_else(|| {
            HarnessError::Image(format!(
                "{} is not an executable (install {package})",
                program.display()
            ))
        })?;
        allowed.extend(libs.iter().cloned());
        files.extend(libs);
    }
    files.insert(PathBuf::from(CURL));
    let listing =
        fs::read_dir(GIT_CORE).map_err(|e| HarnessError::io("listing", Path::new(GIT_CORE), e))?;
    for e in listing {
        let e = e.map_err(|e| HarnessError::io("listing", Path::new(GIT_CORE), e))?;
        let path = e.path();
        let meta =
            fs::symlink_metadata(&path).map_err(|err| HarnessError::io("stat", &path, err))?;
        if meta.file_type().is_symlink() {
            let target =
                fs::read_link(&path).map_err(|err| HarnessError::io("readlink", &path, err))?;
            out.push(Entry::symlink(&rel(&path), &target.to_string_lossy()));
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        match libraries_of(&path)? {
            Some(libs) if libs.iter().all(|l| allowed.contains(l)) => {
                files.insert(path);
            }
            Some(_) => {}
            None => {
                files.insert(path);
            }
        }
    }
    out.push(Entry::symlink("usr/bin/git", "../lib/git-core/git"));
    // `#!/usr/bin/env sh`, the shebang of husky's and other tools' hook stubs.
    out.push(Entry::symlink("usr/bin/env", "../../bin/env"));
    let mut stack = vec![PathBuf::from(TEMPLATES)];
    while let Some(dir) = stack.pop() {
        dirs.insert(rel(&dir));
        for e in fs::read_dir(&dir).map_err(|err| HarnessError::io("listing", &dir, err))? {
            let e = e.map_err(|err| HarnessError::io("listing", &dir, err))?;
            let t = e
                .file_type()
                .map_err(|err| HarnessError::io("stat", e.path(), err))?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                files.insert(e.path());
            }
        }
    }
    for f in &files {
        // Debian's /lib is a link to /usr/lib: the image holds each file at the path the
        // loader asks for, as a file.
        let bytes = read(f)?;
        let mode = fs::metadata(f)
            .map_err(|e| HarnessError::io("stat", f, e))?
            .permissions()
            .mode()
            & 0o777;
        let mut parent = f.parent();
        while let Some(p) = parent.filter(|p| *p != Path::new("/")) {
            dirs.insert(rel(p));
            parent = p.parent();
        }
        out.push(Entry::file(&rel(f), mode, bytes));
    }
    out.extend(
        dirs.iter()
            .filter(|d| !out.iter().any(|e| e.path == **d))
            .map(|d| Entry::dir(d, 0o755))
            .collect::<Vec<_>>(),
    );
    Ok(out)
}
