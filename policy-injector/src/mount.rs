//! What the runtime and the policy agree a bind mount is. One definition: the policy's mounts
//! rule, the shim's bind-source resolution, the artifact manifests and the token-volume scan
//! must never disagree on which mounts expose a host path.

use serde_json::{Map, Value};

/// An OCI `mounts[]` entry that binds a host path: `"type": "bind"`, or (as runc and runsc
/// accept) any type with a `bind` or `rbind` option.
pub fn is_bind_mount(mount: &Value) -> bool {
    mount.as_object().is_some_and(is_bind_entry)
}

/// [`is_bind_mount`] of an entry already known to be an object.
pub fn is_bind_entry(mount: &Map<String, Value>) -> bool {
    mount.get("type").and_then(Value::as_str) == Some("bind")
        || mount
            .get("options")
            .and_then(Value::as_array)
            .is_some_and(|o| o.iter().any(|x| x == "bind" || x == "rbind"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::is_bind_mount;

    #[test]
    fn a_bind_is_told_by_its_type_or_a_bind_option() {
        for (name, mount, bind) in [
            ("bind type", json!({"type": "bind", "source": "/a"}), true),
            (
                "rbind option",
                json!({"type": "none", "options": ["rbind"]}),
                true,
            ),
            (
                "bind option, no type",
                json!({"options": ["ro", "bind"]}),
                true,
            ),
            (
                "tmpfs",
                json!({"type": "tmpfs", "options": ["nosuid"]}),
                false,
            ),
            ("proc", json!({"type": "proc"}), false),
            ("not an object", json!("bind"), false),
        ] {
            assert_eq!(is_bind_mount(&mount), bind, "{name}");
        }
    }
}
