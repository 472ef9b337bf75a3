use super::*;

fn text(s: &Sanitized) -> &str {
    std::str::from_utf8(&s.bytes).unwrap()
}

const CLONE: &str = "\
# written by the sandbox
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\tfsmonitor = /tmp/x   ; hidden among good keys
[include]
\tpath = ../../evil
[remote \"origin\"]
\turl = https://github.com/o/r.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
\tuploadpack = sh -c x
[branch \"main\"]
\tremote = origin
\tmerge = refs/heads/main
[core]
\thooksPath = /tmp/hooks
\tsymlinks
";

#[test]
fn a_sandbox_made_clone_keeps_only_allowed_keys() {
    let s = sanitize(CLONE.as_bytes(), KeyClass::NewRepo).unwrap();
    assert_eq!(
        text(&s),
        "[core]\n\
         \trepositoryformatversion = 0\n\
         \tfilemode = true\n\
         \tbare = false\n\
         \tlogallrefupdates = true\n\
         \tsymlinks\n\
         [remote \"origin\"]\n\
         \turl = https://github.com/o/r.git\n\
         \tfetch = +refs/heads/*:refs/remotes/origin/*\n\
         [branch \"main\"]\n\
         \tremote = origin\n\
         \tmerge = refs/heads/main\n"
    );
    let removed: Vec<String> = s.removed.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(
        removed,
        [
            "core.fsmonitor",
            "include.path",
            "remote.origin.uploadpack",
            "core.hookspath"
        ]
    );
    assert_eq!(s.kept.len(), 9);
}

#[test]
fn sanitizing_for_carry_drops_repository_settings() {
    let s = sanitize(CLONE.as_bytes(), KeyClass::Carry).unwrap();
    assert!(!text(&s).contains("[core]"), "{}", text(&s));
    assert!(text(&s).contains("[branch \"main\"]"));
}

#[test]
fn an_unparseable_config_is_an_error_not_an_empty_one() {
    assert!(sanitize(b"[core]\n\tbare = \"open\n", KeyClass::NewRepo).is_err());
}

#[test]
fn a_sanitized_config_reads_back_to_the_kept_values() {
    let src = "[user]\n\tname = \"  Ann  # the \\\"dev\\\" \"\n[remote \"o;k\"]\n\turl = /srv/r\n";
    let s = sanitize(src.as_bytes(), KeyClass::NewRepo).unwrap();
    let before = parse(src.as_bytes()).unwrap();
    let after = parse(&s.bytes).unwrap();
    assert_eq!(after.entries.len(), 1, "{}", text(&s));
    assert_eq!(after.entries[0].value, before.entries[0].value);
    // `o;k` is no remote name: refused, so nothing of it is written.
    assert_eq!(s.removed.len(), 1);
}

#[test]
fn sanitizing_twice_changes_nothing_more() {
    let once = sanitize(CLONE.as_bytes(), KeyClass::NewRepo).unwrap();
    let twice = sanitize(&once.bytes, KeyClass::NewRepo).unwrap();
    assert_eq!(twice.bytes, once.bytes);
    assert!(twice.removed.is_empty());
}

#[test]
fn multi_valued_keys_keep_their_safe_values_in_order() {
    let src = "[remote \"o\"]\n\turl = /a\n\turl = ext::x\n\turl = /b\n";
    let s = sanitize(src.as_bytes(), KeyClass::NewRepo).unwrap();
    assert_eq!(text(&s), "[remote \"o\"]\n\turl = /a\n\turl = /b\n");
}
