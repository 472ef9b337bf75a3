//! The one rule for container and exec ids, whichever front end received them. Ids become
//! path components (state directories, artifact manifests, staging directories) and runsc
//! arguments, so only a conservative alphabet is accepted: 1-128 characters of
//! `[A-Za-z0-9_.-]`, not starting with `.` (which also rules out `.` and `..`). containerd's ids
//! and the engines' (64 hex digits) all fit.

/// The longest id accepted.
pub const MAX_LEN: usize = 128;

/// An id outside the rule; `what` names it ("container id", "exec id").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {id:?} must be 1-{MAX_LEN} characters of [A-Za-z0-9_.-], not starting with '.'")]
pub struct InvalidId {
    pub what: &'static str,
    pub id: String,
}

/// Whether `id` follows the rule.
pub fn is_valid(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_LEN
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `id` if it follows the rule.
pub fn check(what: &'static str, id: &str) -> Result<(), InvalidId> {
    if is_valid(id) {
        Ok(())
    } else {
        Err(InvalidId {
            what,
            id: id.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_leave_a_directory_or_hide_a_file_are_refused() {
        let long = "a".repeat(MAX_LEN + 1);
        for bad in [
            "", ".", "..", ".hidden", "../x", "a/b", "a b", "x\0", "a\nb", &long,
        ] {
            assert!(check("container id", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn containerd_and_engine_ids_are_accepted() {
        let longest = "a".repeat(MAX_LEN);
        let docker = "0123456789abcdef".repeat(4);
        for good in ["c1", "abc-DEF_1.2", "gvh-docker-1.x_y", &docker, &longest] {
            check("container id", good).unwrap();
        }
    }

    #[test]
    fn the_message_names_what_and_the_rule() {
        let e = check("exec id", "a/b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "exec id \"a/b\" must be 1-128 characters of [A-Za-z0-9_.-], not starting with '.'"
        );
    }
}
