//! Client tests against fake runsc scripts (argv, output capture, error mapping, timeouts).
//! Tests with the real runsc are in `real_tests.rs`.

use super::*;
use crate::reaper;
use crate::runsc::flags::GlobalFlags;
use std::os::unix::fs::PermissionsExt;

const OLD_FLAGS: &str = include_str!("fixtures/20221219/flags.txt");
const OLD_HELP: &str = include_str!("fixtures/20221219/help.txt");
const NEW_FLAGS: &str = include_str!("fixtures/20260905-160fafc42237/flags.txt");
const NEW_HELP: &str = include_str!("fixtures/20260905-160fafc42237/help.txt");

/// A fake runsc: logs its argv to `args.log`, then runs `body` with `$sub` set to the subcommand
/// (the first argument not starting with `--`).
fn fake(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("runsc");
    let script = format!(
        "#!/bin/sh\necho \"$@\" >> {dir}/args.log\nsub=\nfor a in \"$@\"; do case \"$a\" in --*) ;; *) sub=$a; break;; esac; done\n{body}\n",
        dir = dir.display()
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn client(binary: &Path, features: Features) -> Runsc {
    Runsc::new(
        binary,
        &GlobalFlags::new("/run/test-root"),
        features,
        reaper::shared_for_tests(),
    )
    .unwrap()
}

fn old_features() -> Features {
    Features::parse(OLD_FLAGS, OLD_HELP, "kvm\nptrace\n")
}

fn args_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("args.log")).unwrap()
}

#[tokio::test]
async fn detect_reads_flags_from_stderr_and_help_from_stdout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("flags.txt"), OLD_FLAGS).unwrap();
    std::fs::write(dir.path().join("help.txt"), OLD_HELP).unwrap();
    let bin = fake(
        dir.path(),
        &format!(
            "d={}\ncase \"$sub $2\" in\n'flags '*) cat $d/flags.txt >&2;;\n'help platforms') printf 'kvm\\nptrace\\n';;\n'help '*) cat $d/help.txt;;\nesac",
            dir.path().display()
        ),
    );
    let features = Runsc::detect(&bin, &reaper::shared_for_tests(), DEFAULT_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(features, old_features());
    // Detection runs the binary bare, without global flags (concurrently: order varies).
    let mut calls: Vec<String> = args_log(dir.path()).lines().map(String::from).collect();
    calls.sort();
    assert_eq!(calls, ["flags", "help", "help platforms"]);
}

#[tokio::test]
async fn oci_features_parses_the_document_and_fails_where_runsc_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(
        dir.path(),
        "[ \"$sub\" = features ] && echo '{\"ociVersionMax\":\"1.2.1\"}' && exit 0\necho \"unknown subcommand $sub\" >&2; exit 128",
    );
    let doc = Runsc::oci_features(&bin, &reaper::shared_for_tests(), DEFAULT_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(doc, serde_json::json!({"ociVersionMax": "1.2.1"}));
    assert_eq!(args_log(dir.path()).trim(), "features");

    let old = tempfile::tempdir().unwrap();
    let bin = fake(old.path(), "echo \"unknown subcommand $sub\" >&2; exit 128");
    let err = Runsc::oci_features(&bin, &reaper::shared_for_tests(), DEFAULT_TIMEOUT)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("unknown subcommand features"),
        "{err}"
    );
}

#[tokio::test]
async fn detect_without_a_platforms_topic_falls_back_to_the_flag_help() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("flags.txt"), OLD_FLAGS).unwrap();
    let bin = fake(
        dir.path(),
        &format!(
            "case \"$sub $2\" in\n'flags '*) cat {}/flags.txt >&2;;\n'help platforms') echo 'unknown topic' >&2; exit 2;;\n'help '*) echo;;\nesac",
            dir.path().display()
        ),
    );
    let features = Runsc::detect(&bin, &reaper::shared_for_tests(), DEFAULT_TIMEOUT)
        .await
        .unwrap();
    assert!(features.platforms.contains("ptrace"));
}

#[tokio::test]
async fn state_runs_with_the_global_flags_and_parses_json() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(
        dir.path(),
        r#"echo '{"ociVersion":"1.0.2-dev","id":"c1","status":"running","pid":42,"bundle":"/b"}'"#,
    );
    let state = client(&bin, old_features()).state("c1").await.unwrap();
    assert_eq!(
        state,
        State {
            id: "c1".into(),
            pid: 42,
            status: Status::Running,
            bundle: "/b".into()
        }
    );
    assert_eq!(
        args_log(dir.path()),
        "--root=/run/test-root --platform=ptrace --oci-seccomp --net-raw=false --host-uds=none --host-fifo=none state c1\n"
    );
}

#[tokio::test]
async fn ps_parses_the_pid_list() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), "echo '[1,2,7]'");
    assert_eq!(
        client(&bin, old_features()).ps("c").await.unwrap(),
        [1, 2, 7]
    );
}

#[tokio::test]
async fn garbage_output_is_a_parse_error_naming_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), "echo 'UID PID'");
    match client(&bin, old_features()).ps("c").await {
        Err(RunscError::Parse { output, .. }) => assert_eq!(output, "UID PID\n"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn kill_of_an_exited_sandbox_is_already_gone() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(
        dir.path(),
        "echo 'connecting to control server at PID 99: connection refused' >&2; exit 128",
    );
    let err = client(&bin, old_features())
        .kill("c", 9, true, None)
        .await
        .unwrap_err();
    assert!(matches!(err, RunscError::AlreadyGone { .. }), "{err:?}");
}

#[tokio::test]
async fn failure_carries_subcommand_status_and_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), "echo ' pausing: boom ' >&2; exit 128");
    let err = client(&bin, old_features()).pause("c").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "runsc pause c failed (exit code 128): pausing: boom"
    );
}

#[tokio::test]
async fn a_wedged_runsc_times_out_and_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), "exec sleep 1000");
    let runsc = client(&bin, old_features()).with_timeout(Duration::from_millis(200));
    let err = runsc.state("c").await.unwrap_err();
    assert!(matches!(err, RunscError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn a_helper_holding_stdout_open_does_not_block_the_result() {
    // Like runsc create forking the sandbox with our stdout: output must be collected at exit,
    // not at EOF.
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(
        dir.path(),
        &format!(
            "sleep 1000 & echo $! > {}/helper.pid\necho '[3]'",
            dir.path().display()
        ),
    );
    let pids = client(&bin, old_features()).ps("c").await.unwrap();
    assert_eq!(pids, [3]);
    let helper: i32 = std::fs::read_to_string(dir.path().join("helper.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: the helper is an orphan of ours (subreaper); end it.
    unsafe { libc::kill(helper, libc::SIGKILL) };
}

#[tokio::test]
async fn update_is_unsupported_on_20221219_without_running_runsc() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), "exit 0");
    let err = client(&bin, old_features())
        .update("c", b"{}")
        .await
        .unwrap_err();
    assert!(matches!(err, RunscError::Unsupported("update")));
    assert!(!dir.path().join("args.log").exists());
}

#[tokio::test]
async fn update_sends_the_resources_on_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), &format!("cat > {}/stdin", dir.path().display()));
    let features = Features::parse(NEW_FLAGS, NEW_HELP, "ptrace\nsystrap\n");
    client(&bin, features)
        .update("c", br#"{"pids":{"limit":10}}"#)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("stdin")).unwrap(),
        r#"{"pids":{"limit":10}}"#
    );
    assert!(args_log(dir.path()).ends_with("update --resources=- c\n"));
}

#[tokio::test]
async fn create_hands_the_given_stdio_to_runsc() {
    let dir = tempfile::tempdir().unwrap();
    let bin = fake(dir.path(), "echo out; echo err >&2");
    let (mut out_r, out_w) = std::io::pipe().unwrap();
    let (mut err_r, err_w) = std::io::pipe().unwrap();
    let io = ProcessIo {
        stdin: None,
        stdout: Some(out_w.into()),
        stderr: Some(err_w.into()),
    };
    client(&bin, old_features())
        .create("c", Path::new("/b"), Path::new("/b/pid"), None, io)
        .await
        .unwrap();
    // Our copies of the write ends were closed at spawn: EOF arrives.
    let mut s = String::new();
    out_r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "out\n");
    s.clear();
    err_r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "err\n");
}

#[tokio::test]
async fn create_failure_takes_the_message_from_the_runsc_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("runsc.log");
    // An earlier error in the log must not be reported again.
    std::fs::write(
        &log,
        "{\"msg\":\"old failure\",\"level\":\"error\",\"time\":\"t\"}\n",
    )
    .unwrap();
    let bin = fake(
        dir.path(),
        &format!(
            "echo '{{\"msg\":\"debug noise\",\"level\":\"debug\"}}' >> {log}\necho '{{\"msg\":\"reading spec: SELinux is not supported\",\"level\":\"error\"}}' >> {log}\nexit 128",
            log = log.display()
        ),
    );
    let mut wanted = GlobalFlags::new("/r");
    wanted.log = Some(log.clone());
    let runsc = Runsc::new(&bin, &wanted, old_features(), reaper::shared_for_tests()).unwrap();
    let err = runsc
        .create(
            "c",
            Path::new("/b"),
            Path::new("/p"),
            None,
            ProcessIo::default(),
        )
        .await
        .unwrap_err();
    match err {
        RunscError::Failed { stderr, .. } => {
            assert_eq!(stderr, "reading spec: SELinux is not supported")
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn text_logs_keep_the_last_lines() {
    let text = "a\nb\nc\nd\ne\nf\nfatal: x\n";
    assert_eq!(error_lines(text), "c\nd\ne\nf\nfatal: x");
}

#[test]
fn new_fails_closed_when_the_policy_wants_what_runsc_lacks() {
    let mut wanted = GlobalFlags::new("/r");
    wanted.platform = Some(crate::runsc::flags::Platform::Systrap);
    let err = Runsc::new(
        "/usr/bin/runsc",
        &wanted,
        old_features(),
        reaper::shared_for_tests(),
    )
    .err()
    .unwrap();
    assert!(matches!(err, RunscError::Feature(_)));
}

#[test]
fn pid_files_are_read_and_validated() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("init.pid");
    std::fs::write(&p, "4242").unwrap();
    assert_eq!(read_pid_file(&p).unwrap(), 4242);
    for bad in ["", "-1", "0", "abc"] {
        std::fs::write(&p, bad).unwrap();
        assert!(
            matches!(read_pid_file(&p), Err(RunscError::PidFile { .. })),
            "{bad:?}"
        );
    }
    assert!(read_pid_file(&dir.path().join("missing")).is_err());
}
