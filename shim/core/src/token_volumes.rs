//! Which bind sources of a spec hold a Kubernetes service-account token: the I/O half of the
//! mounts rule's token check. policy-injector decides what happens to them (remove or reject,
//! `mounts.token_volumes`); this module only looks, at Create, into the kubelet's volumes.
//!
//! kubelet bind-mounts a pod's volume from `<kubelet_root>/pods/<uid>/volumes/<plugin>/<name>`
//! and a subPath of one from `<kubelet_root>/pods/<uid>/volume-subpaths/<name>/<container>/<n>`.
//! A token arrives through a projected volume (a `serviceAccountToken` source, under whatever
//! file name the pod chose) or a Secret volume (a `kubernetes.io/service-account-token` Secret).
//! So the file name proves nothing: a file is a token when it is a JWT whose claims are
//! Kubernetes' service-account claims. Only those two plugins are looked into (and the pod-level
//! directories that contain them), so an emptyDir or a PVC is never read.
//!
//! Bounded and fail-closed: at most [`MAX_ENTRIES`] entries, [`MAX_DEPTH`] levels, files up to
//! [`MAX_TOKEN_BYTES`] (a token is ~1 KiB); a tree over the bounds or that cannot be read counts
//! as holding a token. Symlinks below the source are not followed: kubelet's atomic writer keeps
//! the real files in a `..<timestamp>` directory that the walk reaches anyway.

use std::collections::BTreeSet;
use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};

use policy_injector::policy::MountsPolicy;
use serde_json::Value;

/// Entries looked at per bind source before giving up (and counting it as a token).
pub const MAX_ENTRIES: usize = 4096;
/// Directory levels below a bind source.
pub const MAX_DEPTH: usize = 16;
/// Larger files are not tokens and are not read.
pub const MAX_TOKEN_BYTES: u64 = 64 << 10;

/// The kubelet volume plugins that can carry a service-account token.
const TOKEN_PLUGINS: [&str; 2] = ["kubernetes.io~projected", "kubernetes.io~secret"];

/// The bind sources of `spec` (as written) that hold a service-account token; empty when the
/// policy keeps tokens anyway.
pub fn token_sources(spec: &Value, mounts: &MountsPolicy) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if !mounts.remove_service_account_token {
        return out;
    }
    let root = Path::new(&mounts.kubelet_root);
    for source in bind_sources(spec) {
        if holds_token(Path::new(source), root) {
            out.insert(source.to_string());
        }
    }
    out
}

fn bind_sources(spec: &Value) -> impl Iterator<Item = &str> {
    spec.get("mounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|m| policy_injector::is_bind_mount(m))
        .filter_map(|m| m.get("source").and_then(Value::as_str))
        .filter(|s| s.starts_with('/'))
}

/// Whether `source` is (or contains, or lies in) one of the kubelet's token-capable volumes and
/// holds a service-account token. Checked as written and as resolved (symlinks followed, the
/// kubelet root too), so a link into a pod's volume is looked at as well.
pub fn holds_token(source: &Path, kubelet_root: &Path) -> bool {
    let mut views = vec![(source.to_path_buf(), kubelet_root.to_path_buf())];
    if let (Ok(s), Ok(r)) = (fs::canonicalize(source), fs::canonicalize(kubelet_root)) {
        views.push((s, r));
    }
    views.iter().any(|(s, r)| match shape(s, r) {
        None => false,
        Some(Shape::AllPods) => {
            log::warn!(
                "bind source {} holds every pod's volumes: counted as holding a service-account token",
                source.display()
            );
            true
        }
        Some(Shape::Look) => scan(s),
        Some(Shape::SubPath { pod, volume }) => {
            TOKEN_PLUGINS
                .iter()
                .any(|p| pod.join("volumes").join(p).join(&volume).exists())
                && scan(s)
        }
    })
}

/// Where a path lies among the kubelet's directories.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    /// The kubelet root or its `pods` directory: every pod's tokens are below.
    AllPods,
    /// In or above a projected or secret volume of one pod: look for a token.
    Look,
    /// A subPath bind of volume `volume` of the pod at `pod`: a token only if that volume is a
    /// projected or secret one.
    SubPath { pod: PathBuf, volume: String },
}

/// Pure: the shape of `path` relative to `root`, `None` when no token can be there.
fn shape(path: &Path, root: &Path) -> Option<Shape> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            // "..", "." or a second root: not a path kubelet writes; resolved view decides.
            _ => None,
        })
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [] | ["pods"] => Some(Shape::AllPods),
        ["pods", _] | ["pods", _, "volumes"] | ["pods", _, "volume-subpaths"] => Some(Shape::Look),
        ["pods", _, "volumes", plugin, ..] if TOKEN_PLUGINS.contains(plugin) => Some(Shape::Look),
        ["pods", uid, "volume-subpaths", volume, ..] => Some(Shape::SubPath {
            pod: root.join("pods").join(uid),
            volume: volume.to_string(),
        }),
        _ => None,
    }
}

/// Walks `source` (bounded) for a service-account token. Errors other than a file vanishing
/// (kubelet swaps `..data` while updating) count as a token: fail closed.
fn scan(source: &Path) -> bool {
    let mut budget = MAX_ENTRIES;
    let found = walk(source, 0, &mut budget, true);
    if let Err(why) = &found {
        log::warn!(
            "bind source {}: {why}: counted as holding a service-account token",
            source.display()
        );
    }
    found.unwrap_or(true)
}

fn walk(path: &Path, depth: usize, budget: &mut usize, top: bool) -> Result<bool, String> {
    if *budget == 0 {
        return Err(format!("more than {MAX_ENTRIES} entries"));
    }
    *budget -= 1;
    // The bind source itself may be a symlink (or a subPath file); nothing below it is followed.
    let meta = if top {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    };
    let meta = match meta {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    if meta.is_file() {
        return Ok(meta.len() <= MAX_TOKEN_BYTES && file_is_token(path)?);
    }
    if !meta.is_dir() {
        return Ok(false);
    }
    if depth == MAX_DEPTH {
        return Err(format!("deeper than {MAX_DEPTH} levels"));
    }
    let entries = match fs::read_dir(path) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
        if walk(&entry.path(), depth + 1, budget, false)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn file_is_token(path: &Path) -> Result<bool, String> {
    let mut bytes = Vec::new();
    match fs::File::open(path).and_then(|f| f.take(MAX_TOKEN_BYTES).read_to_end(&mut bytes)) {
        Ok(_) => Ok(is_service_account_token(&bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Pure: a JWT (three base64url parts) whose claims are a Kubernetes service account's: the
/// `kubernetes.io` claim of bound (projected) tokens, or the issuer of legacy Secret tokens.
/// The signature is not checked: a forged token is no less a secret-shaped thing to keep out.
pub fn is_service_account_token(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let parts: Vec<&str> = text.trim().split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return false;
    };
    let json = |part: &str| base64url(part).and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    if signature.is_empty() || json(header).is_none_or(|h| h.get("alg").is_none()) {
        return false;
    }
    json(claims).is_some_and(|c| {
        c.get("kubernetes.io").is_some_and(Value::is_object)
            || c.get("iss").and_then(Value::as_str) == Some("kubernetes/serviceaccount")
    })
}

/// Decodes base64url (RFC 4648 §5), padding optional (JWTs leave it out).
fn base64url(s: &str) -> Option<Vec<u8>> {
    use base64::alphabet::URL_SAFE;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine;
    const BASE64URL: GeneralPurpose = GeneralPurpose::new(
        &URL_SAFE,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    BASE64URL.decode(s).ok()
}

#[cfg(test)]
mod tests;
