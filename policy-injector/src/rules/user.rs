//! The user: uid 0 becomes the policy's uid:gid, a primary gid 0 becomes the policy's gid, and
//! group 0 leaves additionalGids. A non-root uid from the spec is kept.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

fn id(user: &Object, key: &str, path: &str) -> Result<Option<u64>, HardenError> {
    match json::opt_u64(user, key, path)? {
        Some(v) if v > u64::from(u32::MAX) => Err(HardenError::malformed(
            format!("{path}.{key}"),
            "out of range for a uint32 id",
        )),
        other => Ok(other),
    }
}

pub(crate) fn apply(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let path = format!("{prefix}.user");
    let (p_uid, p_gid) = (pass.policy.user.uid, pass.policy.user.gid);
    let user = json::ensure_object(process, "user", prefix)?;
    let uid = id(user, "uid", &path)?;
    let gid = id(user, "gid", &path)?;
    // A missing uid is 0 to every runtime (Go's zero value).
    if uid.unwrap_or(0) == 0 {
        user.insert("uid".into(), Value::from(p_uid));
        pass.record(
            Rule::User,
            format!("{path}.uid"),
            Action::Set,
            uid.map(Value::from),
            Some(Value::from(p_uid)),
            "root is replaced by the policy's user",
        );
        if gid != Some(u64::from(p_gid)) {
            user.insert("gid".into(), Value::from(p_gid));
            pass.record(
                Rule::User,
                format!("{path}.gid"),
                Action::Set,
                gid.map(Value::from),
                Some(Value::from(p_gid)),
                "root is replaced by the policy's user and group",
            );
        }
    } else if gid.unwrap_or(0) == 0 {
        user.insert("gid".into(), Value::from(p_gid));
        pass.record(
            Rule::User,
            format!("{path}.gid"),
            Action::Set,
            gid.map(Value::from),
            Some(Value::from(p_gid)),
            "the root group is replaced by the policy's group",
        );
    }
    let field = format!("{path}.additionalGids");
    if let Some(groups) = json::opt_array(user, "additionalGids", &path)? {
        let mut kept = Vec::with_capacity(groups.len());
        for (i, g) in groups.iter().enumerate() {
            match g.as_u64() {
                Some(v) if v <= u64::from(u32::MAX) => {
                    if v != 0 {
                        kept.push(g.clone());
                    }
                }
                _ => {
                    return Err(HardenError::malformed(
                        format!("{field}[{i}]"),
                        "expected a uint32 group id",
                    ))
                }
            }
        }
        if kept.len() != groups.len() {
            let before = Value::Array(groups.clone());
            let after = Value::Array(kept);
            user.insert("additionalGids".into(), after.clone());
            pass.record(
                Rule::User,
                field,
                Action::Removed,
                Some(before),
                Some(after),
                "group 0 (root) is removed from the supplementary groups",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use serde_json::json;

    #[test]
    fn root_user_is_replaced_by_policy_user() {
        let mut spec = base_spec();
        spec["process"]["user"] = json!({"uid": 0, "gid": 0});
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["process"]["user"],
            json!({"uid": 65534, "gid": 65534})
        );
    }

    #[test]
    fn missing_user_becomes_policy_user() {
        let mut spec = base_spec();
        spec["process"].as_object_mut().unwrap().remove("user");
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["process"]["user"],
            json!({"uid": 65534, "gid": 65534})
        );
    }

    #[test]
    fn root_via_additional_gids_is_removed() {
        let mut spec = base_spec();
        spec["process"]["user"] =
            json!({"uid": 1000, "gid": 1000, "additionalGids": [0, 10, 0, 27]});
        let h = harden_ok(&spec);
        assert_eq!(h.spec["process"]["user"]["additionalGids"], json!([10, 27]));
        assert_eq!(h.spec["process"]["user"]["uid"], json!(1000));
    }

    #[test]
    fn non_root_uid_with_root_group_keeps_uid() {
        let mut spec = base_spec();
        spec["process"]["user"] = json!({"uid": 1000, "gid": 0, "umask": 18});
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["process"]["user"],
            json!({"uid": 1000, "gid": 65534, "umask": 18})
        );
    }

    #[test]
    fn negative_or_huge_ids_are_malformed() {
        for user in [
            json!({"uid": -1, "gid": 0}),
            json!({"uid": 4294967296u64}),
            json!({"uid": 1, "additionalGids": ["0"]}),
        ] {
            let mut spec = base_spec();
            spec["process"]["user"] = user;
            assert!(matches!(
                harden_err(&spec),
                crate::HardenError::Malformed { .. }
            ));
        }
    }
}
