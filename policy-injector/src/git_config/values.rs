//! What an allowlisted key's value may be. Each check returns why a value fails, in words for
//! the audit trail. Strict where git is lenient (enum spellings are exact, integers carry no
//! `k`/`m`/`g` suffix): a refused value is only not carried, while an accepted one must not
//! make git run or reach anything the developer did not ask for.

use super::Shown;

/// How an allowlisted key's value is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Git's boolean: bare, empty, true/false/yes/no/on/off (any case), or an integer.
    Bool,
    /// A boolean or one of these words.
    BoolOr(&'static [&'static str]),
    /// Exactly one of these words.
    OneOf(&'static [&'static str]),
    /// Decimal digits, as a format version.
    Number,
    /// Where git fetches or pushes: see [`url`].
    Url,
    /// A refspec (`+refs/heads/*:refs/remotes/origin/*`, `^refs/x`, `:refs/y`).
    Refspec,
    /// A ref or branch name: one line, not an option.
    RefName,
    /// One line of text (a name, an e-mail address, a filter spec, a path).
    Line,
    /// Free text over lines (a branch description).
    Text,
}

/// Schemes git handles itself. Any other `scheme://` makes git run `git-remote-<scheme>`.
const SCHEMES: &[&[u8]] = &[b"https", b"http", b"ssh", b"git", b"file"];

pub(crate) fn check(check: Check, value: Option<&[u8]>) -> Result<(), String> {
    let Some(v) = value else {
        return match check {
            Check::Bool | Check::BoolOr(_) => Ok(()),
            _ => Err("has no value (a bare name means `true`)".into()),
        };
    };
    match check {
        Check::Bool => boolean(v),
        Check::BoolOr(words) if words.iter().any(|w| w.as_bytes() == v) => Ok(()),
        Check::BoolOr(words) => boolean(v).map_err(|_| {
            format!(
                "`{}` is neither a boolean nor one of {}",
                Shown(v),
                words.join(", ")
            )
        }),
        Check::OneOf(words) if words.iter().any(|w| w.as_bytes() == v) => Ok(()),
        Check::OneOf(words) => Err(format!("`{}` is not one of {}", Shown(v), words.join(", "))),
        Check::Number if !v.is_empty() && v.len() <= 9 && v.iter().all(u8::is_ascii_digit) => {
            Ok(())
        }
        Check::Number => Err(format!("`{}` is not a plain number", Shown(v))),
        Check::Url => url(v),
        Check::Refspec => non_empty(v).and(one_line(v)),
        Check::RefName => non_empty(v).and(one_line(v)).and(not_an_option(v)),
        Check::Line => one_line(v),
        Check::Text => no_control(v, b"\t\n"),
    }
}

fn boolean(v: &[u8]) -> Result<(), String> {
    const WORDS: &[&str] = &["true", "false", "yes", "no", "on", "off"];
    let digits = v.strip_prefix(b"-").or(v.strip_prefix(b"+")).unwrap_or(v);
    let word = WORDS.iter().any(|w| w.as_bytes().eq_ignore_ascii_case(v));
    let integer = !digits.is_empty() && digits.len() <= 9 && digits.iter().all(u8::is_ascii_digit);
    if v.is_empty() || word || integer {
        Ok(())
    } else {
        Err(format!("`{}` is not a boolean", Shown(v)))
    }
}

fn non_empty(v: &[u8]) -> Result<(), String> {
    if v.is_empty() {
        Err("is empty".into())
    } else {
        Ok(())
    }
}

fn one_line(v: &[u8]) -> Result<(), String> {
    no_control(v, b"\t")
}

/// Control bytes end up on a terminal (escape sequences) or in protocols that are line-based
/// (a newline in a URL is how credential helpers were fooled, CVE-2020-5260).
fn no_control(v: &[u8], except: &[u8]) -> Result<(), String> {
    match v
        .iter()
        .find(|&&b| (b < 0x20 || b == 0x7f) && !except.contains(&b))
    {
        Some(b) => Err(format!("holds the control byte 0x{b:02x}")),
        None => Ok(()),
    }
}

/// Git hands an argument starting with `-` to ssh or a helper, which may read it as an option
/// (`-oProxyCommand=...`, CVE-2017-1000117).
fn not_an_option(v: &[u8]) -> Result<(), String> {
    if v.first() == Some(&b'-') {
        Err(format!(
            "`{}` starts with `-`, which ssh or git could read as an option",
            Shown(v)
        ))
    } else {
        Ok(())
    }
}

/// A URL git fetches from or pushes to without running anything but ssh: `scheme://...` with
/// a scheme git handles itself, `[user@]host:path` (ssh), or a plain path. Git's transport
/// picks a remote helper for `<transport>::<address>` (`ext::sh -c ...` runs a shell,
/// `fd::` talks to inherited descriptors) and for any scheme it does not know; both refused.
/// Any `::` is refused, which also refuses an IPv6 literal such as `ssh://[::1]/r`.
pub(crate) fn url(v: &[u8]) -> Result<(), String> {
    non_empty(v)?;
    one_line(v)?;
    not_an_option(v)?;
    if let Some(at) = find(v, b"::") {
        return Err(format!(
            "`{}::` selects a remote helper, which runs a program",
            Shown(&v[..at.min(32)])
        ));
    }
    if let Some(at) = find(v, b"://") {
        let scheme = &v[..at];
        if !SCHEMES.contains(&scheme) {
            return Err(format!(
                "scheme `{}` is not one of https, http, ssh, git, file (git hands any other \
                 scheme to a remote helper program)",
                Shown(scheme)
            ));
        }
        let rest = &v[at + 3..];
        let authority = &rest[..rest.iter().position(|&b| b == b'/').unwrap_or(rest.len())];
        return host(authority, true);
    }
    let colon = v.iter().position(|&b| b == b':');
    let slash = v.iter().position(|&b| b == b'/');
    match colon {
        // Git's rule: a colon before any slash makes it scp-like syntax for ssh.
        Some(c) if slash.is_none_or(|s| c < s) => host(&v[..c], false),
        _ => Ok(()),
    }
}

/// `[user@]host[:port]` of a URL, or `[user@]host` of scp-like syntax: nothing ssh could read
/// as an option, and a port of digits.
fn host(authority: &[u8], has_port: bool) -> Result<(), String> {
    let (user, host) = match authority.iter().rposition(|&b| b == b'@') {
        Some(at) => (&authority[..at], &authority[at + 1..]),
        None => (&b""[..], authority),
    };
    not_an_option(user)?;
    let bare = host.strip_prefix(b"[").unwrap_or(host);
    not_an_option(bare)?;
    if has_port {
        let after_host = match host.first() {
            Some(b'[') => host
                .iter()
                .position(|&b| b == b']')
                .map_or(&b""[..], |end| &host[end + 1..]),
            _ => host
                .iter()
                .position(|&b| b == b':')
                .map_or(&b""[..], |c| &host[c..]),
        };
        if let Some(port) = after_host.strip_prefix(b":") {
            if !port.iter().all(u8::is_ascii_digit) {
                return Err(format!("port `{}` is not a number", Shown(port)));
            }
        }
    }
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
