//! `[output] max_bytes` through real containerd, runsc and ctr: a container writing past the
//! bound gets exactly the bound through to `ctr` plus one marker line, and its exit record
//! says it was truncated and carries the sha256 of exactly what `ctr` printed. stdout and
//! stderr share the bound; a terminal is bounded too. The records conform to the schema and
//! the chain verifies.

use gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema;
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;
use serde_json::Value;
use sha2::{Digest, Sha256};

const MAX: usize = 100_000;

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn marker() -> String {
    format!("[gvisor-hardened: output limit of {MAX} bytes (stdout and stderr together) reached; the rest is discarded]\n")
}

/// The bytes a stream delivered, as its exit record counts them, out of what the client got.
fn delivered<'a>(stream: &Value, got: &'a str) -> &'a str {
    &got[..stream["delivered_bytes"].as_u64().unwrap() as usize]
}

#[test]
fn output_past_the_bound_is_cut_after_one_marker_line_and_the_exit_record_hashes_what_ctr_got() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let policy = TestPolicy::builder(&c, &unique_id("output"))
        .extra(&format!("[output]\nmax_bytes = \"{MAX}\"\n"))
        .write()
        .unwrap();
    let line = "0123456789abcdef\n";
    let written = line.repeat(300_000 / line.len() + 1);

    // stdout alone, three times the bound.
    let id = unique_id("out");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh("yes 0123456789abcdef | head -c 300000"),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    // 100000 is not at a line end: the marker starts a line of its own.
    let expected = format!("{}\n{}", &written[..MAX], marker());
    assert!(
        out.stdout == expected,
        "ctr printed {} bytes: {:?}...",
        out.stdout.len(),
        &out.stdout[out.stdout.len().saturating_sub(200)..]
    );
    let exit = policy
        .audit_lines()
        .into_iter()
        .find(|r| r["container_id"] == id.as_str() && r["event"] == "exit")
        .unwrap();
    assert_eq!(exit["output_bytes"], MAX, "{exit}");
    assert_eq!(exit["output_truncated"], true, "{exit}");
    assert_eq!(exit["output"]["complete"], true, "{exit}");
    assert_eq!(
        exit["output"]["stdout"]["sha256"],
        sha(&written.as_bytes()[..MAX])
    );
    assert_eq!(exit["output"]["discarded_bytes"], 300_000 - MAX, "{exit}");
    assert_nothing_left(&c, &id, &policy.runtime());

    // Both streams, each twice the bound: together they get the bound; whichever stream the
    // cut fell on ends with the marker, and each stream's hash is of what ctr printed of it.
    let id2 = unique_id("both");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id2)
                .runtime(policy.runtime())
                .sh("yes 0123456789abcdef | head -c 200000; yes ABCDEFGHIJ | head -c 200000 >&2"),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let exit = policy
        .audit_lines()
        .into_iter()
        .find(|r| r["container_id"] == id2.as_str() && r["event"] == "exit")
        .unwrap();
    let (so, se) = (&exit["output"]["stdout"], &exit["output"]["stderr"]);
    assert_eq!(exit["output_bytes"], MAX, "{exit}");
    assert_eq!(exit["output_truncated"], true, "{exit}");
    assert_eq!(
        so["delivered_bytes"].as_u64().unwrap() + se["delivered_bytes"].as_u64().unwrap(),
        MAX as u64
    );
    for (stream, got) in [(so, &out.stdout), (se, &out.stderr)] {
        let kept = delivered(stream, got);
        assert_eq!(stream["sha256"], sha(kept.as_bytes()), "{exit}");
        let rest = &got[kept.len()..];
        if stream["marker_written"] == true {
            assert_eq!(rest.trim_start_matches('\n'), marker(), "{exit}");
        } else {
            assert_eq!(rest, "", "{exit}");
        }
    }
    assert!(written.starts_with(delivered(so, &out.stdout)));
    assert!("ABCDEFGHIJ\n"
        .repeat(20_000)
        .starts_with(delivered(se, &out.stderr)));
    assert_nothing_left(&c, &id2, &policy.runtime());

    // A terminal is one stream (stdout), bounded the same way: the terminal shows the marker.
    let id3 = unique_id("tty");
    let run = Run::new(image.reference(), &id3)
        .runtime(policy.runtime())
        .flags(["-t"])
        .sh("yes 0123456789abcdef | head -c 300000");
    let out = c
        .ctr()
        .args(run.ctr_args_for(&c))
        .output_in_pty("")
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let screen = out.stdout.replace('\r', "");
    assert!(
        screen.ends_with(marker().as_str()),
        "{}",
        &screen[screen.len().saturating_sub(300)..]
    );
    let exit = policy
        .audit_lines()
        .into_iter()
        .find(|r| r["container_id"] == id3.as_str() && r["event"] == "exit")
        .unwrap();
    assert_eq!(exit["output_bytes"], MAX, "{exit}");
    assert_eq!(exit["output_truncated"], true, "{exit}");
    assert_eq!(exit["output"]["stdout"]["marker_written"], true, "{exit}");
    assert_nothing_left(&c, &id3, &policy.runtime());

    assert_chain_intact_and_records_fit_the_schema(&policy.audit_path);
    assert_clean_shutdown(c);
}
