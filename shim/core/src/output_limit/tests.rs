use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

/// A stream as the shim sets it up: (writer = runsc's end, the pair for the interposer, the
/// client's reading end of its "fifo").
fn stream() -> (File, StreamPair, File) {
    let (from_sandbox, runsc_end) = sandbox_pipe().unwrap();
    let (client_end, to_client) = sandbox_pipe().unwrap();
    (
        runsc_end,
        StreamPair {
            from_sandbox,
            to_client,
        },
        client_end,
    )
}

fn sha(bytes: &[u8]) -> String {
    crate::artifacts::hex(&Sha256::digest(bytes))
}

/// Runs `f` on a thread and fails the test if it does not finish within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("did not finish within {limit:?}"))
}

fn read_all(mut f: File) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    })
}

#[test]
fn without_a_bound_everything_is_delivered_counted_and_hashed() {
    let budget = OutputBudget::new(None);
    let (mut w, pair, client) = stream();
    let reader = read_all(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    w.write_all(&data).unwrap();
    drop(w);
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert_eq!(reader.join().unwrap(), data);
    assert_eq!(report.output_bytes, data.len() as u64);
    assert!(!report.output_truncated);
    let out = report.stdout.unwrap();
    assert_eq!(out.sha256, None, "no bound: spliced, not hashed");
    assert!(!out.marker_written);
    assert_eq!(budget.bytes_seen(), data.len() as u64);
}

#[test]
fn output_past_the_bound_is_discarded_after_one_marker_line() {
    let budget = OutputBudget::new(Some(1000));
    let (mut w, pair, client) = stream();
    let reader = read_all(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    let data = vec![b'x'; 10_000];
    w.write_all(&data).unwrap();
    w.write_all(b"more\n").unwrap();
    drop(w);
    let report = within(Duration::from_secs(30), move || ip.wait());
    let got = reader.join().unwrap();
    let marker = "\n[gvisor-hardened: output limit of 1000 bytes (stdout and stderr together) reached; the rest is discarded]\n";
    assert_eq!(&got[..1000], &data[..1000]);
    assert_eq!(std::str::from_utf8(&got[1000..]).unwrap(), marker);
    assert_eq!(report.output_bytes, 1000);
    assert_eq!(report.discarded_bytes, 9005);
    assert!(report.output_truncated);
    let out = report.stdout.unwrap();
    assert_eq!(out.sha256, Some(sha(&data[..1000])));
    assert!(out.marker_written);
    assert_eq!(budget.bytes_seen(), 10_005);
}

#[test]
fn within_the_bound_everything_is_delivered_and_hashed() {
    let budget = OutputBudget::new(Some(1 << 30));
    let (mut w, pair, client) = stream();
    let reader = read_all(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    w.write_all(&data).unwrap();
    drop(w);
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert_eq!(reader.join().unwrap(), data);
    assert_eq!(report.stdout.unwrap().sha256, Some(sha(&data)));
    assert!(!report.output_truncated);
}

#[test]
fn a_cut_at_a_line_end_adds_no_blank_line() {
    let budget = OutputBudget::new(Some(6));
    let (mut w, pair, client) = stream();
    let reader = read_all(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    w.write_all(b"hello\nworld\n").unwrap();
    drop(w);
    within(Duration::from_secs(30), move || ip.wait());
    let got = String::from_utf8(reader.join().unwrap()).unwrap();
    assert!(
        got.starts_with("hello\n[gvisor-hardened: output limit of 6 bytes"),
        "{got:?}"
    );
    assert_eq!(got.lines().count(), 2, "{got:?}");
}

#[test]
fn stdout_and_stderr_share_one_budget() {
    let budget = OutputBudget::new(Some(1500));
    let (mut wo, po, co) = stream();
    let (mut we, pe, ce) = stream();
    let (ro, re) = (read_all(co), read_all(ce));
    let ip = interpose(&budget, Some(po), Some(pe)).unwrap();
    wo.write_all(&[b'o'; 1000]).unwrap();
    we.write_all(&[b'e'; 1000]).unwrap();
    drop((wo, we));
    let report = within(Duration::from_secs(30), move || ip.wait());
    let (o, e) = (ro.join().unwrap(), re.join().unwrap());
    let (so, se) = (report.stdout.unwrap(), report.stderr.unwrap());
    assert_eq!(report.output_bytes, 1500);
    assert_eq!(report.discarded_bytes, 500);
    assert_eq!(so.delivered_bytes + se.delivered_bytes, 1500);
    assert!(report.output_truncated);
    assert!(so.marker_written || se.marker_written);
    let delivered = |v: &[u8], c: u8| v.iter().take_while(|b| **b == c).count() as u64;
    assert_eq!(delivered(&o, b'o'), so.delivered_bytes);
    assert_eq!(delivered(&e, b'e'), se.delivered_bytes);
}

#[test]
fn past_the_bound_the_sandbox_never_blocks_even_if_nobody_reads() {
    let budget = OutputBudget::new(Some(4096));
    let (mut w, pair, client) = stream();
    let ip = interpose(&budget, Some(pair), None).unwrap();
    // Nobody reads `client`: only the first 4 KiB and the marker go there. The sandbox writes
    // 64 MiB, 64 times its pipe's capacity; it finishes only if the copy keeps draining.
    within(Duration::from_secs(60), move || {
        let chunk = vec![b'z'; 1 << 20];
        for _ in 0..64 {
            w.write_all(&chunk).unwrap();
        }
    });
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert_eq!(report.output_bytes, 4096);
    assert_eq!(report.discarded_bytes, (64 << 20) - 4096);
    drop(client);
}

#[test]
fn a_client_that_went_away_does_not_stop_the_drain() {
    let budget = OutputBudget::new(None);
    let (mut w, pair, client) = stream();
    drop(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    within(Duration::from_secs(60), move || {
        for _ in 0..16 {
            w.write_all(&[b'q'; 1 << 20]).unwrap();
        }
    });
    let report = within(Duration::from_secs(30), move || ip.wait());
    let out = report.stdout.unwrap();
    assert!(out.client_error.is_some(), "{out:?}");
    assert_eq!(out.delivered_bytes + out.discarded_bytes, 16 << 20);
    assert!(
        !report.output_truncated,
        "the client going away is not the bound"
    );
}

#[test]
fn the_copy_ends_only_when_every_writer_has_closed() {
    let budget = OutputBudget::new(Some(10));
    let (w, pair, client) = stream();
    let second = w.try_clone().unwrap();
    let reader = read_all(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    drop(w);
    // A writer is still open: the stream goes on. Written after the first writer closed, this
    // must still arrive.
    let mut second = second;
    second.write_all(b"late").unwrap();
    drop(second);
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert_eq!(reader.join().unwrap(), b"late");
    assert_eq!(report.output_bytes, 4);
}

#[test]
fn a_client_gone_before_the_bound_is_not_reported_as_truncation() {
    let budget = OutputBudget::new(Some(1 << 30));
    let (mut w, pair, client) = stream();
    drop(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    within(Duration::from_secs(60), move || {
        w.write_all(&[b'q'; 1 << 20]).unwrap()
    });
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert!(report.stdout.unwrap().client_error.is_some());
    assert!(!report.output_truncated);
    assert_eq!(budget.bytes_seen(), 1 << 20);
}

#[test]
fn budgets_sharing_activity_count_each_others_output_but_keep_their_own_bound() {
    let first = OutputBudget::new(Some(10));
    let second = OutputBudget::sharing_activity(Some(1000), &first);
    let (mut w, pair, client) = stream();
    let reader = read_all(client);
    let ip = interpose(&second, Some(pair), None).unwrap();
    w.write_all(&[b's'; 100]).unwrap();
    drop(w);
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert_eq!(reader.join().unwrap().len(), 100, "the second's own bound");
    assert!(!report.output_truncated);
    assert_eq!((first.bytes_seen(), second.bytes_seen()), (100, 100));
    assert!(!first.truncated());
}

#[test]
fn progress_reports_what_was_copied_while_a_writer_keeps_the_stream_open() {
    let budget = OutputBudget::new(Some(4));
    let (mut w, pair, mut client) = stream();
    let ip = interpose(&budget, Some(pair), None).unwrap();
    let progress = ip.progress();
    w.write_all(b"abcdefgh\n").unwrap();
    let mut got = vec![0u8; 4 + 1 + marker_len(4)];
    client.read_exact(&mut got).unwrap();
    let snap = progress.snapshot();
    assert!(!snap.complete);
    assert_eq!((snap.output_bytes, snap.discarded_bytes), (4, 5));
    assert!(snap.output_truncated);
    assert_eq!(snap.stdout.unwrap().sha256, None);
    drop(w);
    let report = within(Duration::from_secs(30), move || ip.wait());
    assert!(report.complete);
    assert_eq!(report.stdout.unwrap().sha256, Some(sha(b"abcd")));
}

fn marker_len(max: u64) -> usize {
    OutputBudget::new(Some(max)).marker().len()
}

#[test]
fn a_terminal_ends_its_stream_with_eio_and_that_is_no_read_error() {
    let pty = nix::pty::openpty(None, None).unwrap();
    let master = File::from(pty.master);
    let mut slave = File::from(pty.slave);
    let (mut client, to_client) = sandbox_pipe().unwrap();
    let budget = OutputBudget::new(None);
    let ip = interpose(
        &budget,
        Some(StreamPair {
            from_sandbox: master,
            to_client,
        }),
        None,
    )
    .unwrap();
    slave.write_all(b"on the terminal\n").unwrap();
    let mut got = vec![0u8; 17];
    // The terminal turns "\n" into "\r\n".
    client.read_exact(&mut got).unwrap();
    assert_eq!(got, b"on the terminal\r\n");
    drop(slave);
    let report = within(Duration::from_secs(30), move || ip.wait());
    let out = report.stdout.unwrap();
    assert_eq!(out.read_error, None);
    assert_eq!(out.delivered_bytes, 17);
    assert!(report.complete);
}

/// Real time: the deadline is what is tested (under paused time a blocking wait keeps the
/// clock from moving).
#[tokio::test]
async fn an_output_stream_held_open_reports_what_was_copied_by_the_deadline() {
    let budget = OutputBudget::new(Some(1 << 20));
    let (mut writer, pair, mut client) = stream();
    let copy = interpose(&budget, Some(pair), None).unwrap();
    writer.write_all(b"partial\n").unwrap();
    // Read it at the client: then the copy has counted it.
    let mut got = [0u8; 8];
    client.read_exact(&mut got).unwrap();
    let started = std::time::Instant::now();
    let report = drain(copy, Duration::from_millis(300), "test", None).await;
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    assert!(!report.complete);
    assert_eq!(report.output_bytes, 8);
    assert_eq!(report.stdout.as_ref().unwrap().sha256, None);
    drop(writer);
}

#[test]
fn guards_mapping_one_budget_file_draw_from_one_budget_and_count_one_activity() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output-budget");
    let init = OutputBudget::in_file(&path, Some(100), true).unwrap();
    // Another mapping of the file: what an exec's guard, another process, opens.
    let exec = OutputBudget::in_file(&path, Some(100), false).unwrap();
    assert_eq!(init.take(60), 60);
    assert_eq!(exec.take(60), 40);
    assert!(
        init.truncated(),
        "the cut made through the other mapping shows"
    );
    assert_eq!(init.take(1), 0);
    assert_eq!(init.bytes_seen(), 121);
    assert_eq!(exec.bytes_seen(), 121);
}

#[test]
fn a_budget_file_is_made_once_and_only_a_budget_file_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("output-budget");
    let _first = OutputBudget::in_file(&path, None, true).unwrap();
    let again = OutputBudget::in_file(&path, None, true).unwrap_err();
    assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);

    let other = dir.path().join("other");
    std::fs::write(&other, b"not counters").unwrap();
    let wrong = OutputBudget::in_file(&other, None, false).unwrap_err();
    assert!(wrong.to_string().contains("not a budget file"), "{wrong}");

    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(OutputBudget::in_file(&link, None, false).is_err());
    let missing = OutputBudget::in_file(&dir.path().join("none"), None, false).unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
}

#[test]
fn a_note_follows_the_last_byte_on_stderr_on_a_line_of_its_own_outside_the_count() {
    let budget = OutputBudget::new(Some(1 << 20));
    let (mut wo, po, co) = stream();
    let (mut we, pe, ce) = stream();
    let (ro, re) = (read_all(co), read_all(ce));
    let ip = interpose(&budget, Some(po), Some(pe)).unwrap();
    wo.write_all(b"out\n").unwrap();
    we.write_all(b"no newline at the end").unwrap();
    drop((wo, we));
    let note = "gvisor-hardened: stopped at the sandbox's process limit (pids ceiling reached)";
    let report = within(Duration::from_secs(30), move || {
        ip.wait_then_note(Some(note))
    });
    let (o, e) = (ro.join().unwrap(), re.join().unwrap());
    assert_eq!(o, b"out\n", "the note goes to stderr only");
    assert_eq!(
        String::from_utf8(e).unwrap(),
        format!("no newline at the end\n{note}\n")
    );
    let err = report.stderr.unwrap();
    assert_eq!(
        err.delivered_bytes, 21,
        "the note is not the workload's output"
    );
    assert_eq!(err.sha256, Some(sha(b"no newline at the end")));
}

#[test]
fn a_note_goes_to_stdout_when_there_is_no_stderr_as_with_a_terminal() {
    let budget = OutputBudget::new(None);
    let (mut w, pair, client) = stream();
    let reader = read_all(client);
    let ip = interpose(&budget, Some(pair), None).unwrap();
    w.write_all(b"$ ").unwrap();
    drop(w);
    within(Duration::from_secs(30), move || {
        ip.wait_then_note(Some("why"))
    });
    // Spliced, the copy never saw the bytes: the note starts a line of its own.
    assert_eq!(reader.join().unwrap(), b"$ \nwhy\n");
}

#[test]
fn a_client_that_stopped_reading_gets_no_note_and_does_not_hold_up_the_exit() {
    let budget = OutputBudget::new(Some(1 << 30));
    let (mut w, pair, client) = stream();
    let ip = interpose(&budget, Some(pair), None).unwrap();
    // Fill the client's pipe to the brim: the client reads nothing.
    // SAFETY: F_GETPIPE_SZ on a pipe we own.
    let room = unsafe { libc::fcntl(client.as_raw_fd(), libc::F_GETPIPE_SZ) } as usize;
    w.write_all(&vec![b'x'; room]).unwrap();
    drop(w);
    let report = within(Duration::from_secs(30), move || {
        ip.wait_then_note(Some("never read"))
    });
    assert_eq!(report.output_bytes, room as u64);
    let mut rest = Vec::new();
    let mut client = client;
    client.read_to_end(&mut rest).unwrap();
    assert_eq!(
        rest.len(),
        room,
        "only the workload's bytes: no room was left for the note"
    );
}
