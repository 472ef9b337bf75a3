//! The `runsc exec` spawner through the shim's own reaper, against real runsc (root,
//! /usr/bin/runsc, /usr/bin/busybox). A busybox shell stands in for the forwarder: it says
//! HELLO and then waits for its stdin to close, which is all the supervisor needs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::egress::audit::{EgressEvent, MemorySink, SandboxRef};
use crate::egress::guard::Guard;
use crate::egress::net::{NetnsDialer, SystemResolver};
use crate::egress::spawn::RunscExec;
use crate::egress::supervisor::{EgressSupervisor, SupervisorOptions};
use crate::egress::Proxy;
use crate::runsc::test_support::{Bundle, Harness, RUNSC};

const WAIT: Duration = Duration::from_secs(30);

/// The forwarder's HELLO (this build's protocol version) for 127.0.0.1:3128, written by
/// `printf` in octal escapes, then a wait for stdin to close.
fn fake_forwarder() -> String {
    let hello = gvisor_hardened_forwarder::Frame::Hello {
        version: gvisor_hardened_forwarder::VERSION,
        listen: "127.0.0.1:3128".into(),
    }
    .to_bytes();
    let escaped: String = hello.iter().map(|b| format!("\\{b:03o}")).collect();
    format!("printf '{escaped}'; cat >/dev/null")
}

#[tokio::test]
async fn the_spawner_runs_under_the_shims_reaper_and_stops_with_stdin() {
    let bundle = Bundle::new("egress-reaped", "sleep 60");
    let h = Harness::new(&bundle.id).await;
    h.create(&bundle).await.unwrap();
    h.runsc.start(&bundle.id, None).await.unwrap();
    let plan = policy_injector::EgressPlan::from_policy(
        &policy_injector::Policy::from_toml_str("[network.egress]\nallow = [\"a.example.test\"]\n")
            .unwrap()
            .network
            .egress,
    )
    .unwrap()
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let spawner = RunscExec {
        runsc: RUNSC.into(),
        global_args: h.runsc.global().to_args(),
        container_id: bundle.id.clone(),
        state_dir: state.path().to_path_buf(),
        process: json!({
            "terminal": false, "user": {"uid": 65532, "gid": 65532},
            "args": ["/bin/sh", "-c", fake_forwarder()], "env": ["PATH=/bin"], "cwd": "/",
            "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []},
            "noNewPrivileges": true
        }),
        reaper: Some(Arc::new(h.reaper.clone())),
    };
    let sink = Arc::new(MemorySink::default());
    let proxy = Proxy::new(
        plan,
        Guard::default(),
        SandboxRef::default(),
        Arc::new(SystemResolver),
        Arc::new(NetnsDialer::new(None, WAIT)),
        sink.clone(),
    );
    let sup = EgressSupervisor::start(
        Arc::new(proxy),
        Arc::new(spawner),
        SupervisorOptions {
            stop_grace: WAIT,
            ..SupervisorOptions::default()
        },
        Arc::new(|| true),
    );
    assert_eq!(sup.wait_ready(WAIT).await.unwrap(), "127.0.0.1:3128");
    // Stop closes stdin; the stand-in exits and the reaper reports the exec's exit, well within
    // the grace period (no kill needed).
    let t = std::time::Instant::now();
    sup.stop().await;
    assert!(t.elapsed() < WAIT, "stop waited for the whole grace period");
    let events = sink.events();
    assert!(
        matches!(
            events.first(),
            Some(EgressEvent::ForwarderReady { attempt: 1, .. })
        ),
        "{events:?}"
    );
    assert_eq!(events.last(), Some(&EgressEvent::ProxyStopped));
    assert!(!events
        .iter()
        .any(|e| matches!(e, EgressEvent::ForwarderDied { .. })));
}
