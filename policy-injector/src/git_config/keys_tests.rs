use super::*;

fn entry(src: &str) -> Entry {
    let mut config = parse(src.as_bytes()).unwrap_or_else(|e| panic!("{src}: {e}"));
    assert_eq!(config.entries.len(), 1, "{src}");
    config.entries.remove(0)
}

fn verdict(class: KeyClass, src: &str) -> Result<(), Refusal> {
    allowed(class, &entry(src))
}

const BOTH: [KeyClass; 2] = [KeyClass::Carry, KeyClass::NewRepo];

/// Keys that make git run a program, read another file, or send it elsewhere. The point of
/// the module: none of them is ever carried or kept, whatever its value.
const DANGEROUS: &[(&str, &str)] = &[
    ("include path", "[include]\npath = /tmp/x\n"),
    (
        "includeIf path",
        "[includeIf \"gitdir:/\"]\npath = /tmp/x\n",
    ),
    ("hooks path", "[core]\nhooksPath = /tmp/hooks\n"),
    ("fsmonitor", "[core]\nfsmonitor = /tmp/run\n"),
    ("ssh command", "[core]\nsshCommand = sh -c x\n"),
    ("editor", "[core]\neditor = vim\n"),
    ("pager", "[core]\npager = less\n"),
    ("askpass", "[core]\naskPass = /tmp/x\n"),
    ("git proxy", "[core]\ngitProxy = /tmp/x\n"),
    (
        "alternate refs command",
        "[core]\nalternateRefsCommand = x\n",
    ),
    ("sequence editor", "[sequence]\neditor = x\n"),
    ("external diff", "[diff]\nexternal = x\n"),
    ("textconv", "[diff \"bin\"]\ntextconv = x\n"),
    ("merge driver", "[merge \"ours\"]\ndriver = x\n"),
    ("clean filter", "[filter \"lfs\"]\nclean = x\n"),
    ("smudge filter", "[filter \"lfs\"]\nsmudge = x\n"),
    ("process filter", "[filter \"lfs\"]\nprocess = x\n"),
    ("credential helper", "[credential]\nhelper = x\n"),
    (
        "scoped credential helper",
        "[credential \"https://h\"]\nhelper = x\n",
    ),
    ("gpg program", "[gpg]\nprogram = x\n"),
    ("gpg ssh program", "[gpg \"ssh\"]\nprogram = x\n"),
    ("alias", "[alias]\nst = !sh -c x\n"),
    ("pack objects hook", "[uploadpack]\npackObjectsHook = x\n"),
    (
        "remote upload pack",
        "[remote \"origin\"]\nuploadpack = x\n",
    ),
    (
        "remote receive pack",
        "[remote \"origin\"]\nreceivepack = x\n",
    ),
    ("remote vcs", "[remote \"origin\"]\nvcs = x\n"),
    ("remote proxy", "[remote \"origin\"]\nproxy = http://evil\n"),
    ("protocol allow", "[protocol \"ext\"]\nallow = always\n"),
    ("protocol allow all", "[protocol]\nallow = always\n"),
    (
        "url insteadOf",
        "[url \"ext::sh -c x\"]\ninsteadOf = https://\n",
    ),
    ("url pushInsteadOf", "[url \"x\"]\npushInsteadOf = y\n"),
    ("worktree config", "[extensions]\nworktreeConfig = true\n"),
    ("http proxy", "[http]\nproxy = http://evil\n"),
    ("difftool", "[difftool \"x\"]\ncmd = x\n"),
    ("mergetool", "[mergetool \"x\"]\ncmd = x\n"),
    ("pager per command", "[pager]\nlog = x\n"),
    ("browser", "[browser \"x\"]\ncmd = x\n"),
    ("ssh variant", "[ssh]\nvariant = x\n"),
    (
        "submodule update command",
        "[submodule \"s\"]\nupdate = !sh -c x\n",
    ),
    ("submodule path", "[submodule \"s\"]\npath = ../x\n"),
    ("ext url", "[remote \"origin\"]\nurl = ext::sh -c x\n"),
    ("fd url", "[remote \"origin\"]\nurl = fd::3\n"),
    (
        "unknown scheme url",
        "[remote \"origin\"]\nurl = evil://x/y\n",
    ),
    (
        "branch remote as helper url",
        "[branch \"main\"]\nremote = ext::sh -c x\n",
    ),
    (
        "option url",
        "[remote \"origin\"]\nurl = -oProxyCommand=x\n",
    ),
    (
        "partial clone helper",
        "[extensions]\npartialClone = ext::sh\n",
    ),
];

#[test]
fn dangerous_keys_are_refused_in_both_classes() {
    for (name, src) in DANGEROUS {
        for class in BOTH {
            assert!(verdict(class, src).is_err(), "{name} allowed under {class}");
        }
    }
}

#[test]
fn fsmonitor_is_never_carried() {
    let refusal = verdict(KeyClass::Carry, "[core]\n\tfsmonitor = x\n").unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "core.fsmonitor can run a program on every `git status`"
    );
}

#[test]
fn a_url_with_a_remote_helper_is_refused() {
    let refusal = verdict(
        KeyClass::Carry,
        "[remote \"x\"]\n\turl = ext::sh -c touch\n",
    )
    .unwrap_err();
    assert!(matches!(refusal.reason, RefusalReason::BadValue(_)));
    assert_eq!(
        refusal.to_string(),
        "remote.x.url: `ext::` selects a remote helper, which runs a program"
    );
}

#[test]
fn a_key_outside_the_allowlists_is_refused_by_default() {
    let refusal = verdict(KeyClass::Carry, "[color]\n\tui = auto\n").unwrap_err();
    assert_eq!(refusal.reason, RefusalReason::NotAllowed(KeyClass::Carry));
}

#[test]
fn safe_urls_are_allowed() {
    let urls = [
        "https://github.com/o/r.git",
        "http://h/r",
        "ssh://git@h:22/r",
        "ssh://[host]:22/r",
        "git://h/r",
        "file:///srv/r.git",
        "git@github.com:o/r.git",
        "h:r",
        "/srv/r.git",
        "../sibling",
        "./a:b",
        "origin",
    ];
    for url in urls {
        let src = format!("[remote \"x\"]\n\turl = {url}\n");
        assert_eq!(verdict(KeyClass::Carry, &src), Ok(()), "{url}");
    }
}

#[test]
fn unsafe_urls_are_refused() {
    let urls = [
        ("remote helper", "ext::sh -c x"),
        ("helper after a scheme-like prefix", "x+y::z"),
        ("helper inside", "https://h/a::b"),
        ("unknown scheme", "evil://h/r"),
        ("scheme in capitals", "HTTPS://h/r"),
        ("ssh option", "-oProxyCommand=x"),
        ("ssh option as host", "ssh://-oProxyCommand=x/r"),
        ("ssh option as user", "ssh://-u@h/r"),
        ("ssh option after user", "ssh://u@-o/r"),
        ("scp option host", "u@-oProxyCommand=x:r"),
        ("port not a number", "ssh://h:-p/r"),
        ("newline", "\"https://h/r\\nx\""),
        ("empty", "\"\""),
    ];
    for (name, url) in urls {
        let src = format!("[remote \"x\"]\n\turl = {url}\n");
        assert!(verdict(KeyClass::Carry, &src).is_err(), "{name}: {url}");
    }
    assert!(verdict(KeyClass::Carry, "[remote \"x\"]\n\turl\n").is_err());
}

#[test]
fn carried_keys_are_allowed_with_sound_values() {
    let ok = [
        "[remote \"o\"]\n\tpushurl = git@h:r\n",
        "[remote \"o\"]\n\tfetch = +refs/heads/*:refs/remotes/o/*\n",
        "[remote \"o\"]\n\tpush = :refs/heads/gone\n",
        "[remote \"o\"]\n\ttagOpt = --no-tags\n",
        "[remote \"o\"]\n\tprune\n",
        "[remote \"o\"]\n\tpruneTags = false\n",
        "[remote \"o\"]\n\tmirror = 1\n",
        "[remote \"o\"]\n\tskipDefaultUpdate = yes\n",
        "[remote \"o\"]\n\tskipFetchAll = Off\n",
        "[branch \"feature/x\"]\n\tremote = o\n",
        "[branch \"main\"]\n\tpushRemote = .\n",
        "[branch \"main\"]\n\tmerge = refs/heads/main\n",
        "[branch \"main\"]\n\tdescription = line one\\nline two\n",
        "[submodule \"lib/a\"]\n\turl = ../a.git\n",
        "[submodule \"lib/a\"]\n\tactive = true\n",
        "[submodule \"lib/a\"]\n\tbranch = .\n",
        "[submodule \"lib/a\"]\n\tupdate = rebase\n",
        "[submodule \"lib/a\"]\n\tfetchRecurseSubmodules = on-demand\n",
        "[submodule \"lib/a\"]\n\tignore = dirty\n",
    ];
    for src in ok {
        assert_eq!(verdict(KeyClass::Carry, src), Ok(()), "{src}");
        assert_eq!(verdict(KeyClass::NewRepo, src), Ok(()), "{src}");
    }
}

#[test]
fn branch_rebase_takes_booleans_and_the_modes_git_names() {
    for v in ["true", "false", "merges", "m", "interactive", "i", "0"] {
        let src = format!("[branch \"main\"]\n\trebase = {v}\n");
        assert_eq!(verdict(KeyClass::Carry, &src), Ok(()), "{v}");
    }
    for v in ["preserve", "p", "Merges", "x"] {
        let src = format!("[branch \"main\"]\n\trebase = {v}\n");
        assert!(verdict(KeyClass::Carry, &src).is_err(), "{v}");
    }
}

#[test]
fn submodule_update_takes_only_the_modes_that_run_nothing() {
    for v in ["checkout", "rebase", "merge", "none"] {
        let src = format!("[submodule \"s\"]\n\tupdate = {v}\n");
        assert_eq!(verdict(KeyClass::Carry, &src), Ok(()), "{v}");
    }
    for v in ["!rm -rf ~", "Checkout", ""] {
        let src = format!("[submodule \"s\"]\n\tupdate = \"{v}\"\n");
        assert!(verdict(KeyClass::Carry, &src).is_err(), "{v}");
    }
}

#[test]
fn boolean_keys_refuse_words_git_would_not_read() {
    assert!(verdict(KeyClass::Carry, "[remote \"o\"]\n\tprune = maybe\n").is_err());
    assert!(verdict(
        KeyClass::Carry,
        "[remote \"o\"]\n\ttagOpt = --upload-pack=x\n"
    )
    .is_err());
}

#[test]
fn control_bytes_are_refused_in_text_values() {
    assert!(verdict(KeyClass::Carry, "[branch \"m\"]\n\tmerge = \"a\\nb\"\n").is_err());
    assert!(verdict(
        KeyClass::Carry,
        "[branch \"m\"]\n\tdescription = \"\x1b[2J\"\n"
    )
    .is_err());
    assert!(verdict(KeyClass::NewRepo, "[user]\n\tname = \"a\\nb\"\n").is_err());
}

#[test]
fn subsections_that_cannot_name_a_remote_or_submodule_are_refused() {
    let bad = [
        "[remote \"ext::sh\"]\n\tfetch = +refs/heads/*:refs/remotes/x/*\n",
        "[remote \"a b\"]\n\turl = /r\n",
        "[remote \"-x\"]\n\turl = /r\n",
        "[remote \"\"]\n\turl = /r\n",
        "[remote \"../x\"]\n\turl = /r\n",
        "[submodule \"../../hooks\"]\n\turl = /r\n",
        "[submodule \"a/./b\"]\n\turl = /r\n",
        "[branch \"a\\\x1bb\"]\n\tmerge = refs/heads/a\n",
    ];
    for src in bad {
        let refusal = verdict(KeyClass::Carry, src).unwrap_err();
        assert!(
            matches!(refusal.reason, RefusalReason::BadSubsection(_)),
            "{src}: {refusal}"
        );
    }
}

#[test]
fn keys_need_their_subsection_shape() {
    // `core "x".bare` is never read by git; `remote.url` names no remote.
    assert!(verdict(KeyClass::NewRepo, "[core \"x\"]\n\tbare = false\n").is_err());
    assert!(verdict(KeyClass::Carry, "[remote]\n\turl = /r\n").is_err());
}

#[test]
fn repository_settings_are_kept_only_in_new_repositories() {
    let new_repo_only = [
        "[core]\n\trepositoryformatversion = 0\n",
        "[core]\n\tfilemode = true\n",
        "[core]\n\tbare = false\n",
        "[core]\n\tlogallrefupdates = always\n",
        "[core]\n\tworktree = ../../../sub\n",
        "[core]\n\tautocrlf = input\n",
        "[core]\n\teol = lf\n",
        "[core]\n\tsafecrlf = warn\n",
        "[core]\n\tcheckStat = minimal\n",
        "[core]\n\tsparseCheckoutCone\n",
        "[extensions]\n\tobjectFormat = sha256\n",
        "[extensions]\n\trefStorage = reftable\n",
        "[extensions]\n\tpartialClone = origin\n",
        "[remote \"origin\"]\n\tpromisor = true\n",
        "[remote \"origin\"]\n\tpartialclonefilter = blob:none\n",
        "[user]\n\tname = A U Thor\n",
        "[user]\n\temail = a@example.com\n",
        "[init]\n\tdefaultBranch = main\n",
        "[lfs]\n\trepositoryformatversion = 0\n",
    ];
    for src in new_repo_only {
        assert_eq!(verdict(KeyClass::NewRepo, src), Ok(()), "{src}");
        assert!(verdict(KeyClass::Carry, src).is_err(), "{src}");
    }
}

#[test]
fn repository_settings_refuse_values_git_would_not_read() {
    for src in [
        "[core]\n\trepositoryformatversion = 2\n",
        "[core]\n\teol = cr\n",
        "[extensions]\n\tobjectFormat = md5\n",
        "[init]\n\tdefaultBranch = -x\n",
        "[lfs]\n\trepositoryformatversion = 1k\n",
    ] {
        assert!(verdict(KeyClass::NewRepo, src).is_err(), "{src}");
    }
}

#[test]
fn a_removal_is_judged_on_the_key_alone() {
    let url = KeyRef::new("remote", Some(b"o"), "url").unwrap();
    let hooks = KeyRef::new("core", None, "hooksPath").unwrap();
    assert_eq!(allowed_key(KeyClass::Carry, &url), Ok(()));
    assert!(allowed_key(KeyClass::Carry, &hooks).is_err());
    assert!(
        allowed_value(KeyClass::Carry, &url, None).is_err(),
        "a bare url is no url"
    );
}

#[test]
fn a_refusal_shows_odd_subsection_bytes_escaped() {
    let refusal = verdict(KeyClass::Carry, "[remote \"a\x1bb\"]\n\turl = /r\n").unwrap_err();
    assert!(
        refusal.to_string().starts_with("remote.a\\x1bb.url: "),
        "{refusal}"
    );
}
