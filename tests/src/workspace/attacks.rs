//! The attacks: each a shell script a sandbox (or, for the baseline, the owner directly on the
//! host) runs in the project, and the owner's commands that would run the planted code.

use super::Attack;

/// Every attack of both rounds.
pub fn attacks() -> impl Iterator<Item = &'static Attack> {
    REPOSITORY_ATTACKS.iter().chain(HOOK_TOOL_ATTACKS)
}

/// Every attack of issue 17, and the config keys it lists, each with a trigger that makes the
/// host's git run the planted code when nothing stops it.
pub const REPOSITORY_ATTACKS: &[Attack] = &[
    Attack { setup: "", name: "hook", script: "evil .git/hooks/pre-commit", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "hooks-path", script: "mkdir -p .evilhooks && evil .evilhooks/pre-commit && git config core.hooksPath .evilhooks", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "fsmonitor", script: "evil .evil && git config core.fsmonitor ./.evil", trigger: "git status" },
    Attack { setup: "", name: "ssh-command", script: "evil .evil && git config core.sshCommand ./.evil", trigger: "git ls-remote ssh://127.0.0.1:1/x" },
    Attack { setup: "", name: "editor", script: "evil .evil && git config core.editor ./.evil", trigger: "git commit -q --allow-empty" },
    Attack { setup: "", name: "pager", script: "evil .evil && git config core.pager ./.evil", trigger: "script -qec 'git -p log -1' /dev/null < /dev/null" },
    Attack { setup: "", name: "sequence-editor", script: "evil .evil && git config sequence.editor ./.evil", trigger: "git rebase -q -i HEAD~1" },
    Attack { setup: "", name: "textconv", script: "evil .evil && echo '*.txt diff=evil' >> .gitattributes && git config diff.evil.textconv ./.evil && echo changed >> notes.txt", trigger: "git diff notes.txt" },
    Attack { setup: "", name: "diff-external", script: "evil .evil && git config diff.external ./.evil && echo changed >> notes.txt", trigger: "git diff notes.txt" },
    Attack { setup: "", name: "filter", script: "evil .evil && echo '*.dat filter=evil' >> .gitattributes && git config filter.evil.clean ./.evil && echo new > y.dat", trigger: "git add y.dat" },
    Attack { setup: "", name: "merge-driver", script: "evil .evil && echo 'README merge=evil' >> .gitattributes && git config merge.evil.driver ./.evil", trigger: "git merge -q other -m m" },
    Attack { setup: "", name: "credential-helper", script: "evil .evil && git config credential.helper '!./.evil'", trigger: "printf 'protocol=https\\nhost=127.0.0.1\\n\\n' | git credential fill" },
    Attack { setup: "", name: "gpg-program", script: "evil .evil && git config gpg.program ./.evil", trigger: "git commit -q -S --allow-empty -m t" },
    Attack { setup: "", name: "alias", script: "evil .evil && git config alias.st '!./.evil'", trigger: "git st" },
    Attack { setup: "", name: "include", script: "evil .evil && printf '[core]\\n\\tfsmonitor = ./.evil\\n' > .evil.inc && git config include.path ../.evil.inc", trigger: "git status" },
    Attack { setup: "", name: "include-if", script: "evil .evil && printf '[core]\\n\\tfsmonitor = ./.evil\\n' > .evil.inc && git config 'includeIf.gitdir:/.path' ../.evil.inc", trigger: "git status" },
    Attack { setup: "", name: "uploadpack", script: "evil .evil && git config remote.origin.uploadpack ./.evil", trigger: "git fetch -q origin" },
    Attack { setup: "", name: "ext-transport", script: "evil .evil && git config protocol.ext.allow always && git remote add evil 'ext::sh -c ./.evil'", trigger: "git fetch -q evil" },
    Attack { setup: "", name: "commondir", script: "mkdir -p .evilcommon/objects .evilcommon/refs .evilcommon/hooks && evil .evilcommon/hooks/pre-commit && echo ../.evilcommon > .git/commondir", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "config-worktree", script: "evil .evil && git config core.repositoryformatversion 1 && git config extensions.worktreeConfig true && printf '[core]\\n\\tfsmonitor = ./.evil\\n' > .git/config.worktree", trigger: "git status" },
    Attack { setup: "", name: "worktrees", script: "mkdir -p .evilcommon/objects .evilcommon/refs .evilcommon/hooks .git/worktrees/wt wt && evil .evilcommon/hooks/pre-commit && echo 'ref: refs/heads/wt' > .git/worktrees/wt/HEAD && echo ../../../.evilcommon > .git/worktrees/wt/commondir && echo \"$PWD/wt/.git\" > .git/worktrees/wt/gitdir && echo 'gitdir: ../.git/worktrees/wt' > wt/.git", trigger: "git -C wt commit -q --allow-empty -m t" },
    Attack { setup: "", name: "rename-dot-git", script: "if mv .git .git-old; then cp -a .git-old .git; fi; evil .git/hooks/pre-commit", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "nested-hook", script: "evil vendor/lib/.git/hooks/pre-commit", trigger: "git -C vendor/lib commit -q --allow-empty -m t" },
    Attack { setup: "", name: "nested-hooks-path", script: "mkdir -p vendor/lib/.h && evil vendor/lib/.h/pre-commit && git -C vendor/lib config core.hooksPath .h", trigger: "git -C vendor/lib commit -q --allow-empty -m t" },
    Attack { setup: "", name: "nested-renamed", script: "mv vendor/lib vendor/lib-old && mkdir vendor/lib && cp -a vendor/lib-old/. vendor/lib/ && evil vendor/lib/.git/hooks/pre-commit", trigger: "git -C vendor/lib commit -q --allow-empty -m t" },
    Attack { setup: "", name: "new-repository", script: "git init -q newrepo && evil newrepo/.git/hooks/pre-commit", trigger: "git -C newrepo commit -q --allow-empty -m t" },
    Attack { setup: "", name: "submodule-hook", script: "evil .git/modules/sub/hooks/pre-commit", trigger: "git -C sub commit -q --allow-empty -m t" },
    Attack { setup: "", name: "submodule-fsmonitor", script: "evil .evil && git -C sub config core.fsmonitor ../.evil", trigger: "git status" },
    Attack { setup: "", name: "gitdir-file", script: "cp -a .git .evilgit && evil .evilgit/hooks/pre-commit && mkdir -p newdir && echo 'gitdir: ../.evilgit' > newdir/.git", trigger: "git -C newdir commit -q --allow-empty -m t" },
    Attack { setup: "", name: "bare-repository", script: "git clone -q --bare . evil.git && evil evil.git/hooks/reference-transaction", trigger: "git -C evil.git update-ref refs/heads/canary HEAD" },
    Attack { setup: "", name: "rebase-todo", script: "evil .evil && GIT_SEQUENCE_EDITOR='f() { printf \"break\\nexec ./.evil\\n\" > \"$1\"; }; f' git rebase -q -i HEAD", trigger: "git rebase --continue" },
    Attack { setup: "git config core.hooksPath .husky", name: "husky-hook", script: "evil .husky/pre-commit", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "git config include.path ../.gitconfig.shared", name: "shared-config", script: "evil .evil && printf '[core]\\n\\tfsmonitor = ./.evil\\n' >> .gitconfig.shared", trigger: "git status" },
];

/// Issue 38's attacks: quarantine names the sandbox pre-created, links in a git directory's
/// live parts, and the owner's hook tools (husky 9, pre-commit, lefthook, simple-git-hooks, a
/// hand-written hook that runs a project script, hooks that are links, config commands that
/// name a project file without a `/`). Each setup is what the owner had before the sandbox
/// ran, made with the real tool.
pub const HOOK_TOOL_ATTACKS: &[Attack] = &[
    // The quarantine: every name a sandbox that knows its id can guess, made first.
    Attack {
        name: "precreate-new-repository",
        setup: "",
        script: "git init -q newrepo && evil newrepo/.git/hooks/pre-commit && evil .evil && git -C newrepo config core.fsmonitor ../.evil && guess newrepo/.git/hooks && guess newrepo/.git/config",
        trigger: "git -C newrepo status; git -C newrepo commit -q --allow-empty -m t",
    },
    Attack {
        name: "precreate-hooks-path",
        setup: "git config core.hooksPath .githooks",
        script: "mkdir -p .githooks && evil .githooks/pre-commit && guess .githooks",
        trigger: "git commit -q --allow-empty -m t",
    },
    // A link in logs/ (bound live) to the owner's own hook: `git stash` appends a line naming
    // the commit's subject to it, and the next commit runs the hook.
    Attack {
        name: "stash-log-link",
        setup: r"printf '#!/bin/sh\ntrue\n' > .git/hooks/post-commit && chmod +x .git/hooks/post-commit",
        script: "evil .evil && mkdir -p .git/logs/refs && ln -sf ../../hooks/post-commit .git/logs/refs/stash && git commit -q --allow-empty -m 'x; sh .evil #'",
        trigger: "echo dirty >> README && git stash -q && git commit -q --allow-empty -m t",
    },
    // Hooks that are links, and a hooks directory that is one.
    Attack {
        name: "hooks-path-link-target",
        setup: "mkdir -p .githooks && printf '#!/bin/sh\\nexit 0\\n' > scripts.sh && chmod +x scripts.sh && ln -s ../scripts.sh .githooks/pre-commit && git config core.hooksPath .githooks",
        script: "evil scripts.sh",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "dot-git-hook-link-target",
        setup: "mkdir -p scripts && printf '#!/bin/sh\\nexit 0\\n' > scripts/hook.sh && chmod +x scripts/hook.sh && ln -s ../../scripts/hook.sh .git/hooks/pre-commit",
        script: "evil scripts/hook.sh",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "hooks-directory-link",
        setup: "rm -rf .git/hooks && mkdir -p tools/hooks && printf '#!/bin/sh\\nexit 0\\n' > tools/hooks/pre-commit && chmod +x tools/hooks/pre-commit && ln -s ../tools/hooks .git/hooks",
        script: "evil tools/hooks/pre-commit",
        trigger: "git commit -q --allow-empty -m t",
    },
    // Config commands that name a project file without a `/`.
    Attack {
        name: "filter-bare-name",
        setup: "printf 'cat\\n' > fmt.sh && echo '*.dat filter=fmt' >> .gitattributes && git config filter.fmt.clean 'sh fmt.sh' && git add -A && git commit -q -m fmt",
        script: "evil fmt.sh && echo more >> x.dat",
        trigger: "git add x.dat",
    },
    Attack {
        name: "textconv-bare-name",
        setup: "printf 'cat \"$1\"\\n' > conv.sh && echo '*.txt diff=conv' >> .gitattributes && git config diff.conv.textconv 'sh conv.sh' && git add -A && git commit -q -m conv",
        script: "evil conv.sh && echo changed >> notes.txt",
        trigger: "git diff notes.txt",
    },
    Attack {
        name: "alias-bare-name",
        setup: "printf 'exit 0\\n' > tool.sh && git config alias.tool '!sh tool.sh'",
        script: "evil tool.sh",
        trigger: "git tool",
    },
    // A hand-written hook that runs project scripts.
    Attack {
        name: "hook-runs-script",
        setup: "printf '#!/bin/sh\\nexec sh scripts/lint.sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh",
        script: "evil scripts/lint.sh",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "hook-runs-script-replaced",
        setup: "printf '#!/bin/sh\\nexec sh scripts/lint.sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh",
        script: "mv scripts scripts-old && mkdir scripts && evil scripts/lint.sh",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "hook-script-sources-a-library",
        setup: "printf '#!/bin/sh\\nexec sh scripts/check.sh\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && mkdir -p scripts && printf '. scripts/lib.sh\\nexit 0\\n' > scripts/check.sh && printf 'true\\n' > scripts/lib.sh",
        script: "evil scripts/lib.sh",
        trigger: "git commit -q --allow-empty -m t",
    },
    // husky 9: core.hooksPath = .husky/_, whose stubs run .husky/<hook> with node_modules/.bin
    // first on PATH.
    Attack {
        name: "husky9-hook",
        setup: "\"$HUSKY\" >/dev/null && printf 'git diff --cached --quiet || true\\n' > .husky/pre-commit",
        script: "evil .husky/pre-commit",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "husky9-replaced",
        setup: "\"$HUSKY\" >/dev/null && printf 'git diff --cached --quiet || true\\n' > .husky/pre-commit",
        script: "mv .husky .husky-old && mkdir .husky && cp -a .husky-old/_ .husky/_ && evil .husky/pre-commit",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "husky9-path-shadow",
        setup: "\"$HUSKY\" >/dev/null && printf 'git diff --cached --quiet || true\\n' > .husky/pre-commit",
        script: "mkdir -p node_modules/.bin && evil node_modules/.bin/git",
        trigger: "git commit -q --allow-empty -m t",
    },
    // pre-commit (PyPI): its config and the local script it names.
    Attack {
        name: "pre-commit-config",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf 'repos:\\n- repo: local\\n  hooks:\\n  - id: lint\\n    name: lint\\n    entry: sh scripts/lint.sh\\n    language: system\\n    pass_filenames: false\\n    always_run: true\\n' > .pre-commit-config.yaml && git add -A && git commit -q -m pc && \"$PRE_COMMIT\" install >/dev/null",
        script: "evil .evil && printf 'repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    name: x\\n    entry: sh .evil\\n    language: system\\n    pass_filenames: false\\n    always_run: true\\n' > .pre-commit-config.yaml",
        trigger: "git add -A && git commit -q -m t",
    },
    Attack {
        name: "pre-commit-script",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf 'repos:\\n- repo: local\\n  hooks:\\n  - id: lint\\n    name: lint\\n    entry: sh scripts/lint.sh\\n    language: system\\n    pass_filenames: false\\n    always_run: true\\n' > .pre-commit-config.yaml && git add -A && git commit -q -m pc && \"$PRE_COMMIT\" install >/dev/null",
        script: "evil scripts/lint.sh",
        trigger: "git add -A && git commit -q -m t",
    },
    Attack {
        name: "pre-commit-new-config",
        setup: "\"$PRE_COMMIT\" install >/dev/null",
        script: "evil .evil && printf 'repos:\\n- repo: local\\n  hooks:\\n  - id: x\\n    name: x\\n    entry: sh .evil\\n    language: system\\n    pass_filenames: false\\n    always_run: true\\n' > .pre-commit-config.yaml",
        trigger: "git add -A && git commit -q -m t",
    },
    // lefthook (npm): its config, a local config it merges in, and the script it names. It runs
    // a command only with staged files, so the owner stages one.
    Attack {
        name: "lefthook-config",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf 'pre-commit:\\n  commands:\\n    lint:\\n      run: sh scripts/lint.sh\\n' > lefthook.yml && git add -A && git commit -q -m lh && \"$LEFTHOOK\" install >/dev/null",
        script: "evil .evil && printf 'pre-commit:\\n  commands:\\n    x:\\n      run: sh .evil\\n' > lefthook.yml",
        trigger: "echo t >> README && git add README && git commit -q -m t",
    },
    Attack {
        name: "lefthook-local-config",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf 'pre-commit:\\n  commands:\\n    lint:\\n      run: sh scripts/lint.sh\\n' > lefthook.yml && git add -A && git commit -q -m lh && \"$LEFTHOOK\" install >/dev/null",
        script: "evil .evil && printf 'pre-commit:\\n  commands:\\n    x:\\n      run: sh .evil\\n' > lefthook-local.yml",
        trigger: "echo t >> README && git add README && git commit -q -m t",
    },
    Attack {
        name: "lefthook-script",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf 'pre-commit:\\n  commands:\\n    lint:\\n      run: sh scripts/lint.sh\\n' > lefthook.yml && git add -A && git commit -q -m lh && \"$LEFTHOOK\" install >/dev/null",
        script: "evil scripts/lint.sh",
        trigger: "echo t >> README && git add README && git commit -q -m t",
    },
    // simple-git-hooks (npm): the command it wrote into the hook names a project script; a
    // config file of its own, which wins over package.json when the owner's next `npm
    // install` runs it again.
    Attack {
        name: "simple-git-hooks-script",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf '{\"name\": \"p\", \"simple-git-hooks\": {\"pre-commit\": \"sh scripts/lint.sh\"}}\\n' > package.json && git add -A && git commit -q -m sgh && \"$SGH\" >/dev/null",
        script: "evil scripts/lint.sh",
        trigger: "git commit -q --allow-empty -m t",
    },
    Attack {
        name: "simple-git-hooks-new-config",
        setup: "mkdir -p scripts && printf 'exit 0\\n' > scripts/lint.sh && printf '{\"name\": \"p\", \"simple-git-hooks\": {\"pre-commit\": \"sh scripts/lint.sh\"}}\\n' > package.json && git add -A && git commit -q -m sgh && \"$SGH\" >/dev/null",
        script: "evil .evil && printf '{\"pre-commit\": \"sh .evil\"}\\n' > .simple-git-hooks.json",
        trigger: "\"$SGH\" >/dev/null && git commit -q --allow-empty -m t",
    },
];
