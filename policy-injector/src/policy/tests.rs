use super::*;

#[test]
fn default_equals_embedded_text() {
    assert_eq!(
        Policy::from_toml_str(DEFAULT_POLICY_TOML).unwrap(),
        Policy::default()
    );
}

#[test]
fn empty_file_is_the_default() {
    assert_eq!(Policy::from_toml_str("").unwrap(), Policy::default());
}

#[test]
fn to_toml_string_round_trips() {
    let mut p = Policy {
        mode: Mode::Audit,
        ..Policy::default()
    };
    p.runsc.extra_flags.insert("fdlimit".into(), "4096".into());
    p.capabilities.allow = vec!["CAP_NET_BIND_SERVICE".into()];
    assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
    assert_eq!(
        Policy::from_toml_str(&Policy::default().to_toml_string()).unwrap(),
        Policy::default()
    );
}

fn err(src: &str) -> PolicyError {
    Policy::from_toml_str(src).expect_err("expected a policy error")
}

#[test]
fn a_file_may_set_only_what_it_changes() {
    let p = Policy::from_toml_str("[resources]\nmemory = \"512Mi\"\n").unwrap();
    assert_eq!(p.resources.memory.0, 512 << 20);
    assert_eq!(p.resources.cpu, Policy::default().resources.cpu);
    assert_eq!(p.mounts, Policy::default().mounts);
}

#[test]
fn unknown_keys_are_errors_naming_key_and_line() {
    let e = err("version = 1\n\n[root]\nreadonly = true\nread_only = false\n");
    let PolicyError::Parse {
        line, key, message, ..
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*line, Some(5));
    assert_eq!(key.as_deref(), Some("root.read_only"));
    assert!(message.contains("read_only"), "{message}");
    let e = err("colour = \"blue\"\n");
    assert!(
        e.to_string().contains("colour") && e.to_string().contains("line 1"),
        "{e}"
    );
}

#[test]
fn bad_units_name_the_key_and_line() {
    for (src, key, line) in [
        ("[resources]\nmemory = \"2Gb\"\n", "resources.memory", 2),
        ("[resources]\ncpu = \"-1\"\n", "resources.cpu", 2),
        (
            "\n[lifetime]\nmax_runtime = \"1d\"\n",
            "lifetime.max_runtime",
            3,
        ),
        ("[rlimits]\nfsize = \"9999999Ei\"\n", "rlimits.fsize", 2),
        (
            "[[scratch.tmpfs]]\npath = \"/tmp\"\nsize = \"1Xi\"\n",
            "scratch.tmpfs[0].size",
            3,
        ),
    ] {
        let e = err(src);
        let text = e.to_string();
        assert!(text.contains(key), "{src:?}: {text}");
        assert!(text.contains(&format!("line {line}")), "{src:?}: {text}");
        assert!(!text.contains('\n'), "one line: {text}");
    }
}

#[test]
fn wrong_types_and_enum_values_are_errors() {
    for src in [
        "mode = \"permissive\"\n",
        "[network]\nmode = \"bridge\"\n",
        "[environment]\naction = \"delete\"\n",
        "[root]\nreadonly = \"yes\"\n",
        "[user]\nuid = -1\n",
        "version = 2\n",
        "[resources]\nprocesses = 1.5\n",
    ] {
        assert!(Policy::from_toml_str(src).is_err(), "{src}");
    }
}

#[test]
fn semantic_errors_name_key_and_line() {
    for (src, key, line) in [
        ("[user]\nuid = 0\n", "user.uid", 2),
        ("[resources]\nmemory = \"0\"\n", "resources.memory", 2),
        ("[resources]\nprocesses = 0\n", "resources.processes", 2),
        (
            "[lifetime]\nmax_runtime = \"0s\"\n",
            "lifetime.max_runtime",
            2,
        ),
        (
            "[capabilities]\nallow = [\"NET_ADMIN\"]\n",
            "capabilities.allow[0]",
            2,
        ),
        ("[runsc]\nplatform = \"gvisor\"\n", "runsc.platform", 2),
        (
            "[runsc.extra_flags]\nnet-raw = true\n",
            "runsc.extra_flags.net-raw",
            2,
        ),
        (
            "[runsc.extra_flags]\nallow-flag-override = true\n",
            "runsc.extra_flags.allow-flag-override",
            2,
        ),
        (
            "[runsc.extra_flags]\nTESTONLY-unsafe = \"x\"\n",
            "runsc.extra_flags.TESTONLY-unsafe",
            2,
        ),
        (
            "[runsc.extra_flags]\nmade-up = \"x\"\n",
            "runsc.extra_flags.made-up",
            2,
        ),
        (
            "[runsc.extra_flags]\nfdlimit = \"lots\"\n",
            "runsc.extra_flags.fdlimit",
            2,
        ),
        (
            "[runsc.extra_flags]\nfile-access = \"sometimes\"\n",
            "runsc.extra_flags.file-access",
            2,
        ),
        (
            "[annotations]\nstrip_prefixes = [\"io.\"]\n",
            "annotations.strip_prefixes",
            2,
        ),
        (
            "[mounts]\ndenied_sources = [\"etc/**\"]\n",
            "mounts.denied_sources[0]",
            2,
        ),
        (
            "[namespaces]\nreject_host = [\"net\"]\n",
            "namespaces.reject_host[0]",
            2,
        ),
        ("[seccomp]\ndeny = [\"clone\"]\n", "seccomp.deny[0]", 2),
        (
            "[[scratch.tmpfs]]\npath = \"/tmp/../etc\"\nsize = \"1Mi\"\n",
            "scratch.tmpfs[0].path",
            2,
        ),
    ] {
        let text = err(src).to_string();
        assert!(text.contains(key), "{src:?}: {text}");
        assert!(text.contains(&format!("line {line}")), "{src:?}: {text}");
    }
}

#[test]
fn contradictions_name_both_keys() {
    for (src, keys) in [
        (
            "[seccomp]\ninject_default = false\noverride_spec = true\n",
            ["seccomp.override_spec", "seccomp.inject_default"],
        ),
        (
            "[root]\nreadonly = false\n[runsc]\noverlay = \"none\"\n",
            ["runsc.overlay", "root.readonly"],
        ),
        (
            "[resources]\nprocesses = 9223372036854775807\n",
            ["resources.processes", "resources.pids_per_process"],
        ),
        (
            "[annotations]\nstrip_prefixes = [\"dev.gvisor.\", \"gvisor-hardened.\"]\n",
            ["annotations.strip_prefixes[1]", "resources.processes"],
        ),
    ] {
        let e = err(src);
        assert!(
            matches!(e, PolicyError::Contradiction { .. }),
            "{src}: {e:?}"
        );
        let text = e.to_string();
        for k in keys {
            assert!(text.contains(k), "{src}: {text}");
        }
    }
}

#[test]
fn extra_flags_accept_strings_bools_and_integers() {
    let p = Policy::from_toml_str(
        "[runsc.extra_flags]\nfdlimit = 4096\ngso = false\nfile-access = \"shared\"\n",
    )
    .unwrap();
    assert_eq!(p.runsc.extra_flags["fdlimit"], "4096");
    assert_eq!(p.runsc.extra_flags["gso"], "false");
    assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
}

#[test]
fn a_policy_built_in_code_can_be_validated() {
    let mut p = Policy::default();
    assert!(p.validate().is_ok());
    p.user.gid = 0;
    assert!(
        matches!(p.validate(), Err(PolicyError::Invalid { key, line: None, .. }) if key == "user.gid")
    );
}

#[test]
fn audit_rotation_and_signing_key_are_read_strictly() {
    let p = Policy::from_toml_str(
        "[audit]\nmax_size = \"1Gi\"\nkeep = 3\nsigning_key = \"/etc/gvisor-hardened/audit.key\"\n",
    )
    .unwrap();
    assert_eq!(p.audit.max_size.0, 1 << 30);
    assert_eq!(p.audit.keep, 3);
    assert_eq!(p.audit.signing_key, "/etc/gvisor-hardened/audit.key");
    assert_eq!(Policy::default().audit.max_size.0, 100 << 20);
    assert_eq!(Policy::default().audit.keep, 10);
    assert!(Policy::default().audit.signing_key.is_empty());
    for (src, key) in [
        ("[audit]\nkeep = 0\n", "audit.keep"),
        ("[audit]\nkeep = 1001\n", "audit.keep"),
        ("[audit]\nkeep = -1\n", "audit.keep"),
        ("[audit]\nmax_size = \"1Ki\"\n", "audit.max_size"),
        ("[audit]\nmax_size = \"lots\"\n", "audit.max_size"),
        (
            "[audit]\nsigning_key = \"audit.key\"\n",
            "audit.signing_key",
        ),
        ("[audit]\nsigning-key = \"/k\"\n", "signing-key"),
    ] {
        let e = err(src).to_string();
        assert!(e.contains(key), "{src}: {e}");
    }
}

#[test]
fn every_shipped_preset_loads_strictly() {
    for (name, text) in crate::PRESETS {
        if let Err(e) = Policy::from_toml_str(text) {
            panic!("preset {name}: {e}");
        }
    }
}

#[test]
fn evidence_settings_parse_and_round_trip() {
    let p = Policy::from_toml_str(
        "[lifetime]\nidle_timeout = \"2m\"\n\n[audit.artifacts]\nmax_files = 10\nmax_hashed_bytes = \"1Mi\"\nmax_walk_time = \"1s\"\n\n[output]\nmax_bytes = \"16Mi\"\n",
    )
    .unwrap();
    assert_eq!(
        p.lifetime.idle_timeout.map(|d| d.0),
        Some(std::time::Duration::from_secs(120))
    );
    assert_eq!(p.audit.artifacts.max_files, 10);
    assert_eq!(p.audit.artifacts.max_hashed_bytes.0, 1 << 20);
    assert!(p.audit.artifacts.enabled);
    assert_eq!(p.output.max_bytes.map(|b| b.0), Some(16 << 20));
    assert_eq!(Policy::from_toml_str(&p.to_toml_string()).unwrap(), p);
}

#[test]
fn output_bound_and_idle_timeout_are_off_by_default() {
    let p = Policy::default();
    assert_eq!(p.output.max_bytes, None);
    assert_eq!(p.lifetime.idle_timeout, None);
}

#[test]
fn bad_evidence_settings_name_key_and_line() {
    for (src, key, line) in [
        (
            "[audit.artifacts]\nmax_files = 0\n",
            "audit.artifacts.max_files",
            2,
        ),
        (
            "[audit.artifacts]\n\nmax_files = 99999999\n",
            "audit.artifacts.max_files",
            3,
        ),
        (
            "[audit.artifacts]\nmax_walk_time = \"0s\"\n",
            "audit.artifacts.max_walk_time",
            2,
        ),
        (
            "[audit.artifacts]\nmax_walk_time = \"1h\"\n",
            "audit.artifacts.max_walk_time",
            2,
        ),
        (
            "[audit.artifacts]\nmax_hashed_bytes = \"1Zi\"\n",
            "audit.artifacts.max_hashed_bytes",
            2,
        ),
        (
            "[audit.artifacts]\nmax_file = 3\n",
            "audit.artifacts.max_file",
            2,
        ),
        ("[output]\nmax_bytes = \"0\"\n", "output.max_bytes", 2),
        ("[output]\nmax_bytes = \"lots\"\n", "output.max_bytes", 2),
        (
            "[lifetime]\nidle_timeout = \"1s\"\n",
            "lifetime.idle_timeout",
            2,
        ),
        (
            "[lifetime]\nidle_timeout = \"soon\"\n",
            "lifetime.idle_timeout",
            2,
        ),
    ] {
        let text = err(src).to_string();
        assert!(text.contains(key), "{src:?}: {text}");
        assert!(text.contains(&format!("line {line}")), "{src:?}: {text}");
    }
}

#[test]
fn token_volume_settings_load_and_the_kubelet_root_must_be_absolute() {
    let p = Policy::from_toml_str(
        "[mounts]\ntoken_volumes = \"reject\"\nkubelet_root = \"/srv/kubelet\"\n",
    )
    .unwrap();
    assert_eq!(p.mounts.token_volumes, TokenVolumeAction::Reject);
    assert_eq!(p.mounts.kubelet_root, "/srv/kubelet");
    let e = err("[mounts]\nkubelet_root = \"var/lib/kubelet\"\n");
    assert!(e.to_string().contains("mounts.kubelet_root"), "{e}");
    let e = err("[mounts]\ntoken_volumes = \"keep\"\n");
    assert!(e.to_string().contains("token_volumes"), "{e}");
}

#[test]
fn nr_inodes_in_scratch_options_is_refused_because_runsc_ignores_it() {
    for opt in ["nr_inodes=1000", "nr_blocks=10"] {
        let src =
            format!("[[scratch.tmpfs]]\npath = \"/tmp\"\nsize = \"1Mi\"\noptions = [\"{opt}\"]\n");
        let text = err(&src).to_string();
        assert!(text.contains("scratch.tmpfs[0].options"), "{text}");
        assert!(text.contains("runsc ignores it"), "{text}");
        assert!(text.contains("line 4"), "{text}");
    }
}

#[test]
fn the_coding_agent_preset_is_the_recipe_plus_protected_and_masked_paths() {
    let p = Policy::from_toml_str(crate::preset("coding-agent").unwrap()).unwrap();
    assert_eq!(p.resources.memory.0, 16 << 30);
    assert_eq!(p.resources.cpu.0, 8000);
    assert!(p.resources.processes >= 256);
    assert_eq!((p.user.uid, p.user.gid), (1000, 1000));
    let scratch: Vec<&str> = p.scratch.tmpfs.iter().map(|t| t.path.as_str()).collect();
    for path in [
        "/tmp",
        "/home/agent/.cache",
        "/home/agent/.config",
        "/home/agent/.local/state",
    ] {
        assert!(scratch.contains(&path), "{path} missing from {scratch:?}");
    }
    let noexec = |path: &str| {
        p.scratch
            .tmpfs
            .iter()
            .find(|t| t.path == path)
            .unwrap()
            .options
            .contains(&"noexec".to_string())
    };
    assert!(
        !noexec("/tmp") && !noexec("/home/agent/go"),
        "builds run from /tmp and the build cache"
    );
    assert!(noexec("/home/agent/.cache") && noexec("/home/agent/.config"));
    assert!(p.mounts.workspace.git);
    assert_eq!(
        p.mounts.workspace.at_exit,
        crate::policy::WorkspaceExitAction::Quarantine
    );
    assert!(p.mounts.protect.contains(&".envrc".to_string()));
    assert_eq!(p.environment.defaults["HOME"], "/home/agent");
    assert!(p.environment.defaults.contains_key("GIT_CONFIG_GLOBAL"));
    assert!(p.mounts.mask.contains(&"**/.env".to_string()));
    // Secrets in a home directory stay out even though project roots under /home are open.
    assert!(p
        .mounts
        .denied_sources
        .contains(&"/home/*/.ssh/**".to_string()));
}

#[test]
fn protected_paths_inside_git_directories_are_refused_while_git_protection_is_on() {
    let e = err("[mounts]\nprotect = [\".git/config\"]\n");
    assert!(e.to_string().contains("mounts.protect[0]"), "{e}");
    assert!(e.to_string().contains("[mounts.workspace]"), "{e}");
    let e = err("[mounts]\nmask = [\"**/.git/hooks\"]\n");
    assert!(e.to_string().contains("mounts.mask[0]"), "{e}");
    let p = Policy::from_toml_str(
        "[mounts]\nprotect = [\".git/hooks\"]\n[mounts.workspace]\ngit = false\n",
    )
    .unwrap();
    assert!(!p.mounts.workspace.git);
}

#[test]
fn workspace_bounds_are_checked() {
    for (src, key) in [
        (
            "[mounts.workspace]\nmax_repositories = 0\n",
            "max_repositories",
        ),
        ("[mounts.workspace]\nmax_dirs = 0\n", "max_dirs"),
        ("[mounts.workspace]\nmax_copy = \"0\"\n", "max_copy"),
        ("[mounts.workspace]\nat_exit = \"delete\"\n", "at_exit"),
    ] {
        let e = err(src);
        assert!(e.to_string().contains(key), "{src}: {e}");
    }
}

#[test]
fn environment_defaults_load_and_secret_names_are_refused() {
    let p = Policy::from_toml_str("[environment]\ndefaults = { HOME = \"/home/a\" }\n").unwrap();
    assert_eq!(p.environment.defaults["HOME"], "/home/a");
    let e = err("[environment]\ndefaults = { GITHUB_TOKEN = \"x\" }\n");
    assert!(e.to_string().contains("secret pattern"), "{e}");
}

#[test]
fn protect_and_mask_patterns_are_checked() {
    for (src, key) in [
        ("[mounts]\nprotect = [\"/abs/path\"]\n", "mounts.protect[0]"),
        ("[mounts]\nmask = [\"a/../b\"]\n", "mounts.mask[0]"),
        ("[mounts]\nmask = [\".env\", \".env\"]\n", "mounts.mask"),
    ] {
        let e = err(src);
        assert!(e.to_string().contains(key), "{src}: {e}");
    }
}
