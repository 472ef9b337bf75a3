//! The command line against every argv both engines were seen to send.

use super::*;

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

fn p(s: &str) -> Invocation {
    parse(argv(s)).unwrap_or_else(|e| panic!("{s}: {e}"))
}

const DOCKER_G: &str = "--policy=/etc/gvh/p.toml --root /run/docker/runtime-runc/moby --log /b/log.json --log-format json";

fn docker_global() -> Global {
    Global {
        root: Some("/run/docker/runtime-runc/moby".into()),
        log: Some("/b/log.json".into()),
        log_format: LogFormat::Json,
        systemd_cgroup: false,
        policy: Some("/etc/gvh/p.toml".into()),
    }
}

/// Every call the notes saw from Docker 20.10 (G = runtimeArgs + --root/--log/--log-format).
#[test]
fn every_docker_call_parses() {
    let cases: Vec<(&str, Command)> = vec![
        (
            "create --bundle /b --pid-file /b/init.pid c1",
            Command::Create {
                id: "c1".into(),
                bundle: "/b".into(),
                pid_file: Some("/b/init.pid".into()),
                console_socket: None,
                preserve_fds: 0,
            },
        ),
        (
            "create --bundle /b --pid-file /b/init.pid --console-socket /tmp/pty.sock c1",
            Command::Create {
                id: "c1".into(),
                bundle: "/b".into(),
                pid_file: Some("/b/init.pid".into()),
                console_socket: Some("/tmp/pty.sock".into()),
                preserve_fds: 0,
            },
        ),
        ("start c1", Command::Start { id: "c1".into() }),
        (
            "exec --process /tmp/p.json --detach --pid-file /b/e.pid c1",
            Command::Exec {
                id: "c1".into(),
                process: "/tmp/p.json".into(),
                detach: true,
                pid_file: Some("/b/e.pid".into()),
                console_socket: None,
                tty: false,
                preserve_fds: 0,
            },
        ),
        (
            "exec --process /tmp/p.json --detach --pid-file /b/e.pid --console-socket /s c1",
            Command::Exec {
                id: "c1".into(),
                process: "/tmp/p.json".into(),
                detach: true,
                pid_file: Some("/b/e.pid".into()),
                console_socket: Some("/s".into()),
                tty: false,
                preserve_fds: 0,
            },
        ),
        (
            "ps --format json c1",
            Command::Ps {
                id: "c1".into(),
                json: true,
            },
        ),
        ("pause c1", Command::Pause { id: "c1".into() }),
        ("resume c1", Command::Resume { id: "c1".into() }),
        (
            "update --resources - c1",
            Command::Update {
                id: "c1".into(),
                resources: Source::Stdin,
            },
        ),
        (
            "kill c1 9",
            Command::Kill {
                id: "c1".into(),
                signal: 9,
                all: false,
            },
        ),
        (
            "delete c1",
            Command::Delete {
                id: "c1".into(),
                force: false,
            },
        ),
        (
            "delete --force c1",
            Command::Delete {
                id: "c1".into(),
                force: true,
            },
        ),
    ];
    for (sub, want) in cases {
        let got = p(&format!("{DOCKER_G} {sub}"));
        assert_eq!(got.global, docker_global(), "{sub}");
        assert_eq!(got.command, want, "{sub}");
    }
}

/// Every call the notes saw from Podman 4.3 and conmon 2.1.6.
#[test]
fn every_podman_call_parses() {
    let cases: Vec<(&str, Command)> = vec![
        (
            "--log-format=json --log /u/oci-log create --bundle /u --pid-file /r/pidfile c1",
            Command::Create {
                id: "c1".into(),
                bundle: "/u".into(),
                pid_file: Some("/r/pidfile".into()),
                console_socket: None,
                preserve_fds: 0,
            },
        ),
        (
            "--log-format=json --log /u/oci-log create --bundle /u --pid-file /r/pidfile --console-socket /s --preserve-fds 2 c1",
            Command::Create {
                id: "c1".into(),
                bundle: "/u".into(),
                pid_file: Some("/r/pidfile".into()),
                console_socket: Some("/s".into()),
                preserve_fds: 2,
            },
        ),
        ("start c1", Command::Start { id: "c1".into() }),
        (
            "exec --pid-file /e.pid --process /e.json --detach --tty --console-socket /s c1",
            Command::Exec {
                id: "c1".into(),
                process: "/e.json".into(),
                detach: true,
                pid_file: Some("/e.pid".into()),
                console_socket: Some("/s".into()),
                tty: true,
                preserve_fds: 0,
            },
        ),
        (
            "kill c1 15",
            Command::Kill {
                id: "c1".into(),
                signal: 15,
                all: false,
            },
        ),
        (
            "kill --all c1 KILL",
            Command::Kill {
                id: "c1".into(),
                signal: 9,
                all: true,
            },
        ),
        ("pause c1", Command::Pause { id: "c1".into() }),
        ("resume c1", Command::Resume { id: "c1".into() }),
        (
            "update --resources=/u/res.json c1",
            Command::Update {
                id: "c1".into(),
                resources: Source::File("/u/res.json".into()),
            },
        ),
        (
            "delete --force c1",
            Command::Delete {
                id: "c1".into(),
                force: true,
            },
        ),
        ("state c1", Command::State { id: "c1".into() }),
    ];
    for (line, want) in cases {
        assert_eq!(p(line).command, want, "{line}");
    }
    let g = p("--log-format=json --log /u/oci-log start c1").global;
    assert_eq!(
        (g.log_format, g.log),
        (LogFormat::Json, Some("/u/oci-log".into()))
    );
    // --runtime-flag policy=/p.toml becomes --policy=/p.toml.
    assert_eq!(
        p("--policy=/p.toml start c1").global.policy,
        Some("/p.toml".into())
    );
}

#[test]
fn version_and_systemd_cgroup_are_global_flags() {
    assert_eq!(p("--version").command, Command::Version);
    assert_eq!(p("--policy /p -v").command, Command::Version);
    assert!(
        p("--systemd-cgroup create --bundle /b c")
            .global
            .systemd_cgroup
    );
    assert!(!p("--systemd-cgroup=false start c").global.systemd_cgroup);
}

#[test]
fn signals_by_number_and_name() {
    for (s, n) in [
        ("9", 9),
        ("KILL", 9),
        ("SIGTERM", 15),
        ("sigusr1", 10),
        ("WINCH", 28),
    ] {
        assert_eq!(parse_signal(s), Some(n), "{s}");
    }
    for s in ["0", "65", "BOGUS", ""] {
        assert_eq!(parse_signal(s), None, "{s}");
    }
    assert_eq!(
        p("kill c1").command,
        Command::Kill {
            id: "c1".into(),
            signal: 15,
            all: false
        }
    );
}

#[test]
fn bad_command_lines_name_what_is_wrong() {
    for (line, needle) in [
        ("", "no subcommand"),
        ("--root", "needs a value"),
        ("frobnicate c1", "unknown subcommand"),
        ("--rootless true start c1", "--rootless is a runsc flag"),
        ("--no-such-flag start c1", "unknown flag"),
        ("create --bundle /b", "one container id"),
        ("create --bundle /b a b", "one container id"),
        ("kill c1 NOPE", "bad value"),
        ("exec c1 sh", "without --process"),
        ("update --memory 1g c1", "--memory"),
        ("ps --format table c1 -ef", "ps(1) options"),
        ("--log-format yaml start c1", "bad value"),
        ("start --force c1", "unknown flag"),
    ] {
        let err = parse(argv(line)).unwrap_err().to_string();
        assert!(err.contains(needle), "{line:?}: {err}");
    }
}

/// Docker's daemon.json `runtimeArgs` and Podman's `--runtime-flag NAME=VALUE` put runsc flags
/// before the subcommand: each one runsc knows is refused, naming the flag and why, in every
/// spelling, and nothing is parsed (so nothing reaches runsc).
#[test]
fn every_runsc_flag_from_an_engine_is_refused_with_its_reason() {
    use policy_injector::policy::runsc_flags::RUNSC_FLAGS;
    for (flag, _) in RUNSC_FLAGS {
        // runc's own global flags, which the engines always pass: read, never passed to runsc.
        if [
            "root",
            "log",
            "log-format",
            "debug",
            "systemd-cgroup",
            "version",
        ]
        .contains(flag)
        {
            continue;
        }
        for spelling in [
            format!("--{flag}=true create --bundle /b c1"),
            format!("-{flag}=true create --bundle /b c1"),
            format!("--root /run/r --{flag} true start c1"),
        ] {
            let err = parse(argv(&spelling)).unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(&err, CliError::RunscFlag { flag: f, .. } if f == flag),
                "{spelling}: {text}"
            );
            assert!(
                text.contains(&format!("--{flag} is a runsc flag")),
                "{text}"
            );
        }
    }
    let text = parse(argv("--net-raw=true create --bundle /b c1"))
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("raw sockets") && text.contains("[runsc]"),
        "{text}"
    );
    let text = parse(argv("--fdlimit=10 start c1"))
        .unwrap_err()
        .to_string();
    assert!(text.contains("extra_flags"), "{text}");
}

/// Docker's runtime wrapper puts daemon.json `runtimeArgs` first: a refused runsc flag comes
/// before `--log`, and the refusal must still reach the engine's log.
#[test]
fn the_log_flags_are_found_in_a_command_line_that_failed_to_parse() {
    let line = argv("--net-raw=true --root /r --log /run/x/log.json --log-format json create c1");
    assert!(parse(line.clone()).is_err());
    assert_eq!(
        log_flags_of(&line),
        (Some(PathBuf::from("/run/x/log.json")), LogFormat::Json)
    );
    assert_eq!(
        log_flags_of(&argv("-log=/l --host-uds all start c1")),
        (Some(PathBuf::from("/l")), LogFormat::Text)
    );
    assert_eq!(
        log_flags_of(&argv("--net-raw start c1")),
        (None, LogFormat::Text)
    );
    // A trailing --log without its value names nothing.
    assert_eq!(log_flags_of(&argv("start --log")), (None, LogFormat::Text));
}

#[test]
fn double_dash_ends_the_flags() {
    assert_eq!(
        p("delete -- -odd-id").command,
        Command::Delete {
            id: "-odd-id".into(),
            force: false
        }
    );
}
