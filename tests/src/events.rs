//! Watching containerd's event stream (`ctr events`) for TaskExit, TaskOOM and friends.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::containerd::Containerd;
use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::poll::poll_until;

/// How long the subscription may take to become live.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `ctr events` whose lines are collected in the background. Lines look like
/// `2024-01-01 00:00:00.000 +0000 UTC gvh-ns /tasks/exit {"container_id":"x",...}`.
/// Stopped on drop.
#[derive(Debug)]
pub struct Events {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Events {
    /// Subscribes to containerd's events and returns once the subscription is live: it labels
    /// the namespace with a fresh value and waits to see that update come through, so no event
    /// that happens after this returns can be missed.
    pub fn watch(c: &Containerd) -> Result<Events> {
        let mut cmd = c.ctr().arg("events");
        cmd.command_mut()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
        let events = Events { child, lines };

        let marker = format!("gvh-sync-{}", random_hex(6));
        let label = format!("gvh.sync={marker}");
        let subscribed = poll_until(
            "`ctr events` to receive a namespace update",
            SUBSCRIBE_TIMEOUT,
            || {
                // Re-label until seen: an update sent before the subscription was live is lost.
                c.ctr()
                    .args(["namespaces", "label", c.namespace(), &label])
                    .output()
                    .ok()?;
                poll_until("marker", Duration::from_millis(200), || {
                    events
                        .lines()
                        .iter()
                        .any(|l| l.contains("/namespaces/update") && l.contains(&marker))
                        .then_some(())
                })
                .ok()
            },
        );
        subscribed.map(|()| events)
    }

    /// Every line received so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lines of `topic` (e.g. `/tasks/exit`, `/tasks/oom`) that mention `container_id`.
    pub fn matching(&self, topic: &str, container_id: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.contains(&format!(" {topic} ")) && l.contains(container_id))
            .collect()
    }

    /// Waits for the first line of `topic` mentioning `container_id`.
    pub fn wait_for(&self, topic: &str, container_id: &str, timeout: Duration) -> Result<String> {
        poll_until(
            &format!("event {topic} for {container_id}"),
            timeout,
            || self.matching(topic, container_id).into_iter().next(),
        )
        .map_err(|e| match e {
            HarnessError::Deadline { what, timeout } => HarnessError::Deadline {
                what: format!("{what}; events seen:\n{}", self.lines().join("\n")),
                timeout,
            },
            other => other,
        })
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
