//! Issue 13 through the lifecycle: the idle timeout (paused time, a scripted CPU counter),
//! bounded output (pipes from the fake runtime to real fifos), artifact manifests of a
//! writable volume.

use super::*;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::exec::exec_request;
use gvisor_hardened_core::exit::ExitCause;
use gvisor_hardened_core::fake::Step;

const IDLE: &str =
    "[lifetime]\nmax_runtime = \"1h\"\nidle_timeout = \"30s\"\ngrace_period = \"5s\"\n";
/// Well above the idle threshold (20 ms of CPU per second): a busy loop's rate.
const BUSY_NS_PER_SEC: u64 = 500_000_000;

/// A fifo at `dir/name` and the client's reading end of it, opened before the shim opens its
/// own (as containerd's client does), blocking.
fn client_fifo(dir: &Path, name: &str) -> (String, File) {
    let path = dir.join(name);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    // SAFETY: fcntl on a descriptor we own.
    unsafe { libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&f), libc::F_SETFL, 0) };
    (path.display().to_string(), f)
}

/// Container `c1` created with a stdout fifo under `dir` and started: the client's end.
async fn running_with_stdout(bed: &Bed, dir: &Path) -> File {
    let (stdout, client) = client_fifo(dir, "stdout");
    let mut req = bed.request("c1", &[]);
    req.stdout = stdout;
    bed.shim.create(req).await.unwrap();
    bed.shim.start("c1", "").await.unwrap();
    client
}

fn read_n(f: &mut File, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    f.read_exact(&mut buf).unwrap();
    buf
}

fn sha(bytes: &[u8]) -> String {
    gvisor_hardened_core::artifacts::hex(&Sha256::digest(bytes))
}

fn marker(max: u64) -> String {
    format!("[gvisor-hardened: output limit of {max} bytes (stdout and stderr together) reached; the rest is discarded]\n")
}

#[tokio::test(start_paused = true)]
async fn an_idle_sandbox_gets_sigterm_then_sigkill_and_is_audited_as_an_idle_timeout() {
    let bed = Bed::with_policy(IDLE);
    // Idle from its first second: SIGTERM at 30 s, SIGKILL after the 5 s grace.
    bed.assert_stopped_with_sigterm_then_sigkill(
        "c1",
        Duration::from_secs(35),
        ("idle-timeout", false, "idle-timeout"),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_busy_sandbox_is_never_stopped_for_idleness() {
    let bed = Bed::with_policy(IDLE);
    bed.fake.set_cpu_rate("c1", BUSY_NS_PER_SEC);
    bed.running("c1").await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert!(bed.fake.calls_of("kill").is_empty());
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    assert_eq!(bed.audit_events("c1"), ["create", "start", "exit"]);
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "exited");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_writing_output_is_never_stopped_for_idleness() {
    let bed = Bed::with_policy(IDLE);
    let dir = tempfile::tempdir().unwrap();
    let mut client = running_with_stdout(&bed, dir.path()).await;
    // A line every 2 s and no CPU to speak of, for three times the idle timeout. Each line is
    // read at the client before time moves on: the shim's copy has counted it by then.
    for _ in 0..45 {
        bed.fake.write_stdout("c1", "", b"tick\n");
        assert_eq!(read_n(&mut client, 5), b"tick\n");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(bed.fake.calls_of("kill").is_empty());
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let exit = bed.audit_record("c1", "exit");
    assert_eq!(exit["exit_cause"], "exited");
    assert_eq!(exit["output_bytes"], 45 * 5);
    assert_eq!(exit["output_truncated"], false);
    assert_eq!(exit["output"]["complete"], true);
    // No bound: the kernel moves the bytes, the shim only counts them.
    assert!(exit["output"]["stdout"].get("sha256").is_none(), "{exit}");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn idle_then_busy_then_idle_is_stopped_only_after_a_full_idle_period() {
    let bed = Bed::with_policy(IDLE);
    let started = tokio::time::Instant::now();
    bed.running("c1").await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    bed.fake.set_cpu_rate("c1", BUSY_NS_PER_SEC);
    tokio::time::sleep(Duration::from_secs(3)).await;
    bed.fake.set_cpu_rate("c1", 0);
    assert!(bed.fake.calls_of("kill").is_empty());
    assert_eq!(bed.exit_status("c1").await, 128 + SIGTERM);
    // 20 idle seconds are not 30; the busy ones start the count again at 23 s.
    assert_eq!(started.elapsed(), Duration::from_secs(23 + 30));
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "idle-timeout");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_unreadable_cpu_counter_fails_a_create_with_an_idle_timeout() {
    let bed = Bed::with_policy(IDLE);
    bed.fake.fail_next(Step::ReadCpu);
    let (code, msg) = super::code(bed.shim.create(bed.request("c1", &[])).await.unwrap_err());
    assert_eq!(code, Code::INTERNAL);
    assert!(
        msg.contains("idle timeout 30s: cannot read the sandbox's CPU time"),
        "{msg}"
    );
    assert_eq!(bed.audit_events("c1"), ["create", "create-failed"]);
    bed.assert_clean();
}

#[tokio::test]
async fn output_past_the_bound_reaches_the_client_cut_after_one_marker_and_the_exit_record_says_so()
{
    let bed = Bed::with_policy("[output]\nmax_bytes = \"1000\"\n");
    let dir = tempfile::tempdir().unwrap();
    let mut client = running_with_stdout(&bed, dir.path()).await;
    let written: Vec<u8> = (0..3000u32).map(|i| b'a' + (i % 26) as u8).collect();
    bed.fake.write_stdout("c1", "", &written);
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap();
    let mut expected = written[..1000].to_vec();
    expected.push(b'\n');
    expected.extend(marker(1000).as_bytes());
    assert_eq!(
        String::from_utf8(got).unwrap(),
        String::from_utf8(expected).unwrap()
    );
    let exit = bed.audit_record("c1", "exit");
    assert_eq!(exit["output_bytes"], 1000);
    assert_eq!(exit["output_truncated"], true);
    let out = &exit["output"];
    assert_eq!(out["complete"], true);
    assert_eq!(out["discarded_bytes"], 2000);
    assert_eq!(out["stdout"]["sha256"], sha(&written[..1000]));
    assert_eq!(out["stdout"]["marker_written"], true);
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn execs_share_their_containers_output_bound() {
    let bed = Bed::with_policy("[output]\nmax_bytes = \"1000\"\n");
    let dir = tempfile::tempdir().unwrap();
    let mut client = running_with_stdout(&bed, dir.path()).await;
    let (exec_stdout, mut exec_client) = client_fifo(dir.path(), "exec-stdout");
    bed.fake.write_stdout("c1", "", &[b'i'; 600]);
    assert_eq!(read_n(&mut client, 600), [b'i'; 600]);
    let mut exec = exec_request("c1", "e1", 0);
    exec.stdout = exec_stdout;
    bed.shim.exec(exec).await.unwrap();
    bed.shim.start("c1", "e1").await.unwrap();
    bed.fake.write_stdout("c1", "e1", &[b'e'; 600]);
    bed.fake.exit_exec("c1", "e1", exited(0));
    bed.shim.wait("c1", "e1").await.unwrap();
    let mut got = Vec::new();
    exec_client.read_to_end(&mut got).unwrap();
    assert_eq!(got[..400], [b'e'; 400]);
    assert_eq!(
        String::from_utf8_lossy(&got[400..]),
        format!("\n{}", marker(1000))
    );
    let exec_exit = bed.audit_record("c1", "exec-exit");
    assert_eq!(exec_exit["output_bytes"], 400);
    assert_eq!(exec_exit["output_truncated"], true);
    assert_eq!(exec_exit["output"]["stdout"]["sha256"], sha(&[b'e'; 400]));
    bed.shim.delete("c1", "e1").await.unwrap();
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    // The init's own output was within the bound when it was written.
    let exit = bed.audit_record("c1", "exit");
    assert_eq!(exit["output_bytes"], 600);
    assert_eq!(exit["output_truncated"], false);
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn without_a_bound_or_an_idle_timeout_the_shim_copies_nothing() {
    let bed = Bed::new();
    let dir = tempfile::tempdir().unwrap();
    let mut client = running_with_stdout(&bed, dir.path()).await;
    bed.fake.write_stdout("c1", "", b"direct\n");
    assert_eq!(read_n(&mut client, 7), b"direct\n");
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let exit = bed.audit_record("c1", "exit");
    for field in ["output_bytes", "output_truncated", "output"] {
        assert!(exit.get(field).is_none(), "{field} in {exit}");
    }
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

/// A bundle whose spec binds `vol` writable at /data, on a policy that lets it stay writable.
fn bed_with_volume(vol: &Path) -> (Bed, CreateTaskRequest) {
    let bed = Bed::with_policy(&format!(
        "[mounts]\nwritable_sources = [\"{}/**\"]\n",
        vol.display()
    ));
    let req = bed.request("c1", &[]);
    let config = Path::new(&req.bundle).join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/data", "type": "bind", "source": vol, "options": ["rbind", "rw"]
    }));
    std::fs::write(&config, spec.to_string()).unwrap();
    (bed, req)
}

#[tokio::test]
async fn a_volumes_manifests_are_recorded_at_start_and_diffed_in_the_exit_record() {
    let vol = tempfile::tempdir().unwrap();
    std::fs::write(vol.path().join("kept"), b"same").unwrap();
    std::fs::write(vol.path().join("edited"), b"before").unwrap();
    std::fs::write(vol.path().join("removed"), b"x").unwrap();
    let (bed, req) = bed_with_volume(vol.path());
    bed.shim.create(req).await.unwrap();
    bed.shim.start("c1", "").await.unwrap();
    let start = bed.audit_record("c1", "start");
    let start_manifest = &start["artifacts"]["manifest"];
    let start_path = start_manifest["path"].as_str().unwrap();
    assert_eq!(
        sha(&std::fs::read(start_path).unwrap()),
        start_manifest["sha256"].as_str().unwrap()
    );
    // What the workload does.
    std::fs::write(vol.path().join("edited"), b"after!").unwrap();
    std::fs::remove_file(vol.path().join("removed")).unwrap();
    std::fs::write(vol.path().join("created"), b"new").unwrap();
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let exit = bed.audit_record("c1", "exit");
    let a = &exit["artifacts"];
    assert_eq!(a["start_sha256"], start_manifest["sha256"]);
    let paths = |k: &str| -> Vec<String> {
        a["diff"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}:{}",
                    c["mount"].as_str().unwrap(),
                    c["path"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(paths("added_paths"), ["/data:created"]);
    assert_eq!(paths("modified_paths"), ["/data:edited"]);
    assert_eq!(paths("removed_paths"), ["/data:removed"]);
    assert_eq!(a["diff"]["exact"], true);
    let exit_path = a["manifest"]["path"].as_str().unwrap();
    assert_eq!(
        sha(&std::fs::read(exit_path).unwrap()),
        a["manifest"]["sha256"].as_str().unwrap()
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn a_start_manifest_that_cannot_be_written_fails_the_start_before_runsc_runs_anything() {
    let vol = tempfile::tempdir().unwrap();
    let (bed, req) = bed_with_volume(vol.path());
    // Where the manifests go (beside the audit log) is taken by a file.
    std::fs::write(bed.audit_path().with_file_name("artifacts"), b"").unwrap();
    bed.shim.create(req).await.unwrap();
    let err = bed.shim.start("c1", "").await.unwrap_err();
    assert_eq!(err.code(), Code::INTERNAL);
    assert!(err.to_string().contains("artifacts"), "{err}");
    assert!(bed.fake.calls_of("start").is_empty());
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_pods_sandbox_counts_the_output_of_its_containers_as_activity() {
    const CRI_TYPE: &str = "io.kubernetes.cri.container-type";
    const CRI_SANDBOX: &str = "io.kubernetes.cri.sandbox-id";
    let bed = Bed::with_policy(IDLE);
    let dir = tempfile::tempdir().unwrap();
    bed.shim
        .create(bed.request("pod", &[(CRI_TYPE, "sandbox"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("pod", "").await.unwrap();
    let app = bed.request("app", &[(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")]);
    bed.shim.create(app).await.unwrap();
    bed.shim.start("app", "").await.unwrap();
    // Only an exec in the app container writes; the pause container writes nothing itself.
    let (exec_stdout, mut client) = client_fifo(dir.path(), "exec-stdout");
    let mut exec = exec_request("app", "e1", 0);
    exec.stdout = exec_stdout;
    bed.shim.exec(exec).await.unwrap();
    bed.shim.start("app", "e1").await.unwrap();
    let mut last_line = tokio::time::Instant::now();
    for _ in 0..45 {
        bed.fake.write_stdout("app", "e1", b"tick\n");
        assert_eq!(read_n(&mut client, 5), b"tick\n");
        last_line = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    assert!(bed.fake.calls_of("kill").is_empty());
    // Silence: both the pod's containers reach their idle timeout. Waiting on the pod's exit
    // (not a fixed sleep) leaves the monitor's sampling and the kill their own pace; the exit
    // may come no sooner than a full idle period after the last line.
    assert_eq!(bed.exit_status("pod").await, 128 + SIGTERM);
    let quiet = last_line.elapsed();
    assert!(
        quiet >= Duration::from_secs(30),
        "stopped {quiet:?} after the last line"
    );
    assert!(bed
        .fake
        .calls_of("kill")
        .contains(&format!("kill pod {SIGTERM} all")));
    assert_eq!(
        bed.audit_record("pod", "exit")["exit_cause"],
        "idle-timeout"
    );
    // The pod's end takes its containers' processes with it; each exit is handled on its own.
    bed.shim.wait("app", "e1").await.unwrap();
    bed.shim.wait("app", "").await.unwrap();
    bed.shim.delete("app", "e1").await.unwrap();
    bed.shim.delete("app", "").await.unwrap();
    bed.shim.delete("pod", "").await.unwrap();
    bed.assert_clean();
}

/// The container's log (one fifo, as `ctr run` and nerdctl's logger get it) after a process
/// limit kill, under `policy`.
async fn log_after_a_process_limit_kill(policy: &str) -> String {
    let bed = Bed::with_policy(policy);
    let dir = tempfile::tempdir().unwrap();
    let mut client = running_with_stdout(&bed, dir.path()).await;
    bed.fake.write_stdout("c1", "", b"forking");
    bed.fake.set_cause("c1", ExitCause::ProcessLimit);
    bed.fake.exit("c1", exited(2));
    assert_eq!(bed.exit_status("c1").await, 2);
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap();
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
    String::from_utf8(got).unwrap()
}

const PROCESS_LIMIT_NOTE: &str =
    "gvisor-hardened: stopped at the sandbox's process limit (pids ceiling reached)";

#[tokio::test]
async fn a_process_limit_kill_says_why_in_the_containers_log_after_its_last_line() {
    // nerdctl and ctr users read the container's log, not the audit: the line the kubelet gets
    // as the termination message ends the stream, before the exit is published. The copy
    // knows the last byte ended no line.
    let got = log_after_a_process_limit_kill("[output]\nmax_bytes = \"1Mi\"\n").await;
    assert_eq!(got, format!("forking\n{PROCESS_LIMIT_NOTE}\n"));
}

#[tokio::test]
async fn without_an_output_copy_the_shim_still_says_why_after_the_last_byte() {
    // No bound, no idle timeout: runsc writes to the fifo itself, and the shim's duplicate of
    // it carries the line once runsc's are gone, on a line of its own (the shim never saw
    // whether the last byte ended one).
    let got = log_after_a_process_limit_kill("").await;
    assert_eq!(got, format!("forking\n{PROCESS_LIMIT_NOTE}\n"));
}

#[tokio::test]
async fn an_exit_of_its_own_adds_nothing_to_the_log() {
    let bed = Bed::with_policy("[output]\nmax_bytes = \"1Mi\"\n");
    let dir = tempfile::tempdir().unwrap();
    let mut client = running_with_stdout(&bed, dir.path()).await;
    bed.fake.write_stdout("c1", "", b"done\n");
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let mut got = Vec::new();
    client.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"done\n");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}
