//! The entry point the shim's lifecycle calls: one [`EgressSupervisor`] per sandbox (per pod)
//! keeps a forwarder running inside and the proxy serving it.
//!
//! Order of one forwarder's life: spawn (`runsc exec`, through [`ForwarderSpawner`]) → wait for
//! HELLO (it is listening; no sleeps) → serve streams → on death (stdout EOF, FATAL, protocol
//! error or the exec process exiting) reset every open stream, audit the death, stop what is
//! left of it, back off, start again. Between a death and the next HELLO nothing listens
//! inside, so egress fails closed (connection refused). `stop` closes the forwarder's stdin,
//! which makes it exit, and waits for it.

use std::future::Future;
use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::audit::EgressEvent;
use super::ingress::ConnectorWatch;
use super::mux::{Connector, Opened, Session, SessionEnd};
use super::proxy::Proxy;
use crate::confined::parent::Confined;

pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// A started forwarder: its stdio, a future that resolves (with a description) when its host
/// process has exited, and a way to kill it (for the real one: `runsc kill --pid`, since
/// killing the host `runsc exec` does not stop the process inside).
pub struct ForwarderIo {
    pub pipes: ForwarderPipes,
    pub exited: Pin<Box<dyn Future<Output = String> + Send>>,
    /// Kills the forwarder; resolves once the killing is over (for `runsc kill`, its process
    /// has exited), so no runsc command of ours is in flight when the supervisor stops: one
    /// still running after the front end's `runsc delete` re-creates the container's lock
    /// file in runsc's root (seen: a `..._sandbox:<id>.lock` left behind).
    pub kill: Kill,
}

/// The forwarder's stdio as the host holds it.
pub enum ForwarderPipes {
    /// Streams this process serves itself (test fakes, the in-process proxy).
    Streams { stdin: BoxWrite, stdout: BoxRead },
    /// The pipes' descriptors (the real spawner): handed whole to a confined proxy process,
    /// or made into streams here.
    Fds { stdin: OwnedFd, stdout: OwnedFd },
}

impl ForwarderPipes {
    /// Streams for a session in this process.
    pub fn into_streams(self) -> io::Result<(BoxWrite, BoxRead)> {
        match self {
            ForwarderPipes::Streams { stdin, stdout } => Ok((stdin, stdout)),
            ForwarderPipes::Fds { stdin, stdout } => Ok((
                Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(stdin)?),
                Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(stdout)?),
            )),
        }
    }
}

pub type Kill = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Starts a forwarder inside the sandbox.
#[async_trait]
pub trait ForwarderSpawner: Send + Sync + 'static {
    async fn spawn(&self) -> io::Result<ForwarderIo>;
}

/// Timing of the supervision loop.
#[derive(Debug, Clone, Copy)]
pub struct SupervisorOptions {
    /// How long a new forwarder may take to say HELLO.
    pub hello_timeout: Duration,
    /// The first delay before a restart; doubled per consecutive failure up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// A forwarder that served this long resets the backoff.
    pub healthy_after: Duration,
    /// How long `stop` waits for the forwarder to exit before killing it.
    pub stop_grace: Duration,
    /// How long after a forwarder ended the supervisor waits before calling it a death. A
    /// forwarder also ends with its sandbox, moments before the shim's exit path learns of the
    /// sandbox's end and stops this loop (measured: the forwarder's `runsc exec` returns first);
    /// the sandbox is asked only after this wait, and a stop within it ends the loop quietly.
    pub confirm_death: Duration,
}

impl Default for SupervisorOptions {
    fn default() -> Self {
        SupervisorOptions {
            hello_timeout: Duration::from_secs(10),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            healthy_after: Duration::from_secs(10),
            stop_grace: Duration::from_secs(2),
            confirm_death: Duration::from_secs(1),
        }
    }
}

/// The forwarder's state, observable by the wiring (and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForwarderState {
    Starting { attempt: u32 },
    Ready { attempt: u32, listen: String },
    Down { attempt: u32, reason: String },
    Stopped,
}

/// Whether the sandbox the forwarder runs in still runs. A forwarder that ends with its
/// sandbox has not died: its end is the sandbox's, which the exit path reports and which stops
/// the supervisor; recording it as `egress-forwarder-died` would put a false alarm into every
/// normal exit's trail, and restarting it could only fail.
pub type SandboxRunning = Arc<dyn Fn() -> bool + Send + Sync>;

/// A running supervisor. Dropping it without [`EgressSupervisor::stop`] aborts the loop (the
/// forwarder then sees its stdin close and exits).
pub struct EgressSupervisor {
    stop: watch::Sender<bool>,
    state: watch::Receiver<ForwarderState>,
    /// The running session's connector (published ports), `None` between forwarders.
    connector: ConnectorWatch,
    task: Option<JoinHandle<()>>,
    proxy: Arc<Proxy>,
}

impl EgressSupervisor {
    /// Starts supervising on the current tokio runtime.
    pub fn start(
        proxy: Arc<Proxy>,
        spawner: Arc<dyn ForwarderSpawner>,
        opts: SupervisorOptions,
        running: SandboxRunning,
    ) -> EgressSupervisor {
        Self::start_with(proxy, None, spawner, opts, running)
    }

    /// Like [`EgressSupervisor::start`], with each forwarder served by a confined proxy
    /// process instead of `proxy` in this process (`proxy` then only writes the records).
    pub(crate) fn start_with(
        proxy: Arc<Proxy>,
        confined: Option<Arc<Confined>>,
        spawner: Arc<dyn ForwarderSpawner>,
        opts: SupervisorOptions,
        running: SandboxRunning,
    ) -> EgressSupervisor {
        let (stop, stop_rx) = watch::channel(false);
        let (state_tx, state) = watch::channel(ForwarderState::Starting { attempt: 1 });
        let (connector_tx, connector) = watch::channel(None);
        let task = tokio::spawn(supervise(
            proxy.clone(),
            confined,
            spawner,
            opts,
            running,
            stop_rx,
            Published {
                state: state_tx,
                connector: connector_tx,
            },
        ));
        EgressSupervisor {
            stop,
            state,
            connector,
            task: Some(task),
            proxy,
        }
    }

    pub fn state(&self) -> ForwarderState {
        self.state.borrow().clone()
    }

    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    /// Opens connections into the sandbox over whichever forwarder runs (`crate::ingress`);
    /// `None` while none is ready. Served by the in-process proxy only: a confined proxy
    /// process holds its session itself.
    pub fn connector(&self) -> ConnectorWatch {
        self.connector.clone()
    }

    /// Waits until a forwarder is listening (`Ok(listen)`), or the deadline passes.
    pub async fn wait_ready(&self, deadline: Duration) -> Result<String, ForwarderState> {
        self.wait_for(deadline, |s| matches!(s, ForwarderState::Ready { .. }))
            .await
            .map(|s| match s {
                ForwarderState::Ready { listen, .. } => listen,
                _ => unreachable!("filtered to Ready"),
            })
    }

    /// Waits until the state satisfies `pred`; `Err` with the last state on timeout.
    pub async fn wait_for(
        &self,
        deadline: Duration,
        pred: impl Fn(&ForwarderState) -> bool,
    ) -> Result<ForwarderState, ForwarderState> {
        let mut rx = self.state.clone();
        let found = tokio::time::timeout(deadline, rx.wait_for(|s| pred(s))).await;
        match found {
            Ok(Ok(s)) => Ok(s.clone()),
            _ => Err(self.state()),
        }
    }

    /// Stops the forwarder and the proxy; open connections are reset. Returns once their
    /// records are written (the sink may write them on a thread of its own).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        if let Some(written) = self.proxy.audit_sink().flush() {
            let _ = written.await;
        }
    }
}

impl Drop for EgressSupervisor {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// What the supervision loop publishes: the forwarder's state, and the running session's
/// connector.
pub(crate) struct Published {
    pub state: watch::Sender<ForwarderState>,
    pub connector: watch::Sender<Option<Connector>>,
}

pub(crate) enum Outcome {
    Stop,
    Died(String),
}

async fn supervise(
    proxy: Arc<Proxy>,
    confined: Option<Arc<Confined>>,
    spawner: Arc<dyn ForwarderSpawner>,
    opts: SupervisorOptions,
    running: SandboxRunning,
    mut stop: watch::Receiver<bool>,
    published: Published,
) {
    let state = &published.state;
    let mut attempt = 0u32;
    let mut failures = 0u32;
    // Every workload connection being served, across forwarder restarts.
    let mut connections = JoinSet::new();
    loop {
        attempt += 1;
        let _ = state.send(ForwarderState::Starting { attempt });
        let started = Instant::now();
        let outcome = match spawner.spawn().await {
            Err(e) => Outcome::Died(format!("cannot start the forwarder: {e}")),
            Ok(io) if confined.is_some() => {
                let confined = confined.as_ref().expect("checked");
                crate::confined::parent::run_one(
                    &proxy, confined, io, attempt, &opts, &mut stop, state,
                )
                .await
            }
            Ok(io) => {
                run_one(
                    &proxy,
                    io,
                    attempt,
                    &opts,
                    &mut stop,
                    &published,
                    &mut connections,
                )
                .await
            }
        };
        let reason = match outcome {
            Outcome::Stop => break,
            Outcome::Died(reason) => reason,
        };
        let _ = state.send(ForwarderState::Down {
            attempt,
            reason: reason.clone(),
        });
        if started.elapsed() >= opts.healthy_after {
            failures = 0;
        }
        let delay = opts
            .backoff
            .saturating_mul(1 << failures.min(16))
            .min(opts.max_backoff)
            .max(opts.confirm_death);
        failures += 1;
        // Restart pacing and the death's confirmation, not synchronisation: a forwarder that
        // dies at once (its port taken, say) must not be restarted in a tight loop, and one
        // that ended with its sandbox is stopped within this wait.
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stopped(&mut stop) => break,
        }
        if !running() {
            log::debug!("egress forwarder ended with its sandbox ({reason}); not restarted");
            stopped(&mut stop).await;
            break;
        }
        proxy.emit(EgressEvent::ForwarderDied { reason, attempt });
    }
    // Every connection's record before `egress-proxy-stopped`, and so before the exit record
    // the front end writes once `stop` returned (a guard process ends right after it, and its
    // pending tasks with it). Their streams were reset, so they end at once; bounded anyway.
    let drained = tokio::time::timeout(opts.stop_grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        log::warn!(
            "egress: {} connection(s) still open {:?} after the proxy stopped; cut",
            connections.len(),
            opts.stop_grace
        );
    }
    proxy.emit(EgressEvent::ProxyStopped);
    let _ = state.send(ForwarderState::Stopped);
}

async fn run_one(
    proxy: &Arc<Proxy>,
    io: ForwarderIo,
    attempt: u32,
    opts: &SupervisorOptions,
    stop: &mut watch::Receiver<bool>,
    published: &Published,
    connections: &mut JoinSet<()>,
) -> Outcome {
    let state = &published.state;
    let ForwarderIo {
        pipes,
        mut exited,
        kill,
    } = io;
    let (stdin, stdout) = match pipes.into_streams() {
        Ok(s) => s,
        Err(e) => {
            kill_and_wait(exited, kill, opts.stop_grace).await;
            return Outcome::Died(format!("the forwarder's pipes: {e}"));
        }
    };
    let mut session = Session::new(stdout, stdin);
    let hello = tokio::select! {
        h = tokio::time::timeout(opts.hello_timeout, session.hello()) => match h {
            Ok(Ok(listen)) => Ok(listen),
            Ok(Err(e)) => Err((e.to_string(), false)),
            Err(_) => Err((format!("no HELLO within {:?}", opts.hello_timeout), false)),
        },
        why = &mut exited => Err((format!("exited before HELLO: {why}"), true)),
        _ = stopped(stop) => {
            drop(session);
            finish(exited, kill, opts.stop_grace).await;
            return Outcome::Stop;
        }
    };
    let listen = match hello {
        Ok(l) => l,
        Err((reason, gone)) => {
            drop(session);
            if !gone {
                // No HELLO from a forwarder that runs: it will not give one now.
                kill_and_wait(exited, kill, opts.stop_grace).await;
            }
            return Outcome::Died(reason);
        }
    };
    proxy.emit(EgressEvent::ForwarderReady {
        listen: listen.clone(),
        attempt,
    });
    let _ = state.send(ForwarderState::Ready { attempt, listen });
    published.connector.send_replace(Some(session.connector()));
    let serving = proxy.clone();
    let end = tokio::select! {
        end = session.run(|opened| match opened {
            Opened::Stream(s) => {
                // Finished ones are reaped as new ones come, so the set holds the live ones.
                while connections.try_join_next().is_some() {}
                connections.spawn(serving.clone().serve(s));
            }
            Opened::Refused { peer } => serving.refused_by_forwarder(peer),
        }) => Some((end, false)),
        why = &mut exited => Some((SessionEnd::Fatal(format!("its process exited: {why}")), true)),
        _ = stopped(stop) => None,
    };
    // No new connection into the sandbox until the next forwarder says HELLO.
    published.connector.send_replace(None);
    session.reset_all();
    drop(session);
    match end {
        None => {
            finish(exited, kill, opts.stop_grace).await;
            Outcome::Stop
        }
        Some((end, gone)) => {
            // A session that ended (the sandbox or the forwarder going away, or a protocol
            // error) leaves a process that usually exits by itself now that its streams are
            // closed; killed only if it does not.
            if !gone {
                finish(exited, kill, opts.stop_grace).await;
            }
            Outcome::Died(end.to_string())
        }
    }
}

/// Resolves once a stop was requested (the guard of `wait_for` must not live across awaits).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await.map(|_| ());
}

/// After stdin closed: give the forwarder a moment to exit on its own, then kill it.
pub(crate) async fn finish(
    exited: Pin<Box<dyn Future<Output = String> + Send>>,
    kill: Kill,
    grace: Duration,
) {
    let mut exited = exited;
    if tokio::time::timeout(grace, &mut exited).await.is_err() {
        kill_and_wait(exited, kill, grace).await;
    }
}

/// Kills the forwarder and waits, each at most `grace`, for the kill and for its process.
pub(crate) async fn kill_and_wait(
    exited: Pin<Box<dyn Future<Output = String> + Send>>,
    kill: Kill,
    grace: Duration,
) {
    if tokio::time::timeout(grace, kill()).await.is_err() {
        log::warn!("egress: killing the forwarder took over {grace:?}");
    }
    if tokio::time::timeout(grace, exited).await.is_err() {
        log::warn!("egress: the forwarder's process did not exit {grace:?} after its kill");
    }
}
