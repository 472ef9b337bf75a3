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

/// The bytes a tmpfs `size=` value names: a count with an optional k/m/g/t/p/e suffix (binary,
/// as the kernel reads it). `None` for what cannot be bounded here (a percentage of RAM, junk).
fn tmpfs_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (digits, shift) = match v.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&v[..v.len() - 1], 10),
        b'm' => (&v[..v.len() - 1], 20),
        b'g' => (&v[..v.len() - 1], 30),
        b't' => (&v[..v.len() - 1], 40),
        b'p' => (&v[..v.len() - 1], 50),
        b'e' => (&v[..v.len() - 1], 60),
        b'0'..=b'9' => (v, 0),
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

/// Every writable tmpfs the scratch entries did not place gets at most `[scratch] max_tmpfs`:
/// a tmpfs is memory the sandbox can fill, and `--tmpfs /big:size=100g` (or no size at all)
/// would otherwise leave only the memory ceiling to stop it, at which point the sandbox is
/// OOM-killed instead of the write failing with ENOSPC. Read-only ones (the masks) hold
/// nothing and are left alone. Runs after the mounts rule, which may add tmpfs mounts.
pub(crate) fn cap_tmpfs(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let cap = pass.policy.scratch.max_tmpfs.0;
    let scratch_paths: Vec<&str> = pass
        .policy
        .scratch
        .tmpfs
        .iter()
        .map(|t| t.path.as_str())
        .collect();
    let Some(mounts) = json::opt_array_mut(spec, "mounts", "")? else {
        return Ok(());
    };
    for (i, m) in mounts.iter_mut().enumerate() {
        let dest = normalized_destination(m, i)?;
        let Some(obj) = m.as_object_mut() else {
            continue;
        };
        if obj.get("type").and_then(Value::as_str) != Some("tmpfs")
            || scratch_paths.contains(&dest.as_str())
        {
            continue;
        }
        let field = format!("mounts[{dest}].options");
        let options: Vec<String> = match obj.get("options") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|o| {
                    o.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| HardenError::malformed(&field, "expected strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(HardenError::malformed(&field, "expected an array")),
        };
        if options.iter().any(|o| o == "ro") {
            continue;
        }
        let sized: Vec<Option<u64>> = options
            .iter()
            .filter_map(|o| o.strip_prefix("size="))
            .map(tmpfs_size)
            .collect();
        let blocks = options.iter().any(|o| o.starts_with("nr_blocks="));
        let within = !blocks && sized.len() == 1 && sized[0].is_some_and(|b| b <= cap);
        if within {
            continue;
        }
        let mut new: Vec<String> = options
            .iter()
            .filter(|o| !o.starts_with("size=") && !o.starts_with("nr_blocks="))
            .cloned()
            .collect();
        new.push(format!("size={cap}"));
        let before = obj.get("options").cloned();
        let after = json::strings_value(&new);
        obj.insert("options".into(), after.clone());
        let reason = match sized.as_slice() {
            [] if !blocks => format!("a tmpfs without a size gets the policy's scratch.max_tmpfs ({cap} bytes)"),
            [Some(b)] if !blocks => format!("tmpfs size {b} bytes clamped to the policy's scratch.max_tmpfs ({cap} bytes)"),
            _ => format!("a tmpfs size the policy cannot bound (percent, nr_blocks, several sizes) becomes scratch.max_tmpfs ({cap} bytes)"),
        };
        // Recorded under the mounts rule, whose step this runs in (decisions stay in rule order).
        pass.record(
            Rule::Mounts,
            field,
            Action::Clamped,
            before,
            Some(after),
            reason,
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

    fn tmpfs_at(dest: &str, options: serde_json::Value) -> serde_json::Value {
        let mut spec = base_spec();
        spec["mounts"] =
            json!([{"destination": dest, "type": "tmpfs", "source": "tmpfs", "options": options}]);
        spec
    }

    #[test]
    fn an_oversized_tmpfs_is_clamped_to_max_tmpfs() {
        // docker run --tmpfs /big:size=100g
        let h = harden_ok(&tmpfs_at("/big", json!(["rw", "nosuid", "size=100g"])));
        assert_eq!(
            mount_at(&h.spec, "/big").unwrap()["options"],
            json!(["rw", "nosuid", "nodev", "size=1073741824"])
        );
        assert_eq!(count(&h, Rule::Mounts, Action::Clamped), 1);
        let again = harden_ok(&h.spec);
        assert_eq!(again.spec, h.spec, "clamping is idempotent");
    }

    #[test]
    fn a_tmpfs_without_a_bounded_size_gets_max_tmpfs() {
        for opts in [
            json!(["rw"]),
            json!(["size=50%"]),
            json!(["nr_blocks=999999999"]),
            json!(["size=1k", "size=9g"]),
            json!(["size=12q"]),
        ] {
            let h = harden_ok(&tmpfs_at("/x", opts.clone()));
            let got = mount_at(&h.spec, "/x").unwrap()["options"].clone();
            let sizes: Vec<&str> = got
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|o| o.as_str())
                .filter(|o| o.starts_with("size=") || o.starts_with("nr_blocks="))
                .collect();
            assert_eq!(sizes, ["size=1073741824"], "{opts}");
        }
    }

    #[test]
    fn small_and_read_only_tmpfs_are_left_alone() {
        for opts in [json!(["size=65536k", "mode=755"]), json!(["ro"])] {
            let h = harden_ok(&tmpfs_at("/small", opts.clone()));
            let got = &mount_at(&h.spec, "/small").unwrap()["options"];
            // The mounts rule adds nosuid,nodev; the size stays.
            assert_eq!(got[0], opts[0], "{got}");
            assert_eq!(count(&h, Rule::Mounts, Action::Clamped), 0, "{opts}");
        }
    }

    #[test]
    fn tmpfs_sizes_are_read_as_the_kernel_reads_them() {
        assert_eq!(super::tmpfs_size("4096"), Some(4096));
        assert_eq!(super::tmpfs_size("64k"), Some(64 << 10));
        assert_eq!(super::tmpfs_size("2M"), Some(2 << 20));
        assert_eq!(super::tmpfs_size("100g"), Some(100 << 30));
        assert_eq!(super::tmpfs_size("99999999e"), None, "overflow");
        assert_eq!(super::tmpfs_size("50%"), None);
        assert_eq!(super::tmpfs_size("g"), None);
    }

    #[test]
    fn hardened_scratch_is_left_in_place() {
        let h = harden_ok(&base_spec());
        let again = harden_ok(&h.spec);
        assert_eq!(count(&again, Rule::Scratch, Action::Added), 0);
        assert_eq!(again.spec, h.spec);
    }
}
