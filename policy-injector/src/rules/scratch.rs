//! Scratch space: size-limited tmpfs mounts at /tmp, /var/tmp, /run and /dev/shm (by default).
//! A mount already at one of these destinations (after lexical normalisation) is replaced; a
//! bind of a host directory over /tmp is the classic way to make "scratch" mean "host disk".
//! runsc would otherwise add its own unlimited tmpfs at /tmp.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::glob::{is_normal, join, normalize};
use crate::json::{self, Object};
use crate::policy::ScratchTmpfs;

/// The destination of a mount in normal form, or as written when it is relative (the mounts
/// rule rejects those).
pub(crate) fn normalized_destination(m: &Value, index: usize) -> Result<String, HardenError> {
    let field = || format!("mounts[{index}]");
    let obj = m
        .as_object()
        .ok_or_else(|| HardenError::malformed(field(), "expected an object"))?;
    let dest = match obj.get("destination") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => {
            return Err(HardenError::malformed(
                format!("{}.destination", field()),
                "missing",
            ))
        }
        Some(_) => {
            return Err(HardenError::malformed(
                format!("{}.destination", field()),
                "expected a string",
            ))
        }
    };
    if is_normal(dest) {
        return Ok(dest.to_string());
    }
    Ok(match normalize(dest) {
        Some(segs) => join(&segs),
        None => dest.to_string(),
    })
}

pub(crate) fn desired_mount(t: &ScratchTmpfs) -> Value {
    let mut options: Vec<String> = Vec::with_capacity(t.options.len() + 3);
    for required in ["nosuid", "nodev"] {
        if !t.options.iter().any(|o| o == required) {
            options.push(required.to_string());
        }
    }
    options.extend(t.options.iter().cloned());
    options.push(format!("size={}", t.size.0));
    // Built by hand rather than with json!, which would go through serde: this runs for every
    // scratch path of every container.
    let mut m = Object::new();
    m.insert("destination".into(), Value::String(t.path.clone()));
    m.insert("type".into(), Value::from("tmpfs"));
    m.insert("source".into(), Value::from("tmpfs"));
    m.insert("options".into(), json::strings_value(&options));
    Value::Object(m)
}

fn is_strict_ancestor(ancestor: &str, path: &str) -> bool {
    ancestor == "/" && path != "/"
        || path.len() > ancestor.len()
            && path.starts_with(ancestor)
            && path.as_bytes()[ancestor.len()] == b'/'
}

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    if pass.policy.scratch.tmpfs.is_empty() {
        return Ok(());
    }
    if json::opt_array(spec, "mounts", "")?.is_none() {
        spec.insert("mounts".into(), Value::Array(Vec::new()));
    }
    let mounts = json::opt_array_mut(spec, "mounts", "")?.expect("ensured above");
    let mut dests = Vec::with_capacity(mounts.len() + pass.policy.scratch.tmpfs.len());
    for (i, m) in mounts.iter().enumerate() {
        dests.push(normalized_destination(m, i)?);
    }
    for t in &pass.policy.scratch.tmpfs {
        let desired = desired_mount(t);
        let at: Vec<usize> = (0..dests.len()).filter(|&i| dests[i] == t.path).collect();
        // Already exactly right (hardened before)? Then it must also sit after its ancestors.
        if at.len() == 1 && mounts[at[0]] == desired {
            let last_ancestor = dests.iter().rposition(|d| is_strict_ancestor(d, &t.path));
            if last_ancestor.is_none_or(|a| a < at[0]) {
                continue;
            }
        }
        let first = at.first().copied();
        for &i in at.iter().rev() {
            let before = mounts.remove(i);
            dests.remove(i);
            pass.record(
                Rule::Scratch,
                format!("mounts[{}]", t.path),
                Action::Removed,
                Some(before),
                None,
                format!(
                    "{} is scratch space: a size-limited tmpfs replaces this mount",
                    t.path
                ),
            );
        }
        // Place it where the old mount was (or at the end), but after any mount of a parent
        // directory, which would hide it, and before mounts inside it, which it would hide.
        let lo = dests
            .iter()
            .rposition(|d| is_strict_ancestor(d, &t.path))
            .map_or(0, |a| a + 1);
        let mut pos = first.unwrap_or(dests.len()).max(lo);
        if let Some(child) = (lo..pos).find(|&i| is_strict_ancestor(&t.path, &dests[i])) {
            pos = child;
        }
        mounts.insert(pos, desired.clone());
        dests.insert(pos, t.path.clone());
        pass.record(
            Rule::Scratch,
            format!("mounts[{}]", t.path),
            Action::Added,
            None,
            Some(desired),
            format!("size-limited scratch tmpfs ({})", t.size),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use serde_json::json;

    fn dests(spec: &serde_json::Value) -> Vec<String> {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn scratch_tmpfs_mounts_are_added_with_sizes() {
        let h = harden_ok(&base_spec());
        let tmp = mount_at(&h.spec, "/tmp").unwrap();
        assert_eq!(tmp["type"], "tmpfs");
        assert_eq!(
            tmp["options"],
            json!(["nosuid", "nodev", "mode=1777", "size=1073741824"])
        );
        let shm = mount_at(&h.spec, "/dev/shm").unwrap();
        assert_eq!(
            shm["options"],
            json!(["nosuid", "nodev", "noexec", "mode=1777", "size=67108864"])
        );
        assert!(mount_at(&h.spec, "/var/tmp").is_some() && mount_at(&h.spec, "/run").is_some());
    }

    #[test]
    fn bind_mount_over_tmp_is_replaced() {
        let mut spec = base_spec();
        spec["mounts"] = json!([
            {"destination": "/tmp/", "type": "bind", "source": "/srv/data", "options": ["rbind", "rw"]},
            {"destination": "/proc", "type": "proc", "source": "proc"}
        ]);
        let h = harden_ok(&spec);
        assert_eq!(mount_at(&h.spec, "/tmp").unwrap()["type"], "tmpfs");
        assert_eq!(dests(&h.spec)[0], "/tmp");
        assert_eq!(count(&h, Rule::Scratch, Action::Removed), 1);
    }

    #[test]
    fn duplicate_mounts_at_a_scratch_path_all_go() {
        let mut spec = base_spec();
        spec["mounts"] = json!([
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "//run/.", "type": "bind", "source": "/var/lib/x", "options": ["bind"]}
        ]);
        let h = harden_ok(&spec);
        assert_eq!(dests(&h.spec).iter().filter(|d| *d == "/run").count(), 1);
    }

    #[test]
    fn scratch_goes_after_a_parent_mount_and_before_child_mounts() {
        let mut spec = base_spec();
        spec["mounts"] = json!([
            {"destination": "/dev/shm/sub", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}
        ]);
        let h = harden_ok(&spec);
        let d = dests(&h.spec);
        let shm = d.iter().position(|x| x == "/dev/shm").unwrap();
        assert!(d.iter().position(|x| x == "/dev").unwrap() < shm);
    }

    #[test]
    fn hardened_scratch_is_left_in_place() {
        let h = harden_ok(&base_spec());
        let again = harden_ok(&h.spec);
        assert_eq!(count(&again, Rule::Scratch, Action::Added), 0);
        assert_eq!(again.spec, h.spec);
    }
}
