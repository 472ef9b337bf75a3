//! Mounts: allowed types only; absolute, `..`-free, unique destinations (after lexical
//! normalisation), never "/"; binds of denied host paths rejected, checking both the source as
//! written and as the caller resolved it on the host; binds read-only unless the source is on
//! the writable allowlist; nosuid,nodev on every mount; credential mounts (the service-account
//! token) removed, by destination and, for the token volumes the caller found, by source; binds
//! of the policy's egress credentials files (or of a directory holding one) rejected.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::glob::{is_normal, join, normalize, PathGlob};
use crate::json::{self, Object};
use crate::policy::TokenVolumeAction;

fn is_under(base: &str, path: &str) -> bool {
    path == base
        || base == "/"
        || path.len() > base.len() && path.starts_with(base) && path.as_bytes()[base.len()] == b'/'
}

/// Compiled allow/deny lists. A pattern that does not compile (only possible for a policy built
/// in code without `validate`) denies everything and allows nothing: fail closed.
struct Lists<'p> {
    denied: Vec<(&'p str, Option<PathGlob<'p>>)>,
    writable: Vec<PathGlob<'p>>,
}

impl<'p> Lists<'p> {
    fn new(policy: &'p crate::Policy) -> Self {
        Lists {
            denied: policy
                .mounts
                .denied_sources
                .iter()
                .map(|p| (p.as_str(), PathGlob::new(p).ok()))
                .collect(),
            writable: policy
                .mounts
                .writable_sources
                .iter()
                .filter_map(|p| PathGlob::new(p).ok())
                .collect(),
        }
    }

    fn denied_by(&self, path: &[&str]) -> Option<&'p str> {
        self.denied.iter().find_map(|(raw, g)| match g {
            None => Some(*raw),
            Some(g) => (g.matches(path) || g.is_strict_ancestor_of_match(path)).then_some(*raw),
        })
    }

    fn writable(&self, path: &[&str]) -> bool {
        self.writable.iter().any(|g| g.matches(path))
    }
}

/// The denied-source pattern that `path` (normalised segments) matches or contains, if any: the
/// same test a bind source gets, for other places a host path can enter a spec (`root.path`).
pub(crate) fn denied_host_path<'p>(policy: &'p crate::Policy, path: &[&str]) -> Option<&'p str> {
    Lists::new(policy).denied_by(path)
}

/// The string at `key` of mount `i`, malformed when it is another type.
fn mount_str<'m>(obj: &'m Object, key: &str, i: usize) -> Result<Option<&'m str>, HardenError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(HardenError::malformed(
            format!("mounts[{i}].{key}"),
            "expected a string",
        )),
    }
}

/// What the destination check decided for one mount.
enum Destination {
    /// Keep the mount; the destination in normal form.
    Keep(String),
    /// Remove the mount (a credential mount).
    Remove,
    /// Rejected; the rejection is recorded.
    Rejected,
}

fn check_destination(dest: &str, seen: &[String], pass: &mut Pass<'_>) -> Destination {
    let policy = pass.policy;
    let reject = |pass: &mut Pass<'_>, reason: String| {
        pass.reject(Rule::Mounts, format!("mounts[{dest}]"), reason);
        Destination::Rejected
    };
    if !dest.starts_with('/') {
        return reject(pass, format!("destination {dest:?} is not absolute"));
    }
    // ".." is refused rather than resolved: it only ever serves to hide where a mount lands.
    if dest.split('/').any(|s| s == "..") {
        return reject(pass, format!("destination {dest:?} contains \"..\""));
    }
    let norm = if is_normal(dest) {
        dest.to_string()
    } else {
        join(&normalize(dest).unwrap_or_default())
    };
    if norm == "/" {
        return reject(
            pass,
            "a mount over / would replace the root filesystem".into(),
        );
    }
    if policy.mounts.remove_service_account_token
        && policy
            .mounts
            .credential_destinations
            .iter()
            .any(|c| is_under(c, &norm))
    {
        return Destination::Remove;
    }
    if seen.contains(&norm) {
        return reject(pass, format!("destination {norm} is mounted twice"));
    }
    Destination::Keep(norm)
}

/// The source of a bind the caller found to hold a service-account token, when the policy
/// removes tokens at all.
fn token_source<'m>(obj: &'m Object, pass: &Pass<'_>) -> Option<&'m str> {
    if !pass.policy.mounts.remove_service_account_token || pass.ctx.token_sources.is_empty() {
        return None;
    }
    let source = obj.get("source").and_then(Value::as_str)?;
    (crate::mount::is_bind_entry(obj) && pass.ctx.token_sources.contains(source)).then_some(source)
}

/// Rejects a bind whose source, as written or as the caller resolved it, is or contains a file
/// a `[network.egress.credentials]` entry names: the proxy reads the key from there on the
/// host so that the sandbox never holds it, and a bind would hand it over whatever the deny
/// list says. Returns whether the bind was rejected.
fn credential_file_bound(source: Option<&str>, label: &str, pass: &mut Pass<'_>) -> bool {
    let Some(source) = source else {
        return false;
    };
    let resolved = pass.ctx.resolved_sources.get(source).cloned();
    let credentials = &pass.policy.network.egress.credentials;
    for (what, path) in [
        ("source", Some(source)),
        ("resolved source", resolved.as_deref()),
    ] {
        let Some(segs) = path.and_then(normalize) else {
            continue;
        };
        let bound = join(&segs);
        let hit = credentials
            .iter()
            .find(|(_, c)| normalize(&c.file).is_some_and(|f| is_under(&bound, &join(&f))));
        if let Some((host, c)) = hit {
            pass.reject(
                Rule::Mounts,
                label,
                format!(
                    "bind of a credentials file: {what} {bound} is or contains {}, the file of the egress credential for {host} (network.egress.credentials): the sandbox must never hold the key",
                    c.file
                ),
            );
            return true;
        }
    }
    false
}

/// Checks a bind's source against the deny list; returns whether it may stay writable, or
/// `None` when it was rejected.
fn check_bind_source(
    source: Option<&str>,
    label: &str,
    lists: &Lists<'_>,
    pass: &mut Pass<'_>,
) -> Option<bool> {
    let Some(source) = source else {
        pass.reject(Rule::Mounts, label, "bind mount without a source");
        return None;
    };
    let Some(written) = normalize(source) else {
        pass.reject(
            Rule::Mounts,
            label,
            format!("bind source {source:?} is not absolute"),
        );
        return None;
    };
    let resolved = pass
        .ctx
        .resolved_sources
        .get(source)
        .and_then(|r| normalize(r));
    for (what, segs) in [
        ("source", Some(&written)),
        ("resolved source", resolved.as_ref()),
    ] {
        let Some(segs) = segs else { continue };
        if let Some(pattern) = lists.denied_by(segs) {
            pass.reject(
                Rule::Mounts,
                label,
                format!(
                    "bind of denied host path: {what} {} matches or contains {pattern:?}",
                    join(segs)
                ),
            );
            return None;
        }
    }
    // Writable only if the path as written and the path it really is are both allowed: a
    // symlink inside an emptyDir must not make some other host directory writable.
    Some(lists.writable(&written) && resolved.as_ref().is_none_or(|r| lists.writable(r)))
}

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let lists = Lists::new(pass.policy);
    let Some(mounts) = json::opt_array_mut(spec, "mounts", "")? else {
        return Ok(());
    };
    let mut keep = vec![true; mounts.len()];
    let mut seen: Vec<String> = Vec::with_capacity(mounts.len());
    let mut binds: Vec<protect::Bind> = Vec::new();
    for (i, m) in mounts.iter_mut().enumerate() {
        keep[i] = harden_mount(i, m, &lists, &mut seen, &mut binds, pass)?;
    }
    let mut it = keep.into_iter();
    mounts.retain(|_| it.next().unwrap_or(true));
    // Git's staging binds first: a protected or masked path inside a repository lands on top
    // of the sandbox's copy, not under it.
    git::add(mounts, &binds, pass);
    protect::add(mounts, &binds, &seen, pass);
    Ok(())
}

/// Entry `i` of `mounts` through the rules: its destination, token volumes, type, a bind's
/// source and writability, its options. `false`: the entry is removed from the spec.
fn harden_mount(
    i: usize,
    m: &mut Value,
    lists: &Lists,
    seen: &mut Vec<String>,
    binds: &mut Vec<protect::Bind>,
    pass: &mut Pass<'_>,
) -> Result<bool, HardenError> {
    let policy = pass.policy;
    let obj = m
        .as_object_mut()
        .ok_or_else(|| HardenError::malformed(format!("mounts[{i}]"), "expected an object"))?;
    let Some(dest) = mount_str(obj, "destination", i)? else {
        return Err(HardenError::malformed(
            format!("mounts[{i}].destination"),
            "missing",
        ));
    };
    let norm = match check_destination(dest, seen, pass) {
        Destination::Keep(norm) => norm,
        Destination::Rejected => return Ok(true),
        Destination::Remove => {
            pass.record(
                Rule::Mounts,
                format!("mounts[{dest}]"),
                Action::Removed,
                Some(std::mem::take(m)),
                None,
                "credential mount: the service-account token would give the container the pod's API identity",
            );
            return Ok(false);
        }
    };
    let label = format!("mounts[{norm}]");
    // A token by another path: the pod's own projected serviceAccountToken volume or a
    // token Secret, mounted anywhere, is the same API identity as the default mount above.
    if let Some(source) = token_source(obj, pass).map(str::to_string) {
        return Ok(token_mount(&source, label, m, pass));
    }
    if norm != dest {
        let before = obj.insert("destination".into(), Value::String(norm.clone()));
        pass.record(
            Rule::Mounts,
            format!(
                "mounts[{}].destination",
                before.as_ref().and_then(Value::as_str).unwrap_or_default()
            ),
            Action::Set,
            before,
            Some(Value::String(norm.clone())),
            "destination in normal form",
        );
    }
    seen.push(norm.clone());
    let before_opts = match obj.get("options") {
        None => Vec::new(),
        Some(v) => json::str_list(v, &format!("mounts[{i}].options"))?,
    };
    let kind = mount_str(obj, "type", i)?.unwrap_or("");
    let is_bind = crate::mount::is_bind_entry(obj);
    let effective = if is_bind { "bind" } else { kind };
    if !policy.mounts.allowed_types.iter().any(|t| t == effective) {
        pass.reject(
            Rule::Mounts,
            label,
            format!("mount type {effective:?} is not in mounts.allowed_types"),
        );
        return Ok(true);
    }
    let mut opts: Vec<&str> = before_opts.clone();
    let mut why: Vec<&str> = Vec::new();
    if kind == "tmpfs" && opts.contains(&"tmpcopyup") {
        // runc copies the image's files into the new tmpfs; runsc ignores the option, so
        // the tmpfs starts empty either way: the spec should say so.
        opts.retain(|o| *o != "tmpcopyup");
        why.push("runc's tmpcopyup is not supported by runsc: the tmpfs starts empty");
    }
    if is_bind {
        let source = mount_str(obj, "source", i)?;
        let bound = Bound {
            label: &label,
            dest: norm,
            source,
        };
        if harden_bind(bound, &mut opts, &mut why, lists, binds, pass).is_none() {
            return Ok(true);
        }
    }
    add_nosuid_nodev(&mut opts, &mut why);
    if opts != before_opts {
        let after = Value::Array(opts.iter().map(|o| Value::from(*o)).collect());
        let before = obj.insert("options".into(), after.clone());
        pass.record(
            Rule::Mounts,
            format!("{label}.options"),
            Action::Set,
            Some(before.unwrap_or(Value::Array(Vec::new()))),
            Some(after),
            why.join("; "),
        );
    }
    Ok(true)
}

/// A bind entry as `harden_mount` read it.
struct Bound<'a> {
    label: &'a str,
    dest: String,
    source: Option<&'a str>,
}

/// A bind's source through the deny lists and its writability: read-only unless the policy
/// lets the source be written. `None` when the bind is refused (recorded in `pass`).
fn harden_bind(
    b: Bound<'_>,
    opts: &mut Vec<&str>,
    why: &mut Vec<&str>,
    lists: &Lists,
    binds: &mut Vec<protect::Bind>,
    pass: &mut Pass<'_>,
) -> Option<()> {
    if credential_file_bound(b.source, b.label, pass) {
        return None;
    }
    let engine_file = b.source.is_some_and(|s| {
        pass.ctx
            .engine
            .as_ref()
            .is_some_and(|e| e.files.contains(s))
    });
    let writable = if engine_file {
        false
    } else {
        check_bind_source(b.source, b.label, lists, pass)?
    };
    let readonly = opts.contains(&"ro") && !opts.contains(&"rw");
    if !writable && !readonly {
        opts.retain(|o| *o != "rw");
        if !opts.contains(&"ro") {
            opts.push("ro");
        }
        why.push(if engine_file {
            "the engine's own file for this container, in its state directory: bound read-only"
        } else {
            "binds are read-only unless the source is in mounts.writable_sources"
        });
    }
    binds.push(protect::Bind {
        dest: b.dest,
        source: b.source.unwrap_or_default().to_string(),
        writable: writable && !readonly,
    });
    Some(())
}

/// A bind of a service-account token by another path, removed or refused as the policy says;
/// `false` when it is removed.
fn token_mount(source: &str, label: String, m: &mut Value, pass: &mut Pass<'_>) -> bool {
    let why = format!(
        "bind source {source} holds a Kubernetes service-account token (a projected \
         serviceAccountToken or token Secret volume): it would give the container the \
         pod's API identity"
    );
    match pass.policy.mounts.token_volumes {
        TokenVolumeAction::Remove => {
            pass.record(
                Rule::Mounts,
                label,
                Action::Removed,
                Some(std::mem::take(m)),
                None,
                why,
            );
            false
        }
        TokenVolumeAction::Reject => {
            pass.reject(
                Rule::Mounts,
                label,
                format!("{why} (mounts.token_volumes = \"reject\")"),
            );
            true
        }
    }
}

/// nosuid,nodev everywhere: gVisor ignores them today, but they cost nothing and keep a
/// setuid binary or device node from meaning anything if that ever changes.
fn add_nosuid_nodev(opts: &mut Vec<&str>, why: &mut Vec<&str>) {
    let had_suid = opts.iter().any(|o| *o == "suid" || *o == "dev");
    opts.retain(|o| *o != "suid" && *o != "dev");
    let mut added = had_suid;
    for flag in ["nosuid", "nodev"] {
        if !opts.contains(&flag) {
            opts.push(flag);
            added = true;
        }
    }
    if added {
        why.push("every mount gets nosuid,nodev");
    }
}

mod git;
mod protect;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_tests;
