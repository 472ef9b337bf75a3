//! `policy_injector::git_config` against the real `git` (2.39 here and in CI): git must read
//! every config the same way our parser does, read back every file `sanitize` and `carry`
//! write with exactly the values we meant, and find no dangerous key in a sanitized file.
//!
//! Each git runs with no system, global or XDG config and an empty HOME, so only the file
//! under test is read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use proptest::prelude::*;

use policy_injector::git_config::{allowed, carry, parse, sanitize, KeyClass, Value};

type Listing = Vec<(Vec<u8>, Value)>;

struct Git {
    dir: tempfile::TempDir,
}

impl Git {
    fn new() -> Git {
        Git {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn cmd(&self) -> Command {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("LC_ALL", "C")
            .current_dir(self.dir.path());
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd()
            .args(args)
            .output()
            .expect("running git (install git to run these tests)")
    }

    /// `git config --file F --get-regexp DANGEROUS_REGEX`.
    fn dangerous(&self, path: &Path) -> Output {
        let path = path.to_str().expect("UTF-8 temp path");
        self.run(&["config", "--file", path, "--get-regexp", DANGEROUS_REGEX])
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).expect("writing a config");
        path
    }

    /// `git config --file F --null --list`, or `None` if git refuses the file.
    fn list(&self, bytes: &[u8]) -> Option<Listing> {
        let path = self.write("under-test", bytes);
        self.list_file(&path)
    }

    fn list_file(&self, path: &Path) -> Option<Listing> {
        let out = self.run(&["config", "--file", path.to_str()?, "--null", "--list"]);
        if !out.status.success() {
            return None;
        }
        let mut records: Vec<&[u8]> = out.stdout.split(|&b| b == 0).collect();
        assert_eq!(records.pop(), Some(&b""[..]), "records end with NUL");
        Some(
            records
                .into_iter()
                .map(|r| match r.iter().position(|&b| b == b'\n') {
                    Some(nl) => (r[..nl].to_vec(), Some(r[nl + 1..].to_vec())),
                    None => (r.to_vec(), None),
                })
                .collect(),
        )
    }
}

fn ours(bytes: &[u8]) -> Option<Listing> {
    let config = parse(bytes).ok()?;
    Some(
        config
            .entries
            .into_iter()
            .map(|e| (e.key.to_git_bytes(), e.value))
            .collect(),
    )
}

/// Values per key, each key's values in order: what git's lookups depend on.
fn by_key(listing: &Listing) -> BTreeMap<Vec<u8>, Vec<Value>> {
    let mut map: BTreeMap<Vec<u8>, Vec<Value>> = BTreeMap::new();
    for (k, v) in listing {
        map.entry(k.clone()).or_default().push(v.clone());
    }
    map
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).escape_debug().to_string()
}

/// Files git and we both read, and files git and we both refuse.
#[rustfmt::skip]
const CORPUS: &[(&str, &[u8])] = &[
    ("plain", b"[core]\n\tbare = false\n\tfilemode = true\n"),
    ("inner whitespace", b"[a]\n\tk = a  \t b  \n"),
    ("quoted spaces", b"[a]\n\tk = \"  x  y  \"\n"),
    ("empty quotes first", b"[a]\n\tk = \"\" x\n\tl = \" \" x\n"),
    ("quotes anywhere", b"[a]\nk = \"x\" y \"z\"\n"),
    ("bare and empty", b"[a]\n\tk\n\tl =\n\tm = \"\"\n\tn=\n"),
    ("escapes", b"[a]\n\tk = \"\\t\\n\\b\\\\\\\"\"\n\tl = \\t x\n"),
    ("comments", b"; top\n# top\n[a] # h\n\tk = v # c ; d\n\tl = v;c\n\tm = \"v # c\"\n"),
    ("continuation", b"[a]\n\tk = a \\\n   b\n\tl = \"multi\\\nline\" # c\n"),
    ("continuation then comment line", b"[a]\nk = x\\\n# c\nl = y\n"),
    ("crlf", b"[a]\r\n  k  =  v  \r\n\tl = \"a\\\r\nb\"\r\n"),
    ("lone cr", b"[a]\nk = x\ry\nl = \"x\ry\"\n"),
    ("no final newline", b"[a]\nk=v"),
    ("bare at eof", b"[a]\nk"),
    ("backslash at eof", b"[a]\nk=v\\"),
    ("bom", b"\xef\xbb\xbf[a]\nk=v\r\n"),
    ("case", b"[Remote \"Origin\"]\n\tURL = u\n[A-b.C]\nk=v\n[a.B \"C\"]\nk=v\n"),
    ("deprecated", b"[remote.Origin]\n\turl = u\n"),
    ("subsection escapes", b"[a\t\"x\\y\\\"z\\\\\"]\nk=v\n\
        [a \"]\"]\nk=v\n[a \"\"]\nk=v\n[a.]\nk=v\n"),
    ("subsection cr", b"[a \"x\ry\"]\nk = v\n"),
    ("same line", b"[a] k = v\n[b][c] d=e\n  [f]  # c\n ; c2\ng=1\n"),
    ("binary value", b"[a]\nk = \xff\xfe\n"),
    ("vertical tab", b"[a]\nk = x\x0by\n"),
    ("dashes", b"[a]\nK-1 = v\n"),
    ("multi valued", b"[remote \"o\"]\n\tfetch = a\n[core]\n[remote \"o\"]\n\tfetch = b\n"),
    ("bad: comment after bare name", b"[a]\n\tk ;c\n"),
    ("bad: hash after bare name", b"[a]\n\tk#c\n"),
    ("bad: digit first", b"[a]\n1k = v\n"),
    ("bad: space after subsection", b"[a \"x\" ]\nk=v\n"),
    ("bad: unquoted subsection", b"[a x]\nk=v\n"),
    ("bad: header over lines", b"[a\n]\nk=v\n"),
    ("bad: subsection over lines", b"[a \"x\\\ny\"]\nk=v\n"),
    ("bad: unterminated header", b"[a"),
    ("bad: underscore", b"[a_b]\nk=v\n"),
    ("bad: stray backslash", b"[a]\n\\\nk=v\n"),
    ("bad: cr in name", b"[a]\nk\r = v\n"),
    ("bad: unknown escape", b"[a]\nk = v\\r\n"),
    ("bad: open quote", b"[a]\nk = \"open\n"),
    ("bad: open quote at eof", b"[a]\nk = \"open\\"),
    ("bad: partial bom", b"\xef\xbb[a]\nk=v\n"),
    ("bad: bom later", b"[a]\n\xef\xbb\xbfk=v\n"),
];

#[test]
fn git_reads_every_corpus_file_as_our_parser_does() {
    let git = Git::new();
    for (name, bytes) in CORPUS {
        let theirs = git.list(bytes);
        let mine = ours(bytes);
        assert_eq!(mine, theirs, "{name}: {}", show(bytes));
        assert_eq!(name.starts_with("bad:"), mine.is_none(), "{name}");
    }
}

#[test]
fn we_refuse_only_what_git_reads_oddly() {
    // Git accepts these; we refuse them on purpose (see the parser's Problem variants).
    let git = Git::new();
    let stricter: &[(&str, &[u8])] = &[
        ("variable outside a section", b"k = v\n[a]\nl = w\n"),
        ("empty section name", b"[ \"x\"]\nk=v\n"),
        ("NUL cuts the value", b"[a]\nk = v\x00w\n"),
    ];
    for (name, bytes) in stricter {
        assert!(git.list(bytes).is_some(), "{name}: git accepts it");
        assert!(ours(bytes).is_none(), "{name}: we refuse it");
    }
}

/// Tricky values under keys `sanitize` keeps, beside keys it drops.
#[rustfmt::skip]
const KEEPABLE: &[(&str, &[u8])] = &[
    ("description", b"[branch \"main\"]\n\tdescription = \" lead\\ttab \
        #hash; \\\"q\\\" \\\\ \"\\\n  two\n"),
    ("name", b"[user]\n\tname = A  \t B # c\n\temail\t=\ta@b ; c\n[core] fsmonitor = x\n"),
    ("odd branch", b"\xef\xbb\xbf[branch \"a\\\"b\\\\c]\"]\r\n\tmerge = refs/heads/x\r\n"),
    ("deprecated, same line", b"[Remote.Origin] URL = /srv/r.git\n\tfetch = \"+refs/*:refs/*\"\n"),
    ("empty and bare", b"[user]\n\tname =\n[remote \"o\"]\n\tprune\n\tmirror = \"\"\n"),
];

#[test]
fn git_reads_back_each_sanitized_file_with_the_kept_values() {
    let git = Git::new();
    let files = CORPUS
        .iter()
        .chain(KEEPABLE)
        .filter(|(_, b)| ours(b).is_some());
    for (name, bytes) in files {
        for class in [KeyClass::NewRepo, KeyClass::Carry] {
            let s = sanitize(bytes, class).unwrap();
            let theirs = git
                .list(&s.bytes)
                .unwrap_or_else(|| panic!("{name}: git refuses {}", show(&s.bytes)));
            let source = parse(bytes).unwrap();
            let kept: Listing = source
                .entries
                .into_iter()
                .filter(|e| allowed(class, e).is_ok())
                .map(|e| (e.key.to_git_bytes(), e.value))
                .collect();
            assert_eq!(by_key(&theirs), by_key(&kept), "{name}/{class}");
            let kept_keys: Vec<Vec<u8>> = s.kept.iter().map(|k| k.to_git_bytes()).collect();
            assert_eq!(
                kept_keys,
                kept.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
            );
        }
    }
    for (name, bytes) in KEEPABLE {
        let s = sanitize(bytes, KeyClass::NewRepo).unwrap();
        assert!(!s.kept.is_empty(), "{name} keeps something");
    }
}

/// Every key the module exists to keep out, as a POSIX extended regex over git's key names.
const DANGEROUS_REGEX: &str = "^(include|includeif|diff|difftool|merge|mergetool|filter|\
    credential|gpg|alias|uploadpack|protocol|url|http|pager|browser)\\.|\
    ^core\\.(hookspath|fsmonitor|sshcommand|editor|pager|askpass|gitproxy|alternaterefscommand)$|\
    ^sequence\\.editor$|^extensions\\.worktreeconfig$|\
    ^remote\\..*\\.(uploadpack|receivepack|vcs|proxy)$|^submodule\\..*\\.(update|path)$";

/// Each dangerous key on its header's line (git reads `[core] fsmonitor = x` as `core.fsmonitor`),
/// among keys a new repository keeps.
const PLANTED: &[u8] = b"\
[core]
\trepositoryformatversion = 0
\tbare = false
\tfsmonitor = \"sh -c 'touch /tmp/pwned'\"
[core] hooksPath = /tmp/hooks
[core] sshCommand = sh -c x
[core] editor = x
[core] pager = x
[core] askPass = x
[core] gitProxy = x
[core] alternateRefsCommand = x
[Core] FSMonitor = /tmp/again
[include] path = /tmp/evil
[includeIf \"gitdir:/\"] path = /tmp/evil
[sequence] editor = x
[diff \"b\"] textconv = x
[merge \"m\"] driver = x
[filter \"lfs\"] smudge = x
[filter \"lfs\"] process = x
[credential] helper = x
[gpg] program = x
[alias] st = !sh
[uploadpack] packObjectsHook = x
[protocol \"ext\"] allow = always
[url \"ext::sh -c x\"] insteadOf = https://mirror.example.test/
[http] proxy = http://proxy.example.test
[extensions] worktreeConfig = true
[remote \"origin\"]
\turl = https://git.example.test/o/r.git
\tuploadpack = x
\treceivepack = x
\tvcs = x
\tproxy = x
[remote.origin] vcs = y
[submodule \"s\"]
\turl = ../s.git
\tupdate = !sh -c x
\tpath = ../../x
[pager] log = x
";

#[test]
fn git_finds_no_dangerous_key_after_sanitize() {
    let git = Git::new();
    let found = git.dangerous(&git.write("planted", PLANTED));
    assert!(found.status.success(), "the regex finds the planted keys");
    assert!(String::from_utf8_lossy(&found.stdout).lines().count() >= 30);

    for class in [KeyClass::NewRepo, KeyClass::Carry] {
        let s = sanitize(PLANTED, class).unwrap();
        let after = git.write("sanitized", &s.bytes);
        let found = git.dangerous(&after);
        // Exit status 1: no key matched.
        assert_eq!(
            found.status.code(),
            Some(1),
            "{class}: git found {}",
            show(&found.stdout)
        );
        let kept = git.list_file(&after).expect("git reads it");
        let keys: Vec<String> = kept.iter().map(|(k, _)| show(k)).collect();
        assert!(keys.contains(&"remote.origin.url".to_string()), "{keys:?}");
        assert!(keys.contains(&"submodule.s.url".to_string()), "{keys:?}");
    }
}

/// The host's values with each applied key replaced by the sandbox's, as git would list them.
fn expected_after_carry(host: &[u8], seed: &[u8], sandbox: &[u8]) -> BTreeMap<Vec<u8>, Vec<Value>> {
    let mut want = by_key(&ours(host).unwrap());
    let c = carry(seed, sandbox, host).unwrap();
    for change in &c.applied {
        let k = change.key.to_git_bytes();
        if change.after.is_empty() {
            want.remove(&k);
        } else {
            want.insert(k, change.after.clone());
        }
    }
    want
}

/// Hosts with a `[remote "o"]` in the layouts a developer's file may have.
#[rustfmt::skip]
const HOSTS: &[(&str, &[u8])] = &[
    ("plain", b"[remote \"o\"]\n\turl = /a\n\tfetch = +refs/heads/*:refs/remotes/o/*\n"),
    ("crlf and bom", b"\xef\xbb\xbf[remote \"o\"]\r\n\turl = /a\r\n\tfetch = x\r\n"),
    ("no final newline", b"[remote \"o\"]\n\turl = /a\n\tfetch = x"),
    ("same line", b"[remote \"o\"] url = /a ; note\n\tfetch = x\n"),
    ("deprecated", b"[remote.o]\n\turl = /a\n\tfetch = x\n[user]\n\tname = d\n"),
    ("two instances", b"[remote \"o\"]\n\turl = /a\n[core]\n\tbare = false\n\
        [remote \"o\"]\n\tfetch = x\n"),
    ("comments", b"# top\n[remote \"o\"] # mine\n\turl = /a # old\n\t; note\n\tfetch = x\n\n\
        # next\n[user]\n\tname = d\n"),
    ("continuation", b"[remote \"o\"]\n\turl = /a\\\n\tfetch = x\n\tfetch = y\n"),
    ("backslash at eof", b"[remote \"o\"]\n\tfetch = x\n[a]\nk=\\"),
    ("entry on header line at eof", b"[remote \"o\"] url = /a\\"),
    ("crowded header", b"[remote \"o\"] [user]\n\tname = d\n"),
    ("odd values", b"[remote \"o\"]\n\turl = \" /a \"\n\tfetch = \"x;y\"\n\
        [alias]\n\tst = status\n"),
];

#[test]
fn git_reads_every_carry_output_with_the_values_we_meant() {
    let git = Git::new();
    let seed: &[u8] = b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n";
    #[rustfmt::skip]
    let sandboxes: &[(&str, &[u8])] = &[
        ("url changed", b"[remote \"o\"]\n\turl = /b\n\tfetch = x\n"),
        ("prune added", b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n\tprune\n"),
        ("fetch removed", b"[remote \"o\"]\n\turl = /a\n"),
        ("remote removed", b""),
        ("fetch doubled", b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n\
            \tfetch = \"^refs/ #; \\\"q\\\\\"\n"),
        ("new remote", b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n\
            [remote \"f\"]\n\turl = \"git@h:r\"\n"),
        ("dangerous", b"[remote \"o\"]\n\turl = ext::sh\n\tfetch = x\n\tvcs = y\n\
            [core]\n\tfsmonitor = z\n"),
    ];
    for (host_name, host) in HOSTS {
        assert!(git.list(host).is_some(), "{host_name}: git reads the host");
        for (sb_name, sandbox) in sandboxes {
            let c = carry(seed, sandbox, host).unwrap();
            let theirs = git
                .list(&c.bytes)
                .unwrap_or_else(|| panic!("{host_name}/{sb_name}: git refuses {}", show(&c.bytes)));
            assert_eq!(
                by_key(&theirs),
                expected_after_carry(host, seed, sandbox),
                "{host_name}/{sb_name}: {}",
                show(&c.bytes)
            );
            assert_eq!(ours(&c.bytes), Some(theirs), "{host_name}/{sb_name}");
        }
    }
}

fn git_ok(git: &Git, repo: &Path, args: &[&str]) {
    let mut full = vec!["-C", repo.to_str().unwrap()];
    full.extend_from_slice(args);
    let out = git.run(&full);
    assert!(out.status.success(), "git {args:?}: {}", show(&out.stderr));
}

#[test]
fn changes_made_by_real_git_commands_are_carried_as_git_sees_them() {
    let git = Git::new();
    let top = git.dir.path();
    let (host_repo, sandbox_repo) = (top.join("host"), top.join("sandbox"));
    let in_host = |args: &[&str]| git_ok(&git, &host_repo, args);
    let in_sandbox = |args: &[&str]| git_ok(&git, &sandbox_repo, args);
    let config = |repo: &Path| repo.join(".git/config");

    git_ok(&git, top, &["init", "-q", "-b", "main", "host"]);
    in_host(&[
        "remote",
        "add",
        "origin",
        "https://git.example.test/o/r.git",
    ]);
    in_host(&["config", "branch.main.remote", "origin"]);
    in_host(&["config", "branch.main.merge", "refs/heads/main"]);
    let seed = std::fs::read(config(&host_repo)).unwrap();

    // The sandbox's private copy, edited by git itself.
    git_ok(&git, top, &["init", "-q", "-b", "main", "sandbox"]);
    std::fs::write(config(&sandbox_repo), &seed).unwrap();
    in_sandbox(&["remote", "add", "fork", "git@git.example.test:me/r.git"]);
    in_sandbox(&["remote", "remove", "origin"]);
    in_sandbox(&["config", "branch.main.description", "agent's work\nline 2"]);
    in_sandbox(&["config", "core.fsmonitor", "sh -c x"]);
    in_sandbox(&["config", "alias.st", "!sh -c x"]);
    in_sandbox(&["config", "remote.fork.uploadpack", "sh -c x"]);
    let sandbox = std::fs::read(config(&sandbox_repo)).unwrap();

    // Meanwhile the developer edited the host's file.
    in_host(&["config", "user.name", "Dev"]);
    let note = b"# developer's note\n";
    let mut host = std::fs::read(config(&host_repo)).unwrap();
    host.extend_from_slice(note);

    let c = carry(&seed, &sandbox, &host).unwrap();
    let out = git.write("carried", &c.bytes);
    let get = |key: &str| -> Vec<String> {
        let o = git.run(&["config", "--file", out.to_str().unwrap(), "--get-all", key]);
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect()
    };
    let fetch = "+refs/heads/*:refs/remotes/fork/*";
    assert_eq!(get("remote.fork.url"), ["git@git.example.test:me/r.git"]);
    assert_eq!(get("remote.fork.fetch"), [fetch]);
    assert!(get("remote.origin.url").is_empty());
    assert!(get("branch.main.remote").is_empty(), "untracked");
    assert_eq!(get("branch.main.description"), ["agent's work", "line 2"]);
    assert_eq!(get("user.name"), ["Dev"]);
    for refused in ["core.fsmonitor", "alias.st", "remote.fork.uploadpack"] {
        assert!(get(refused).is_empty(), "{refused} reached the host");
    }
    let refused: Vec<String> = c.refused.iter().map(|(ch, _)| ch.key.to_string()).collect();
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(c.bytes.windows(note.len()).any(|w| w == note));
    assert_eq!(
        by_key(&git.list(&c.bytes).unwrap()),
        expected_after_carry(&host, &seed, &sandbox)
    );
}

// Generated configs: git and our parser must agree on what each says, or both refuse it.

/// `odd`: also pieces git refuses (an unclosed quote, a bad escape, a bad header).
fn header(odd: bool) -> impl Strategy<Value = String> {
    #[rustfmt::skip]
    let usual = prop::sample::select(vec![
        "[a]", "[Sec-1]", "[r \"x y\"]", "[r \"q\\\"\\\\\\z\"]", "[a.B]", "[s \"\"]", "[a] ",
        "[a]\t# c", "[x \"]\"]", "[remote \"o\"]", "[Remote.O]", "[remote \"o\"] url = /h",
    ]);
    let bad = prop::sample::select(vec!["[a b]", "[a \"x\" ]", "[a][remote \"o\"]"]);
    prop_oneof![6 => usual, u32::from(odd) => bad].prop_map(str::to_string)
}

fn value_piece(odd: bool) -> impl Strategy<Value = String> {
    let usual = prop::sample::select(vec![
        "v", "x y", " ", "\t", "  ", "\"q #;\"", "\\n", "\\t", "\\b", "\\\\", "\\\"", "\\\n",
        "\\\r\n", "#c", ";c", "\r", "=", "[", "]", "\u{e9}",
    ]);
    let bad = prop::sample::select(vec!["\"", "\\x", "\\"]);
    prop_oneof![8 => usual, u32::from(odd) => bad].prop_map(str::to_string)
}

fn entry_line(odd: bool) -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["", "\t", "  "]),
        prop::sample::select(vec!["k", "Name-2", "url", "fetch", "prune", "a1"]),
        prop::option::of((
            prop::sample::select(vec!["=", " = ", "\t=", "= "]),
            prop::collection::vec(value_piece(odd), 0..5),
        )),
        prop::sample::select(vec!["", " # c", " ;c", "  "]),
    )
        .prop_map(move |(indent, name, assignment, tail)| {
            let mut line = format!("{indent}{name}");
            let bare = assignment.is_none();
            if let Some((eq, pieces)) = assignment {
                line.push_str(eq);
                line.push_str(&pieces.concat());
            }
            // Git refuses a comment after a bare name (`k # c`).
            if odd || !bare || tail.trim().is_empty() {
                line.push_str(tail);
            }
            line
        })
}

fn config_text(odd: bool) -> impl Strategy<Value = Vec<u8>> {
    (
        header(odd),
        prop::collection::vec(
            prop_oneof![
                4 => entry_line(odd),
                1 => header(odd),
                1 => Just("# comment".to_string()),
                1 => Just(String::new()),
            ],
            0..8,
        ),
        prop::sample::select(vec!["\n", "\r\n"]),
        any::<bool>(),
    )
        .prop_map(|(first, lines, eol, final_eol)| {
            let mut text = first;
            for l in lines {
                text.push_str(eol);
                text.push_str(&l);
            }
            if final_eol {
                text.push_str(eol);
            }
            text.into_bytes()
        })
}

fn subsection_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        prop::sample::select(b"\"\\ .\r".to_vec()),
        0x20u8..0x7f,
        0x80u8..=0xff
    ];
    prop::collection::vec(byte, 0..8)
}

fn value_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        prop::sample::select(b"\"\\ \t\n\r#;\x08".to_vec()),
        0x01u8..=0xff
    ];
    prop::collection::vec(byte, 0..12)
}

proptest! {
    // No regressions file: a failure prints its minimal input, which belongs in the corpus.
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn git_and_our_parser_agree_on_generated_configs(text in config_text(true)) {
        let git = Git::new();
        prop_assert_eq!(ours(&text), git.list(&text), "{}", show(&text));
    }

    #[test]
    fn git_reads_carry_outputs_into_generated_hosts_as_meant(host in config_text(false)) {
        let git = Git::new();
        prop_assume!(ours(&host).is_some());
        let seed: &[u8] = b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n";
        let sandboxes: &[&[u8]] = &[
            b"[remote \"o\"]\n\turl = /b\n\tfetch = x\n",
            b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n\tprune\n",
            b"[remote \"o\"]\n\turl = /a\n",
            b"",
            b"[remote \"o\"]\n\turl = /a\n\tfetch = x\n[remote \"f\"]\n\turl = /f\n[a]\n\tk = v\n",
        ];
        let parsed = parse(&host).unwrap();
        for sandbox in sandboxes {
            let c = carry(seed, sandbox, &host).unwrap();
            let theirs = git.list(&c.bytes);
            prop_assert!(theirs.is_some(), "git refuses {}", show(&c.bytes));
            prop_assert_eq!(
                by_key(&theirs.unwrap()),
                expected_after_carry(&host, seed, sandbox),
                "{} -> {}", show(&host), show(&c.bytes)
            );
            // Lines of keys the sandbox did not change are still there, byte for byte.
            for e in &parsed.entries {
                if c.applied.iter().all(|ch| ch.key != e.key) {
                    let line = &host[e.span.clone()];
                    prop_assert!(
                        c.bytes.windows(line.len()).any(|w| w == line),
                        "lost {} from {}", show(line), show(&c.bytes)
                    );
                }
            }
        }
    }

    #[test]
    fn git_reads_serialized_settings_as_written(
        settings in prop::collection::vec(
            (
                "[a-z][a-z0-9-]{0,6}",
                prop::option::of(subsection_bytes()),
                "[a-z][a-z0-9-]{0,6}",
                prop::option::of(value_bytes()),
            ),
            1..6,
        )
    ) {
        let keys: Vec<_> = settings
            .iter()
            .map(|(s, sub, n, _)| {
                policy_injector::git_config::KeyRef::new(s, sub.as_deref(), n).unwrap()
            })
            .collect();
        let text = policy_injector::git_config::serialize(
            keys.iter().zip(&settings).map(|(k, (_, _, _, v))| (k, v.as_deref())),
        )
        .unwrap();
        let git = Git::new();
        let theirs = git.list(&text);
        prop_assert!(theirs.is_some(), "git refuses {}", show(&text));
        let want: Listing = keys
            .iter()
            .zip(&settings)
            .map(|(k, (_, _, _, v))| (k.to_git_bytes(), v.clone()))
            .collect();
        prop_assert_eq!(by_key(&theirs.unwrap()), by_key(&want));
    }
}
