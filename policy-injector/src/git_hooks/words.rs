//! The words of a hook script or a hook tool's config that may name project files. Not a shell
//! or YAML parser: every word counts, wherever it stands, which errs on the side of one path
//! too many (a protected file the hook never runs) rather than one too few.

use super::{runner, Runner};

/// What [`words`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Words {
    /// Words with a `/` that can be paths (`./scripts/x.sh`, `tools/fmt`, `/abs/path`,
    /// `~/bin/x`): relative ones are taken from the top of the working tree, where git runs
    /// hooks, filters and aliases and the hook tools run their commands.
    pub paths: Vec<String>,
    /// Those of [`Words::paths`] that stand where something is run: a command (`./x.sh`), or
    /// the script an interpreter is given (`sh scripts/x.sh`, `. lib.sh`, `node tools/x.js`).
    /// The others are arguments: files a command reads, or directories it works on.
    pub run_paths: Vec<String>,
    /// Words without a `/` that can be file names (`fmt.sh`, `Makefile`): they count where a
    /// regular file of that name is at the top of the working tree.
    pub names: Vec<String>,
    /// `--name=value` options, as written.
    pub options: Vec<(String, String)>,
    /// Commands recognised by name that read project files by themselves.
    pub runners: Vec<&'static Runner>,
    /// The command names the text runs (the first word of each command, after assignments and
    /// keywords; not a path): what a project directory put first on `PATH` would shadow.
    pub commands: Vec<String>,
}

/// Commands whose first argument that is not an option is a script they run.
const INTERPRETERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", ".", "source", "node", "python", "python3", "perl", "ruby",
    "deno", "bun",
];

/// Words that start a command without being one.
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac", "!",
    "exec", "time", "command", "env", "nohup", "builtin",
];

/// Characters that end a word: blanks and what shell, YAML, JSON and git config put between
/// words.
fn is_separator(c: char) -> bool {
    c.is_whitespace() || ";|&()<>'\"`=,[]:".contains(c)
}

/// A word with one of these is a pattern, a variable or an escape, not a path a file system
/// lookup can decide.
fn is_pattern(word: &str) -> bool {
    word.contains(['*', '?', '$', '\\', '^', '%', '{', '}'])
}

/// The word's text up to a comment: `#` at the start of a word (shell, YAML, TOML) ends the
/// line.
fn without_comment(line: &str) -> &str {
    let mut prev_blank = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_blank {
            return &line[..i];
        }
        prev_blank = c.is_whitespace();
    }
    line
}

fn is_name(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= 255
        && word != "."
        && word != ".."
        && !word.starts_with('-')
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._+@-".contains(c))
}

/// Reads `text` for paths, file names, options and runners (see [`Words`]), each once, in the
/// order first met.
pub fn words(text: &str) -> Words {
    let mut out = Words::default();
    for line in text.lines() {
        let line = without_comment(line);
        for chunk in line.split_whitespace() {
            option(chunk, &mut out.options);
        }
        for segment in line.split(|c| ";|&(){}`".contains(c)) {
            run_position(segment, &mut out);
        }
        // A `PATH=` list names directories to search, not files to run (husky's
        // `export PATH="node_modules/.bin:$PATH"`): the commands found there are the caller's
        // to watch.
        let path_list = line.contains("PATH=");
        for word in line.split(is_separator).filter(|w| !w.is_empty()) {
            // `!cmd` is how git config spells a shell alias or helper; a sentence's full stop
            // is not part of a file name.
            let word = word.trim_start_matches('!').trim_end_matches('.');
            if word.is_empty() || is_pattern(word) {
                continue;
            }
            let base = word.rsplit('/').next().unwrap_or(word);
            if let Some(r) = runner(base) {
                if !out.runners.contains(&r) {
                    out.runners.push(r);
                }
            }
            if word.contains('/') {
                if !path_list && !word.contains("//") && !out.paths.iter().any(|p| p == word) {
                    out.paths.push(word.to_string());
                }
            } else if is_name(word) && !out.names.iter().any(|n| n == word) {
                out.names.push(word.to_string());
            }
        }
    }
    out
}

/// The command of one shell segment (a name, or a path it runs), and the script an
/// interpreter there is given.
fn run_position(segment: &str, out: &mut Words) {
    let mut words = segment
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '"' || c == '\'' || c == '!'))
        // Keywords and assignments, and a YAML or JSON key (`run:`, `entry:`) or list marker
        // before a command written as a config value.
        .skip_while(|w| KEYWORDS.contains(w) || w.contains('=') || w.ends_with(':') || *w == "-");
    let Some(cmd) = words.next() else {
        return;
    };
    let mut push_run = |w: &str| {
        if w.contains('/') && !is_pattern(w) && !out.run_paths.iter().any(|p| p == w) {
            out.run_paths.push(w.to_string());
        }
    };
    push_run(cmd);
    let base = cmd.rsplit('/').next().unwrap_or(cmd);
    if INTERPRETERS.contains(&base) {
        if let Some(script) = words.find(|w| !w.starts_with('-')) {
            push_run(script);
        }
    }
    if is_name(cmd) && !out.commands.iter().any(|c| c == cmd) {
        out.commands.push(cmd.to_string());
    }
}

/// `--name=value` (quotes and a closing bracket around the value taken off).
fn option(chunk: &str, options: &mut Vec<(String, String)>) {
    let Some(rest) = chunk.strip_prefix("--") else {
        return;
    };
    let Some((name, value)) = rest.split_once('=') else {
        return;
    };
    let value = value.trim_matches(|c| "'\"()".contains(c));
    if name.is_empty() || value.is_empty() {
        return;
    }
    let pair = (format!("--{name}"), value.to_string());
    if !options.contains(&pair) {
        options.push(pair);
    }
}
