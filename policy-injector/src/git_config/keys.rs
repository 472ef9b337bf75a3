//! Which keys may leave a sandbox. Two allowlists, one per use; every key outside them may run
//! code or send git elsewhere and is never carried. The reasons table only names *why* some
//! well-known keys are refused, for the audit trail: it decides nothing.

use std::fmt;

use super::values::{self, Check};
use super::{Entry, KeyRef, Shown};

/// Which allowlist a key is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyClass {
    /// A change the sandbox made to its copy of an existing repository's config, carried into
    /// the host's file: remotes, branch tracking and submodule URLs only.
    Carry,
    /// The config of a repository the sandbox created (a new `.git`, a submodule clone): what
    /// `Carry` allows plus the repository format and worktree settings `git init` and
    /// `git clone` write, and the commit identity.
    NewRepo,
}

impl fmt::Display for KeyClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyClass::Carry => "carry",
            KeyClass::NewRepo => "new-repository",
        })
    }
}

/// Why a key (or one value of it) is not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}{reason}")]
pub struct Refusal {
    pub key: KeyRef,
    pub reason: RefusalReason,
}

/// The reason part of a [`Refusal`]; its text follows the key (`core.fsmonitor can run ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// A key known to run a program or redirect git, with what it does.
    Dangerous(&'static str),
    /// Outside the allowlist of this class (and not one of the well-known dangerous keys).
    NotAllowed(KeyClass),
    /// The subsection cannot name a remote, branch or submodule safely.
    BadSubsection(String),
    /// The key is allowed; this value is not.
    BadValue(String),
}

impl fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefusalReason::Dangerous(why) => write!(f, " {why}"),
            RefusalReason::NotAllowed(class) => {
                write!(
                    f,
                    " is not on the {class} allowlist (it could run code or redirect git)"
                )
            }
            RefusalReason::BadSubsection(why) => write!(f, ": the subsection {why}"),
            RefusalReason::BadValue(why) => write!(f, ": {why}"),
        }
    }
}

/// Whether `entry` may be carried (or kept) under `class`.
pub fn allowed(class: KeyClass, entry: &Entry) -> Result<(), Refusal> {
    allowed_value(class, &entry.key, entry.value.as_deref())
}

/// Whether `key` is allowed under `class` whatever its value: what a removal needs.
pub fn allowed_key(class: KeyClass, key: &KeyRef) -> Result<(), Refusal> {
    rule_for(class, key).map(|_| ())
}

/// Whether `key` may hold `value` (`None`: a bare `name`, boolean true) under `class`.
pub fn allowed_value(class: KeyClass, key: &KeyRef, value: Option<&[u8]>) -> Result<(), Refusal> {
    let rule = rule_for(class, key)?;
    values::check(rule, value).map_err(|why| Refusal {
        key: key.clone(),
        reason: RefusalReason::BadValue(why),
    })
}

/// The key's value check, once the key and its subsection are known to be allowed.
fn rule_for(class: KeyClass, key: &KeyRef) -> Result<Check, Refusal> {
    let refuse = |reason| Refusal {
        key: key.clone(),
        reason,
    };
    let Some(rule) = rule(class, key) else {
        return Err(refuse(match danger(key) {
            Some(why) => RefusalReason::Dangerous(why),
            None => RefusalReason::NotAllowed(class),
        }));
    };
    if let Some(sub) = key.subsection() {
        subsection(key.section(), sub).map_err(|why| refuse(RefusalReason::BadSubsection(why)))?;
    }
    Ok(rule)
}

/// The allowlists. A `None` subsection pattern means the key must have none: `core.bare` is
/// read by git, `core "x".bare` is not, and neither is ever needed.
fn rule(class: KeyClass, key: &KeyRef) -> Option<Check> {
    let carry = carry_rule(key.section(), key.subsection().is_some(), key.name());
    match class {
        KeyClass::Carry => carry,
        KeyClass::NewRepo => {
            carry.or_else(|| new_repo_rule(key.section(), key.subsection().is_some(), key.name()))
        }
    }
}

const UPDATE: &[&str] = &["checkout", "rebase", "merge", "none"];
const IGNORE: &[&str] = &["none", "untracked", "dirty", "all"];

fn carry_rule(section: &str, sub: bool, name: &str) -> Option<Check> {
    Some(match (section, sub, name) {
        ("remote", true, "url" | "pushurl") => Check::Url,
        ("remote", true, "fetch" | "push") => Check::Refspec,
        ("remote", true, "tagopt") => Check::OneOf(&["--tags", "--no-tags"]),
        (
            "remote",
            true,
            "prune" | "prunetags" | "mirror" | "skipdefaultupdate" | "skipfetchall",
        ) => Check::Bool,
        // A branch's remote may be a URL itself when no remote of that name exists.
        ("branch", true, "remote" | "pushremote") => Check::Url,
        ("branch", true, "merge") => Check::RefName,
        // `preserve`/`p` were removed in git 2.34; git now refuses them.
        ("branch", true, "rebase") => Check::BoolOr(&["merges", "m", "interactive", "i"]),
        ("branch", true, "description") => Check::Text,
        ("submodule", true, "url") => Check::Url,
        ("submodule", true, "active") => Check::Bool,
        ("submodule", true, "branch") => Check::RefName,
        // `!command` is git's fourth update mode: it runs the command in the submodule.
        ("submodule", true, "update") => Check::OneOf(UPDATE),
        ("submodule", true, "fetchrecursesubmodules") => Check::BoolOr(&["on-demand"]),
        ("submodule", true, "ignore") => Check::OneOf(IGNORE),
        _ => return None,
    })
}

fn new_repo_rule(section: &str, sub: bool, name: &str) -> Option<Check> {
    Some(match (section, sub, name) {
        ("core", false, "repositoryformatversion") => Check::OneOf(&["0", "1"]),
        (
            "core",
            false,
            "filemode" | "bare" | "ignorecase" | "precomposeunicode" | "symlinks"
            | "sparsecheckout" | "sparsecheckoutcone" | "trustctime" | "quotepath",
        ) => Check::Bool,
        ("core", false, "logallrefupdates") => Check::BoolOr(&["always"]),
        ("core", false, "autocrlf") => Check::BoolOr(&["input"]),
        ("core", false, "safecrlf") => Check::BoolOr(&["warn"]),
        ("core", false, "eol") => Check::OneOf(&["lf", "crlf", "native"]),
        ("core", false, "checkstat") => Check::OneOf(&["default", "minimal"]),
        // Submodule clones point back at their worktree with a relative path.
        ("core", false, "worktree") => Check::Line,
        ("extensions", false, "objectformat") => Check::OneOf(&["sha1", "sha256"]),
        ("extensions", false, "refstorage") => Check::OneOf(&["files", "reftable"]),
        ("extensions", false, "preciousobjects") => Check::Bool,
        // Names the promisor remote; checked like a branch's remote.
        ("extensions", false, "partialclone") => Check::Url,
        ("extensions", false, "noop") => Check::Line,
        ("remote", true, "promisor") => Check::Bool,
        ("remote", true, "partialclonefilter") => Check::Line,
        ("user", false, "name" | "email") => Check::Line,
        ("init", false, "defaultbranch") => Check::RefName,
        ("lfs", false, "repositoryformatversion") => Check::Number,
        _ => return None,
    })
}

/// Remote names are also used as URLs (a remote without `url` fetches from its own name), so
/// they keep to the characters `git remote add` users write. Submodule names become paths under
/// `.git/modules/` (git's own check, CVE-2018-11235). Branch names only must not carry control
/// bytes into messages.
fn subsection(section: &str, sub: &[u8]) -> Result<(), String> {
    if sub.is_empty() {
        return Err("is empty".into());
    }
    if let Some(b) = sub.iter().find(|&&b| b < 0x20 || b == 0x7f) {
        return Err(format!("holds the control byte 0x{b:02x}"));
    }
    if sub[0] == b'-' {
        return Err(format!("`{}` starts with `-`", Shown(sub)));
    }
    let components = || sub.split(|&b| b == b'/' || b == b'\\');
    match section {
        "remote" => {
            let odd = sub
                .iter()
                .find(|&&b| !(b.is_ascii_alphanumeric() || b"-_./@+".contains(&b)));
            if let Some(&b) = odd {
                return Err(format!(
                    "`{}` holds `{}`, not a character of a remote name",
                    Shown(sub),
                    Shown(&[b])
                ));
            }
            if components().any(|c| c == b".." || c.is_empty()) {
                return Err(format!("`{}` is not a remote name", Shown(sub)));
            }
        }
        "submodule" if components().any(|c| c == b".." || c == b"." || c.is_empty()) => {
            return Err(format!(
                "`{}` would leave .git/modules/ as a path",
                Shown(sub)
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Why well-known keys outside the allowlists are refused, for the message only.
fn danger(key: &KeyRef) -> Option<&'static str> {
    let sub = key.subsection().is_some();
    Some(match (key.section(), sub, key.name()) {
        ("include" | "includeif", _, _) => {
            "includes another file, which can hold any key (and is never checked here)"
        }
        ("core", false, "fsmonitor") => "can run a program on every `git status`",
        ("core", false, "hookspath") => "points git at hooks it runs on commit, checkout, push",
        ("core", false, "sshcommand") => "is run for every ssh remote",
        ("core", false, "editor" | "pager" | "askpass") => "runs a program",
        ("core", false, "gitproxy") => "runs a program for git:// remotes",
        ("core", false, "alternaterefscommand") => "runs a program on fetch and push",
        ("core", false, "worktree") => "moves the worktree git writes into anywhere",
        ("sequence", false, "editor") => "runs a program during rebase",
        ("extensions", false, "worktreeconfig") => {
            "makes git read config.worktree, a file this check never sees"
        }
        ("diff" | "difftool" | "merge" | "mergetool", _, _) => {
            "can name an external driver or tool git runs"
        }
        ("filter", _, _) => "clean, smudge and process filters run programs on checkout and add",
        ("credential", _, _) => "credential helpers run programs and receive passwords",
        ("gpg", _, _) => "names the signing program git runs",
        ("alias", _, _) => "`!` aliases run shell commands",
        ("uploadpack", _, _) => "uploadpack.packObjectsHook runs a program on fetch",
        ("protocol", _, _) => "enables transports such as `ext::`, which runs commands",
        ("url", _, _) => "insteadOf rewrites any remote's URL",
        ("remote", true, "uploadpack" | "receivepack") => {
            "is the program run on a local or ssh remote"
        }
        ("remote", true, "vcs") => "selects a remote helper program",
        ("remote", true, "proxy") => "redirects the remote's traffic",
        ("http", _, _) => "changes proxies, TLS checks and headers for every https remote",
        ("pager" | "browser" | "web" | "instaweb" | "man" | "sendemail" | "interactive", _, _) => {
            "can name a program git runs"
        }
        ("ssh", _, "variant") => "changes the options git passes to ssh",
        _ => return None,
    })
}
