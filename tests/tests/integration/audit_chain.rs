//! The audit chain through real containerd, real runsc and real ctr: 20 containers started and
//! stopped at once, each by its own shim, append to one log. `policy-injector audit verify`
//! must find the chain intact, every record must conform to `shim/audit-record.schema.json`,
//! and an edited copy of the log must fail verification at the edited line.

use std::sync::{Barrier, Mutex};
use std::time::Instant;

use gvisor_hardened_tests::audit_tools::{policy_injector_audit, validate_against_schema};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;

const SANDBOXES: usize = 20;

#[test]
fn twenty_containers_at_once_keep_the_audit_chain_intact() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let policy = TestPolicy::builder(&c, "chain").write().unwrap();
    let ids: Vec<String> = (0..SANDBOXES)
        .map(|i| unique_id(&format!("chain{i}")))
        .collect();

    // All 20 run, then all 20 stop, each step released to every thread at once.
    let barrier = Barrier::new(SANDBOXES);
    let failures = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for id in &ids {
            let (c, image, policy, barrier, failures) = (&c, &image, &policy, &barrier, &failures);
            s.spawn(move || {
                let run = Run::new(image.reference(), id)
                    .runtime(policy.runtime())
                    .detach()
                    .cmd(["sleep", "3600"]);
                barrier.wait();
                let result = c.ctr().args(run.ctr_args_for(c)).checked();
                barrier.wait();
                let result = result
                    .and_then(|_| c.ctr().args(["task", "rm", "--force", id]).checked())
                    .and_then(|_| c.ctr().args(["containers", "rm", id]).checked());
                if let Err(e) = result {
                    failures.lock().unwrap().push(format!("{id}: {e}"));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!(
        "{SANDBOXES} containers started and stopped at once in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let lines = policy.audit_lines();
    for id in &ids {
        let events = policy.audit_events(id);
        assert_eq!(
            events.first().map(String::as_str),
            Some("create"),
            "{id}: {events:?}"
        );
        assert_eq!(
            events.last().map(String::as_str),
            Some("delete"),
            "{id}: {events:?}"
        );
        assert!(events.iter().any(|e| e == "start"), "{id}: {events:?}");
    }

    let log = policy.audit_path.to_str().unwrap();
    let out = policy_injector_audit(&["verify", log]).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        stdout.lines().next(),
        Some(format!("{} records, chain intact", lines.len()).as_str()),
        "{stdout}"
    );
    println!("policy-injector audit verify {log}:\n{stdout}");

    let checked = validate_against_schema(&[&policy.audit_path])
        .unwrap_or_else(|e| panic!("records that do not conform to the schema:\n{e}"));
    println!("schema: {checked}");

    // A copy with one record edited (a start turned into something else) fails at that line.
    let text = std::fs::read_to_string(&policy.audit_path).unwrap();
    let edited_line = text
        .lines()
        .position(|l| l.contains("\"event\":\"start\""))
        .unwrap()
        + 1;
    let tampered = c.dir().join("tampered.jsonl");
    std::fs::write(
        &tampered,
        text.replacen("\"event\":\"start\"", "\"event\":\"exec\"", 1),
    )
    .unwrap();
    let out = policy_injector_audit(&["verify", tampered.to_str().unwrap()]).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        stdout.contains(&format!("line {edited_line}: record altered")),
        "{stdout}"
    );
    assert_clean_shutdown(c);
}
