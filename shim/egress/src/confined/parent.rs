//! The shim's side of a proxy process: start it with the forwarder's pipes and its
//! configuration, place it in the sandbox's cgroups, answer its lookups and credential
//! requests (for the plan's names only), and write its records into the sandbox's trail under
//! the shim's own idea of who they are about. What it sends is read as the sandbox's bytes
//! are: bounded lines of known messages; anything else ends it.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use tokio::io::AsyncWriteExt;
use tokio::sync::{watch, Semaphore};

use super::wire::{self, Config, FromProxy, ToProxy};
use super::{confine, PROXY_ARG};
use crate::audit::{ConnectionRecord, EgressEvent, Verdict};
use crate::credentials::{read_upstream_anchors, read_value, SandboxCa};
use crate::proxy::Proxy;
use crate::supervisor::{
    finish, kill_and_wait, stopped, ForwarderIo, ForwarderPipes, ForwarderState, Outcome,
    SupervisorOptions,
};
use gvisor_hardened_proc::host_process::HostProcess;
use gvisor_hardened_proc::reaper::Reaper;

/// How the shim confines a sandbox's proxy process.
#[derive(Clone)]
pub struct Confinement {
    /// The binary to start with [`PROXY_ARG`]: the shim's own (`/proc/self/exe`), so the
    /// proxy is always the same build as the shim that talks to it.
    pub exe: PathBuf,
    /// The `cgroup.procs` files of the sandbox's cgroups: the proxy's memory, CPU and
    /// processes are the pod's.
    pub cgroup_procs: Vec<PathBuf>,
    /// The shim's reaper (the only waiter of its children); `None` outside the shim.
    pub reaper: Option<Arc<Reaper>>,
}

/// One sandbox's confinement, with what every start of its proxy process needs.
pub(crate) struct Confined {
    pub(crate) how: Confinement,
    pub(crate) netns: Option<PathBuf>,
    pub(crate) node_addresses: Vec<std::net::IpAddr>,
    pub(crate) ca: Option<Arc<SandboxCa>>,
}

/// Lookups and credential reads the shim runs for one proxy process at once; more are
/// answered with an error at once (a process flooding its shim gets nothing from it).
const MAX_REQUESTS: usize = 64;
/// The longest a lookup may take for it.
const LOOKUP: Duration = Duration::from_secs(10);

type Writer = Arc<tokio::sync::Mutex<Option<tokio::net::unix::OwnedWriteHalf>>>;

async fn send(w: &Writer, msg: &ToProxy) {
    if let Some(w) = w.lock().await.as_mut() {
        let mut line = wire::line(msg);
        let _ = w.write_all(&line).await;
        zeroize::Zeroize::zeroize(&mut line);
    }
}

type ExitWait = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// How much of what a proxy process wrote to its stderr goes into the record of its end.
const MAX_LAST_WORDS: usize = 2048;

/// A started proxy process.
struct Started {
    process: HostProcess,
    /// Its exit status and last words.
    exit: ExitWait,
    reader: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: Writer,
}

impl Confined {
    fn config(&self, proxy: &Proxy, attempt: u32, opts: &SupervisorOptions) -> Config {
        let plan = proxy.plan().clone();
        let credentials = !plan.credentials.is_empty();
        Config {
            uid: confine::uid_for(&proxy.sandbox().sandbox_id),
            sandbox: proxy.sandbox().clone(),
            node_addresses: self.node_addresses.clone(),
            netns: self.netns.clone(),
            hello_timeout_ms: opts.hello_timeout.as_millis() as u64,
            attempt,
            ca: credentials
                .then(|| self.ca.as_ref().map(|ca| ca.material()))
                .flatten(),
            anchors: credentials.then(|| read_upstream_anchors(plan.upstream_ca_file())),
            plan,
        }
    }

    async fn start(
        &self,
        config: Config,
        fwd_stdin: OwnedFd,
        fwd_stdout: OwnedFd,
    ) -> io::Result<Started> {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
        let mut cmd = std::process::Command::new(&self.how.exe);
        cmd.arg(PROXY_ARG)
            .env_clear()
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            // What it says before it dies goes into the death's record.
            .stderr(Stdio::piped());
        let (pid, stderr, exit): (i32, Option<OwnedFd>, ExitWait) = match &self.how.reaper {
            Some(r) => {
                let sp = r.spawn(cmd).map_err(io::Error::other)?;
                let exit = sp.exit;
                (
                    sp.pid,
                    sp.stderr.map(OwnedFd::from),
                    Box::pin(async move { format!("{:?}", exit.await) }),
                )
            }
            None => {
                let mut child = tokio::process::Command::from(cmd).spawn()?;
                let pid = child.id().unwrap_or(0) as i32;
                let stderr = child.stderr.take().map(|e| e.into_owned_fd()).transpose()?;
                (
                    pid,
                    stderr,
                    Box::pin(async move {
                        match child.wait().await {
                            Ok(s) => s.to_string(),
                            Err(e) => format!("wait failed: {e}"),
                        }
                    }),
                )
            }
        };
        // Its last words, bounded: read to its end, the tail kept.
        let said = tokio::spawn(async move {
            let Some(fd) = stderr else {
                return String::new();
            };
            let Ok(mut r) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) else {
                return String::new();
            };
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match tokio::io::AsyncReadExt::read(&mut r, &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        tail.extend_from_slice(&buf[..n]);
                        if tail.len() > MAX_LAST_WORDS {
                            tail.drain(..tail.len() - MAX_LAST_WORDS);
                        }
                    }
                }
            }
            String::from_utf8_lossy(&tail).trim().to_string()
        });
        let exit: ExitWait = Box::pin(async move {
            let status = exit.await;
            match said.await.unwrap_or_default() {
                words if words.is_empty() => status,
                words => format!("{status}: {words}"),
            }
        });
        let process = HostProcess::open_child(pid)?;
        let fail = |e: io::Error| {
            let _ = process.signal(libc::SIGKILL);
            e
        };
        // Before it reads a byte of the sandbox's: its memory, CPU and tasks are the pod's.
        for procs in &self.how.cgroup_procs {
            std::fs::write(procs, pid.to_string()).map_err(|e| {
                fail(io::Error::new(
                    e.kind(),
                    format!("placing it in {}: {e}", procs.display()),
                ))
            })?;
        }
        let fds = [fwd_stdin.as_raw_fd(), fwd_stdout.as_raw_fd()];
        sendmsg::<()>(
            ours.as_raw_fd(),
            &[io::IoSlice::new(b"P")],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| {
            fail(io::Error::other(format!(
                "handing it the forwarder's pipes: {e}"
            )))
        })?;
        // Its copies are the only ones now: when it ends, the forwarder sees its stdin close.
        drop((fwd_stdin, fwd_stdout));
        ours.set_nonblocking(true).map_err(fail)?;
        let (rd, mut wr) = tokio::net::UnixStream::from_std(ours)
            .map_err(fail)?
            .into_split();
        let mut line = wire::line(&config);
        drop(config);
        let written = wr.write_all(&line).await;
        zeroize::Zeroize::zeroize(&mut line);
        written.map_err(|e| fail(io::Error::other(format!("sending its configuration: {e}"))))?;
        Ok(Started {
            process,
            exit,
            reader: tokio::io::BufReader::new(rd),
            writer: Arc::new(tokio::sync::Mutex::new(Some(wr))),
        })
    }
}

/// The most streams a process may have open without their records (its plan's caps keep
/// far fewer open; a process past this is not serving a sandbox).
const MAX_OWED: usize = 65_536;

/// A connection's record came: it is owed no more.
fn paid(owed: &mut HashMap<String, Vec<std::time::Instant>>, peer: &str) {
    if let Some(opened) = owed.get_mut(peer) {
        opened.remove(0);
        if opened.is_empty() {
            owed.remove(peer);
        }
    }
}

/// Whether the shim answers a lookup of `host` for this plan: names it allows (at any port)
/// and its credential hosts, nothing else.
fn may_resolve(proxy: &Proxy, host: &str) -> bool {
    let plan = proxy.plan();
    plan.allow.iter().any(|e| e.matches(host, e.port))
        || plan.credential_hosts().iter().any(|h| h == host)
}

/// The answer to a request past [`MAX_REQUESTS`].
fn busy<T>() -> Result<T, String> {
    Err("too many requests at once".into())
}

/// Answers one request of the proxy process's, on a task of its own.
fn answer(proxy: &Arc<Proxy>, writer: &Writer, permits: &Arc<Semaphore>, msg: FromProxy) {
    let permit = permits.clone().try_acquire_owned();
    let (proxy, w) = (proxy.clone(), writer.clone());
    tokio::spawn(async move {
        let reply = match msg {
            FromProxy::Resolve { id, .. } if permit.is_err() => {
                ToProxy::Resolved { id, answer: busy() }
            }
            FromProxy::Value { id, .. } if permit.is_err() => ToProxy::Value { id, answer: busy() },
            FromProxy::Resolve { id, host } => ToProxy::Resolved {
                id,
                answer: if may_resolve(&proxy, &host) {
                    match tokio::time::timeout(LOOKUP, proxy.resolver().resolve(&host)).await {
                        Ok(Ok(a)) => Ok(a),
                        Ok(Err(e)) => Err(e.to_string()),
                        Err(_) => Err(format!("no answer within {LOOKUP:?}")),
                    }
                } else {
                    Err(format!("{host} is not a name on the allowlist"))
                },
            },
            FromProxy::Value { id, host, port } => ToProxy::Value {
                id,
                answer: match proxy.plan().credential(&host, port) {
                    Some(cred) => read_value(&host, cred)
                        .map(|v| wire::Value(v.expose().to_string()))
                        .map_err(|e| e.to_string()),
                    None => Err(format!("no credential for {host}:{port}")),
                },
            },
            _ => return,
        };
        send(&w, &reply).await;
        drop(permit);
    });
}

/// One forwarder served by a proxy process: the confined counterpart of the supervisor's
/// in-process session, with the same outcomes.
pub(crate) async fn run_one(
    proxy: &Arc<Proxy>,
    confined: &Confined,
    io: ForwarderIo,
    attempt: u32,
    opts: &SupervisorOptions,
    stop: &mut watch::Receiver<bool>,
    state: &watch::Sender<ForwarderState>,
) -> Outcome {
    let ForwarderIo {
        pipes,
        mut exited,
        kill,
    } = io;
    let ForwarderPipes::Fds { stdin, stdout } = pipes else {
        kill_and_wait(exited, kill, opts.stop_grace).await;
        return Outcome::Died("the forwarder's pipes cannot be handed to a proxy process".into());
    };
    let config = confined.config(proxy, attempt, opts);
    let mut started = match confined.start(config, stdin, stdout).await {
        Ok(s) => s,
        Err(e) => {
            finish(exited, kill, opts.stop_grace).await;
            return Outcome::Died(format!("cannot start the egress proxy process: {e}"));
        }
    };
    let permits = Arc::new(Semaphore::new(MAX_REQUESTS));
    // Streams opened whose record has not come, by the workload's address.
    let mut owed: HashMap<String, Vec<std::time::Instant>> = HashMap::new();
    let mut ended: Option<String> = None;
    let mut refused: Option<String> = None;
    let mut forwarder_gone = false;
    let mut stopping = false;
    let stop_by = tokio::time::sleep(Duration::MAX);
    tokio::pin!(stop_by);
    loop {
        tokio::select! {
            line = wire::read_line(&mut started.reader, wire::MAX_FROM_PROXY) => {
                let line = match line {
                    Ok(Some(l)) => l,
                    Ok(None) => break,
                    Err(e) => {
                        refused = Some(format!("what it sent: {e}"));
                        break;
                    }
                };
                match serde_json::from_slice::<FromProxy>(&line) {
                    Ok(FromProxy::Event { event }) => match event {
                        // The shim's own events, never the process's to claim.
                        EgressEvent::ForwarderDied { .. } | EgressEvent::ProxyStopped => {
                            refused = Some("it claimed a supervisor's event".into());
                            break;
                        }
                        EgressEvent::ForwarderReady { listen, .. } => {
                            let _ = state.send(ForwarderState::Ready { attempt, listen: listen.clone() });
                            proxy.emit(EgressEvent::ForwarderReady { listen, attempt });
                        }
                        EgressEvent::Connection(rec) => {
                            paid(&mut owed, &rec.peer);
                            proxy.emit(EgressEvent::Connection(rec));
                        }
                        other => proxy.emit(other),
                    },
                    Ok(FromProxy::Opened { peer }) => {
                        if owed.len() >= MAX_OWED {
                            refused = Some(format!("over {MAX_OWED} connections open"));
                            break;
                        }
                        owed.entry(peer).or_default().push(std::time::Instant::now());
                    }
                    Ok(FromProxy::Ended { reason }) => ended = Some(reason),
                    Ok(request) => answer(proxy, &started.writer, &permits, request),
                    Err(e) => {
                        refused = Some(format!("a message the shim does not accept: {e}"));
                        break;
                    }
                }
            }
            why = &mut exited, if !forwarder_gone => {
                // The process sees its session end and says so; nothing to do but note it.
                forwarder_gone = true;
                log::debug!("egress forwarder exited: {why}");
            }
            _ = stopped(stop), if !stopping => {
                // Closing our side tells the process to stop: it resets its streams, writes
                // their records and its end, and exits.
                stopping = true;
                if let Some(mut w) = started.writer.lock().await.take() {
                    let _ = w.shutdown().await;
                }
                stop_by.as_mut().reset(tokio::time::Instant::now() + opts.stop_grace * 2);
            }
            _ = &mut stop_by => {
                refused = Some(format!("it did not stop within {:?}", opts.stop_grace * 2));
                break;
            }
        }
    }
    if refused.is_some() {
        let _ = started.process.signal(libc::SIGKILL);
    }
    let status = match tokio::time::timeout(opts.stop_grace, &mut started.exit).await {
        Ok(s) => s,
        Err(_) => {
            let _ = started.process.signal(libc::SIGKILL);
            tokio::time::timeout(opts.stop_grace, &mut started.exit)
                .await
                .unwrap_or_else(|_| "not reaped".into())
        }
    };
    if !forwarder_gone {
        finish(exited, kill, opts.stop_grace).await;
    }
    // What the process did not write, the shim does: one record per connection, always.
    let why = match (&refused, &ended) {
        (Some(why), _) => format!("the egress proxy process was killed: {why}"),
        _ => format!("the egress proxy process ended ({status}) before its record"),
    };
    for (peer, opened) in owed {
        for at in opened {
            proxy.emit(EgressEvent::Connection(ConnectionRecord {
                peer: peer.clone(),
                method: String::new(),
                host: String::new(),
                port: 0,
                resolved: None,
                verdict: Verdict::Cut,
                rule: "egress-proxy".into(),
                reason: Some(why.clone()),
                sni: None,
                bytes_up: 0,
                bytes_down: 0,
                duration_ms: at.elapsed().as_millis() as u64,
            }));
        }
    }
    if stopping && refused.is_none() {
        return Outcome::Stop;
    }
    let reason = match (refused, ended) {
        (Some(why), _) => format!("the egress proxy process was killed: {why}"),
        (None, Some(reason)) => reason,
        (None, None) => format!("the egress proxy process ended: {status}"),
    };
    log::warn!("egress of {}: {reason}", proxy.sandbox().container_id);
    Outcome::Died(reason)
}

#[cfg(test)]
mod tests {
    //! The shim's side against stand-in proxy processes: shell scripts that say what a
    //! compromised or crashing proxy would, over the same socket.

    use super::*;
    use crate::audit::MemorySink;
    use crate::guard::Guard;
    use crate::net::{NetnsDialer, SystemResolver};
    use crate::tests::fakes::policy;
    use std::os::unix::fs::PermissionsExt;

    struct Stage {
        _dir: tempfile::TempDir,
        confined: Confined,
        proxy: Arc<Proxy>,
        sink: Arc<MemorySink>,
    }

    /// A proxy process that runs `script` (sh) instead of the real one.
    fn stage(script: &str) -> Stage {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("proxy.sh");
        // Each first reads its configuration, as the real one does: the shim has handed over
        // everything before the stand-in speaks or exits.
        std::fs::write(
            &exe,
            format!("#!/bin/sh\nIFS= read -r config <&0\n{script}\n"),
        )
        .unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let sink = Arc::new(MemorySink::default());
        let proxy = Arc::new(Proxy::new(
            policy(&[]),
            Guard::new(Vec::new(), Vec::new()),
            Default::default(),
            Arc::new(SystemResolver),
            Arc::new(NetnsDialer::new(None, Duration::from_secs(1))),
            sink.clone(),
        ));
        Stage {
            _dir: dir,
            confined: Confined {
                how: Confinement {
                    exe,
                    cgroup_procs: Vec::new(),
                    reaper: None,
                },
                netns: None,
                node_addresses: Vec::new(),
                ca: None,
            },
            proxy,
            sink,
        }
    }

    /// A forwarder whose pipes go nowhere and that never exits by itself.
    fn forwarder() -> ForwarderIo {
        let (_r, stdin) = nix::unistd::pipe().unwrap();
        let (stdout, _w) = nix::unistd::pipe().unwrap();
        // The other ends are dropped: the stand-in never reads or writes them.
        ForwarderIo {
            pipes: ForwarderPipes::Fds { stdin, stdout },
            exited: Box::pin(std::future::pending()),
            kill: Box::new(|| Box::pin(async {})),
        }
    }

    async fn run(s: &Stage) -> String {
        let opts = SupervisorOptions {
            stop_grace: Duration::from_millis(200),
            ..SupervisorOptions::default()
        };
        let (_stop_tx, mut stop) = watch::channel(false);
        let (state, _) = watch::channel(ForwarderState::Starting { attempt: 1 });
        match run_one(
            &s.proxy,
            &s.confined,
            forwarder(),
            1,
            &opts,
            &mut stop,
            &state,
        )
        .await
        {
            Outcome::Died(reason) => reason,
            Outcome::Stop => panic!("stopped without a stop"),
        }
    }

    #[tokio::test]
    async fn a_proxy_process_claiming_the_supervisors_event_is_killed_and_nothing_of_it_recorded() {
        let s = stage(
            r#"printf '%s\n' '{"kind":"event","event":{"event":"egress-proxy-stopped"}}' >&0
/bin/sleep 30"#,
        );
        let reason = run(&s).await;
        assert!(
            reason.contains("killed: it claimed a supervisor's event"),
            "{reason}"
        );
        assert!(s.sink.events().is_empty(), "{:?}", s.sink.events());
    }

    #[tokio::test]
    async fn a_proxy_process_that_dies_with_a_connection_open_leaves_its_record_to_the_shim() {
        let s = stage(
            r#"printf '%s\n' '{"kind":"opened","peer":"127.0.0.1:40001"}' '{"kind":"opened","peer":"127.0.0.1:40002"}' >&0
printf '%s\n' '{"kind":"event","event":{"event":"egress-connection","peer":"127.0.0.1:40002","method":"CONNECT","host":"api.example.test","port":443,"verdict":"allowed","rule":"api.example.test:443","bytes_up":1,"bytes_down":2,"duration_ms":3}}' >&0
echo 'something broke' >&2
exit 3"#,
        );
        let reason = run(&s).await;
        assert!(
            reason.contains("the egress proxy process ended") && reason.contains("something broke"),
            "{reason}"
        );
        let records = s.sink.connections();
        assert_eq!(records.len(), 2, "{records:?}");
        // Its own record as it wrote it; the shim's for the one it still owed.
        assert_eq!(records[0].peer, "127.0.0.1:40002");
        assert_eq!(records[0].verdict, Verdict::Allowed);
        assert_eq!(records[1].peer, "127.0.0.1:40001");
        assert_eq!(
            (records[1].verdict, records[1].rule.as_str()),
            (Verdict::Cut, "egress-proxy")
        );
        assert!(
            records[1]
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("egress proxy process ended")),
            "{records:?}"
        );
    }

    #[tokio::test]
    async fn a_lookup_of_a_name_off_the_allowlist_is_answered_with_an_error() {
        // It asks, and reports the answer on stderr.
        let s = stage(
            r#"printf '%s\n' '{"kind":"resolve","id":7,"host":"evil.example.org"}' >&0
IFS= read -r answer <&0
echo "$answer" >&2"#,
        );
        let reason = run(&s).await;
        assert!(
            reason.contains(r#""id":7"#)
                && reason.contains("evil.example.org is not a name on the allowlist"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn an_oversized_line_from_the_proxy_process_kills_it() {
        let s = stage(&format!(
            "printf '%s' '{}' >&0\n/bin/sleep 30",
            "x".repeat(wire::MAX_FROM_PROXY + 1)
        ));
        let reason = run(&s).await;
        assert!(reason.contains("longer than"), "{reason}");
    }
}
