//! Mounts: allowed types only; absolute, `..`-free, unique destinations (after lexical
//! normalisation), never "/"; binds of denied host paths rejected, checking both the source as
//! written and as the caller resolved it on the host; binds read-only unless the source is on
//! the writable allowlist; nosuid,nodev on every mount; credential mounts (the service-account
//! token) removed.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::glob::{is_normal, join, normalize, PathGlob};
use crate::json::{self, Object};

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

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let policy = pass.policy;
    let lists = Lists::new(policy);
    let Some(mounts) = json::opt_array_mut(spec, "mounts", "")? else {
        return Ok(());
    };
    let mut keep = vec![true; mounts.len()];
    let mut seen: Vec<String> = Vec::with_capacity(mounts.len());
    for (i, m) in mounts.iter_mut().enumerate() {
        let field = format!("mounts[{i}]");
        let obj = m
            .as_object_mut()
            .ok_or_else(|| HardenError::malformed(&field, "expected an object"))?;
        let dest = json::opt_str(obj, "destination", &field)?
            .ok_or_else(|| HardenError::malformed(format!("{field}.destination"), "missing"))?
            .to_string();
        let label = format!("mounts[{dest}]");
        if !dest.starts_with('/') {
            pass.reject(
                Rule::Mounts,
                label,
                format!("destination {dest:?} is not absolute"),
            );
            continue;
        }
        if dest.split('/').any(|s| s == "..") {
            pass.reject(
                Rule::Mounts,
                label,
                format!("destination {dest:?} contains \"..\""),
            );
            continue;
        }
        let norm = if is_normal(&dest) {
            dest.clone()
        } else {
            join(&normalize(&dest).unwrap_or_default())
        };
        if norm == "/" {
            pass.reject(
                Rule::Mounts,
                label,
                "a mount over / would replace the root filesystem",
            );
            continue;
        }
        if policy.mounts.remove_service_account_token
            && policy
                .mounts
                .credential_destinations
                .iter()
                .any(|c| is_under(c, &norm))
        {
            keep[i] = false;
            pass.record(
                Rule::Mounts,
                label,
                Action::Removed,
                Some(Value::Object(obj.clone())),
                None,
                "credential mount: the service-account token would give the container the pod's API identity",
            );
            continue;
        }
        if seen.contains(&norm) {
            pass.reject(
                Rule::Mounts,
                label,
                format!("destination {norm} is mounted twice"),
            );
            continue;
        }
        seen.push(norm.clone());
        if norm != dest {
            obj.insert("destination".into(), Value::String(norm.clone()));
            pass.record(
                Rule::Mounts,
                format!("{label}.destination"),
                Action::Set,
                Some(Value::String(dest.clone())),
                Some(Value::String(norm.clone())),
                "destination in normal form",
            );
        }
        let label = format!("mounts[{norm}]");
        let before_opts = match obj.get("options") {
            None => Vec::new(),
            Some(v) => json::string_list(v, &format!("{field}.options"))?,
        };
        let kind = json::opt_str(obj, "type", &field)?.unwrap_or("");
        let is_bind = kind == "bind" || before_opts.iter().any(|o| o == "bind" || o == "rbind");
        let effective = if is_bind { "bind" } else { kind };
        if !policy.mounts.allowed_types.iter().any(|t| t == effective) {
            pass.reject(
                Rule::Mounts,
                label,
                format!("mount type {effective:?} is not in mounts.allowed_types"),
            );
            continue;
        }
        let mut opts = before_opts.clone();
        let mut why: Vec<String> = Vec::new();
        if is_bind {
            let Some(source) = json::opt_str(obj, "source", &field)? else {
                pass.reject(Rule::Mounts, label, "bind mount without a source");
                continue;
            };
            let Some(written) = normalize(source) else {
                pass.reject(
                    Rule::Mounts,
                    label,
                    format!("bind source {source:?} is not absolute"),
                );
                continue;
            };
            let resolved_raw = pass.ctx.resolved_sources.get(source);
            let resolved = resolved_raw.and_then(|r| normalize(r));
            let mut denied = false;
            for (what, segs) in [
                ("source", Some(&written)),
                ("resolved source", resolved.as_ref()),
            ] {
                let Some(segs) = segs else { continue };
                if let Some(pattern) = lists.denied_by(segs) {
                    pass.reject(
                        Rule::Mounts,
                        label.clone(),
                        format!(
                            "bind of denied host path: {what} {} matches or contains {pattern:?}",
                            join(segs)
                        ),
                    );
                    denied = true;
                    break;
                }
            }
            if denied {
                continue;
            }
            let writable =
                lists.writable(&written) && resolved.as_ref().is_none_or(|r| lists.writable(r));
            let readonly = opts.iter().any(|o| o == "ro") && !opts.iter().any(|o| o == "rw");
            if !writable && !readonly {
                opts.retain(|o| o != "rw");
                opts.push("ro".to_string());
                why.push(format!(
                    "bind of {source} is read-only (not in mounts.writable_sources)"
                ));
            }
        }
        let had_suid = opts.iter().any(|o| o == "suid" || o == "dev");
        opts.retain(|o| o != "suid" && o != "dev");
        let mut added = had_suid;
        for flag in ["nosuid", "nodev"] {
            if !opts.iter().any(|o| o == flag) {
                opts.push(flag.to_string());
                added = true;
            }
        }
        if added {
            why.push("every mount gets nosuid,nodev".to_string());
        }
        if opts != before_opts {
            let after = json::strings_value(&opts);
            obj.insert("options".into(), after.clone());
            pass.record(
                Rule::Mounts,
                format!("{label}.options"),
                Action::Set,
                Some(json::strings_value(&before_opts)),
                Some(after),
                why.join("; "),
            );
        }
    }
    let mut it = keep.into_iter();
    mounts.retain(|_| it.next().unwrap_or(true));
    Ok(())
}

#[cfg(test)]
mod tests;
