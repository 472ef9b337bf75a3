use super::*;

fn run(seed: &str, sandbox: &str, host: &str) -> Carried {
    carry(seed.as_bytes(), sandbox.as_bytes(), host.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn text(c: &Carried) -> &str {
    std::str::from_utf8(&c.bytes).unwrap()
}

fn keys(changes: &[Change]) -> Vec<String> {
    changes.iter().map(|c| c.key.to_string()).collect()
}

const SEED: &str = "\
[core]
\trepositoryformatversion = 0
\tbare = false
[remote \"origin\"]
\turl = https://github.com/o/r.git
\tfetch = +refs/heads/*:refs/remotes/origin/*
[branch \"main\"]
\tremote = origin
\tmerge = refs/heads/main
";

#[test]
fn a_sandbox_that_changed_nothing_leaves_the_host_untouched() {
    let host = "# mine\n[core]\n\tbare = false ; edited since\n";
    let c = run(SEED, SEED, host);
    assert_eq!(text(&c), host);
    assert!(c.applied.is_empty() && c.refused.is_empty());
}

#[test]
fn a_remote_added_in_the_sandbox_reaches_the_host_config() {
    let sandbox = format!(
        "{SEED}[remote \"fork\"]\n\turl = git@github.com:me/r.git\n\
         \tfetch = +refs/heads/*:refs/remotes/fork/*\n"
    );
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(
        text(&c),
        format!(
            "{SEED}[remote \"fork\"]\n\turl = git@github.com:me/r.git\n\
             \tfetch = +refs/heads/*:refs/remotes/fork/*\n"
        )
    );
    assert_eq!(keys(&c.applied), ["remote.fork.url", "remote.fork.fetch"]);
}

#[test]
fn a_changed_key_is_written_at_the_end_of_its_last_section() {
    let sandbox = SEED.replace("merge = refs/heads/main", "merge = refs/heads/trunk");
    let host = SEED.replace("[branch \"main\"]\n", "[branch \"main\"]\n\t# tracking\n");
    let c = run(SEED, &sandbox, &host);
    assert_eq!(
        text(&c),
        host.replace("\tmerge = refs/heads/main\n", "") + "\tmerge = refs/heads/trunk\n"
    );
}

#[test]
fn the_sandbox_value_replaces_every_host_line_of_the_key() {
    let sandbox = SEED.replace("r.git", "moved.git");
    let host = format!("{SEED}[remote \"origin\"]\n\turl = https://mirror/r.git\n");
    let c = run(SEED, &sandbox, &host);
    let out = parse(&c.bytes).unwrap();
    let urls: Vec<_> = out
        .entries
        .iter()
        .filter(|e| e.key.to_string() == "remote.origin.url")
        .map(|e| e.value.clone())
        .collect();
    assert_eq!(urls, [Some(b"https://github.com/o/moved.git".to_vec())]);
    // Placed in the last `[remote "origin"]`, the first one keeps its fetch line.
    assert!(text(&c).ends_with("[remote \"origin\"]\n\turl = https://github.com/o/moved.git\n"));
}

#[test]
fn a_multi_valued_key_keeps_the_sandbox_order() {
    let sandbox = SEED.replace(
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n\tfetch = ^refs/heads/tmp\n",
    );
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(c.applied.len(), 1);
    assert_eq!(c.applied[0].after.len(), 2);
    assert_eq!(text(&c), sandbox);
    let reordered = SEED.replace(
        "\turl = https://github.com/o/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n\turl = https://github.com/o/r.git\n",
    );
    assert!(run(SEED, &reordered, SEED).applied.is_empty());
}

#[test]
fn a_removed_remote_takes_its_section_header_with_it() {
    // What `git remote remove origin` leaves: no remote section, no branch tracking keys.
    let sandbox = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";
    let host = format!("{SEED}[user]\n\tname = Dev\n");
    let c = run(SEED, sandbox, &host);
    assert_eq!(text(&c), format!("{sandbox}[user]\n\tname = Dev\n"));
    assert_eq!(c.applied.len(), 4);
}

#[test]
fn a_comment_keeps_an_emptied_section_header() {
    let host = SEED.replace(
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n\t# the upstream\n",
    );
    let sandbox = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";
    let c = run(SEED, sandbox, &host);
    assert_eq!(
        text(&c),
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
         [remote \"origin\"]\n\t# the upstream\n"
    );
}

#[test]
fn blank_lines_after_a_removed_section_stay() {
    let host = "[remote \"x\"]\n\n\turl = /r\n\n[user]\n\tname = Dev\n";
    let seed = "[remote \"x\"]\n\turl = /r\n";
    let c = run(seed, "", host);
    assert_eq!(text(&c), "\n[user]\n\tname = Dev\n");
}

#[test]
fn fsmonitor_added_in_the_sandbox_is_refused() {
    let sandbox = SEED.replace("\tbare = false\n", "\tbare = false\n\tfsmonitor = /tmp/x\n");
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(text(&c), SEED);
    assert!(c.applied.is_empty());
    assert_eq!(c.refused.len(), 1);
    assert_eq!(
        c.refused[0].1.to_string(),
        "core.fsmonitor can run a program on every `git status`"
    );
}

#[test]
fn a_remote_with_a_helper_url_is_refused_whole() {
    let sandbox = SEED.replace("https://github.com/o/r.git", "ext::sh -c touch% /tmp/p");
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(text(&c), SEED);
    assert_eq!(
        keys(&c.refused.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>()),
        ["remote.origin.url"]
    );
    let sandbox = SEED.replace(
        "\turl = https://github.com/o/r.git\n",
        "\turl = https://github.com/o/r.git\n\turl = ext::x\n",
    );
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(text(&c), SEED, "one bad value refuses the whole key");
}

#[test]
fn repository_settings_changed_in_the_sandbox_are_not_carried() {
    let sandbox = SEED.replace("bare = false", "bare = true");
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(text(&c), SEED);
    assert_eq!(
        c.refused[0].1.reason,
        RefusalReason::NotAllowed(KeyClass::Carry)
    );
}

#[test]
fn removing_a_dangerous_key_in_the_sandbox_is_not_carried_either() {
    let seed = "[core]\n\thooksPath = /opt/hooks\n";
    let c = run(seed, "", seed);
    assert_eq!(text(&c), seed);
    assert_eq!(c.refused.len(), 1);
}

#[test]
fn untouched_host_bytes_survive_a_carry() {
    let host = "\u{feff}; developer's notes\r\n[core]\r\n\tbare = false   # keep\r\n\
                [remote \"origin\"]  ; main\r\n\turl = https://github.com/o/r.git\r\n\
                \tfetch = +refs/heads/*:refs/remotes/origin/*\r\n\
                [alias]\r\n\tst = status\r\n";
    let seed = "[remote \"origin\"]\n\turl = https://github.com/o/r.git\n";
    let sandbox = "[remote \"origin\"]\n\turl = https://github.com/o/r2.git\n";
    let c = run(seed, sandbox, host);
    let want = host.replace(
        "\turl = https://github.com/o/r.git\r\n\tfetch = +refs/heads/*:refs/remotes/origin/*\r\n",
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\r\n\turl = https://github.com/o/r2.git\r\n",
    );
    assert_eq!(text(&c), want);
}

#[test]
fn a_host_edit_to_another_key_survives() {
    let host = SEED.replace("bare = false", "bare = false\n\teditor = vim");
    let sandbox = format!("{SEED}[branch \"dev\"]\n\tremote = origin\n");
    let c = run(SEED, &sandbox, &host);
    assert_eq!(
        text(&c),
        format!("{host}[branch \"dev\"]\n\tremote = origin\n")
    );
}

#[test]
fn a_host_without_a_final_newline_gets_one_before_new_lines() {
    let seed = "[remote \"o\"]\n\turl = /a\n";
    let sandbox = "[remote \"o\"]\n\turl = /a\n\tprune\n";
    let c = run(seed, sandbox, "[remote \"o\"]\n\turl = /a");
    assert_eq!(text(&c), "[remote \"o\"]\n\turl = /a\n\tprune\n");
    let c = run(seed, sandbox, "[user]\n\tname = x");
    assert_eq!(text(&c), "[user]\n\tname = x\n[remote \"o\"]\n\tprune\n");
}

#[test]
fn a_host_ending_in_a_backslash_does_not_swallow_new_lines() {
    // `k=\` at the end of the file is `k = ""` to git; a bare newline after it would make the
    // next line part of the value.
    let c = run("", "[remote \"o\"]\n\turl = /b\n", "[a]\nk=\\");
    assert_eq!(text(&c), "[a]\nk=\\\n\n[remote \"o\"]\n\turl = /b\n");
    let out = parse(&c.bytes).unwrap();
    assert_eq!(out.entries[0].value, Some(vec![]));
    assert_eq!(out.entries[1].key.to_string(), "remote.o.url");
}

#[test]
fn a_host_ending_in_an_open_continuation_is_closed_before_new_lines() {
    // `k=\` and a newline, then nothing: the continuation is still open at the end.
    let c = run("", "[remote \"o\"]\n\turl = /b\n", "[a]\nk=\\\n");
    assert_eq!(text(&c), "[a]\nk=\\\n\n[remote \"o\"]\n\turl = /b\n");
    let c = run("", "[remote \"o\"]\n\tprune\n", "[a]\nk = \"x\" \\\r\n  ");
    let out = parse(&c.bytes).unwrap();
    assert_eq!(out.entries[0].value, Some(b"x ".to_vec()));
    assert_eq!(out.entries[1].key.to_string(), "remote.o.prune");
    let c = run(
        "",
        "[remote \"o\"]\n\tprune\n",
        "[remote \"o\"]\nurl = /a \\\n",
    );
    assert_eq!(text(&c), "[remote \"o\"]\nurl = /a \\\n\n\tprune\n");
}

#[test]
fn a_carry_that_would_not_read_back_as_planned_is_an_error() {
    let host = parse(b"[remote \"o\"]\n\turl = /a\n").unwrap();
    let change = Change {
        key: KeyRef::new("remote", Some(b"o"), "url").unwrap(),
        before: vec![Some(b"/a".to_vec())],
        after: vec![Some(b"/b".to_vec())],
    };
    let planned = b"[remote \"o\"]\n\turl = /b\n";
    assert_eq!(
        super::carry::verify(&host, std::slice::from_ref(&change), planned),
        Ok(())
    );
    for wrong in [
        &b"[remote \"o\"]\n\turl = /a\n"[..],
        b"[remote \"o\"]\n\turl = /b\n\tx\n",
        b"[r",
    ] {
        assert!(matches!(
            super::carry::verify(&host, std::slice::from_ref(&change), wrong),
            Err(CarryError::Unplaceable(_))
        ));
    }
}

#[test]
fn a_header_sharing_its_line_with_another_gets_a_new_section() {
    let host = "[remote \"o\"] [user]\n\tname = x\n";
    let c = run("", "[remote \"o\"]\n\tprune\n", host);
    assert_eq!(text(&c), format!("{host}[remote \"o\"]\n\tprune\n"));
}

#[test]
fn an_entry_on_its_header_line_is_removed_without_the_header() {
    let host = "[remote \"o\"] url = /a # here\n\tprune\n";
    let seed = "[remote \"o\"]\n\turl = /a\n\tprune\n";
    let sandbox = "[remote \"o\"]\n\tprune\n";
    let c = run(seed, sandbox, host);
    assert_eq!(text(&c), "[remote \"o\"] \n\tprune\n");
    let c = run(seed, "", host);
    assert_eq!(text(&c), "");
}

#[test]
fn keys_in_deprecated_headers_are_the_same_keys() {
    let host = "[remote.origin]\n\turl = /a\n";
    let c = run(
        "[remote \"origin\"]\n\turl = /a\n",
        "[remote \"origin\"]\n\turl = /b\n",
        host,
    );
    assert_eq!(text(&c), "[remote.origin]\n\turl = /b\n");
}

#[test]
fn an_unparseable_input_is_an_error_naming_it() {
    let bad = "[core\n";
    assert!(matches!(
        carry(b"", b"", bad.as_bytes()),
        Err(CarryError::Host(_))
    ));
    assert!(matches!(
        carry(b"", bad.as_bytes(), b""),
        Err(CarryError::Sandbox(_))
    ));
    assert!(matches!(
        carry(bad.as_bytes(), b"", b""),
        Err(CarryError::Seed(_))
    ));
}

#[test]
fn changes_are_reported_with_their_values_before_and_after() {
    let sandbox = SEED.replace("\tmerge = refs/heads/main\n", "");
    let c = run(SEED, &sandbox, SEED);
    assert_eq!(
        c.applied,
        [Change {
            key: KeyRef::new("branch", Some(b"main"), "merge").unwrap(),
            before: vec![Some(b"refs/heads/main".to_vec())],
            after: vec![],
        }]
    );
}
