//! The long-lived shim server: ttrpc on the socket `start` bound, until Shutdown or SIGTERM.

use std::os::fd::FromRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use containerd_shim_protos::ttrpc::r#async::transport::Listener;
use containerd_shim_protos::ttrpc::r#async::Server;
use tokio::signal::unix::{signal, SignalKind};

use crate::actions::start::LISTEN_FD_ENV;
use crate::env::{ShimEnv, CONSOLE_DIR};
use crate::events::ContainerdSink;
use crate::flags::Flags;
use crate::service::Shim;
use gvisor_hardened_core::host::linux::LinuxHost;
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runtime::runsc::RunscFactory;

/// How long an exiting shim waits for containerd to answer the events still queued. containerd
/// answers within milliseconds when it is up; when it is not (a SIGTERM while it restarts), the
/// events would be lost anyway and the shim must not linger.
const FLUSH_EVENTS_ON_EXIT: Duration = Duration::from_secs(5);

fn listener(flags: &Flags) -> anyhow::Result<(UnixListener, Option<PathBuf>)> {
    if let Ok(fd) = std::env::var(LISTEN_FD_ENV) {
        let fd: i32 = fd.parse().context("bad listen fd")?;
        // SAFETY: `start` passed us this listening socket as `fd` and nobody else owns it.
        let l = unsafe { UnixListener::from_raw_fd(fd) };
        // It arrived without close-on-exec (to survive our own exec); every runsc, sandbox and
        // gofer we start would otherwise inherit it and keep the socket alive after we die.
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) < 0 {
                anyhow::bail!(
                    "setting close-on-exec on the listening socket: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
        let path = l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf));
        return Ok((l, path));
    }
    anyhow::ensure!(
        !flags.socket.is_empty(),
        "no listening socket: run me through `start`"
    );
    let path = PathBuf::from(flags.socket.trim_start_matches("unix://"));
    let l = UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    Ok((l, Some(path)))
}

pub async fn serve(flags: Flags) -> anyhow::Result<()> {
    let bundle = std::env::current_dir().context("cwd")?;
    crate::logger::init(&bundle, &flags.namespace, flags.debug);
    let reaper = Reaper::install().context("installing the reaper")?;
    let ttrpc_address =
        std::env::var("TTRPC_ADDRESS").context("TTRPC_ADDRESS is not set (containerd sets it)")?;
    let events = ContainerdSink::connect(&ttrpc_address, flags.namespace.clone())
        .await
        .map_err(|e| anyhow::anyhow!("connecting to containerd events at {ttrpc_address}: {e}"))?;
    let events = Arc::new(events);
    let shim = Arc::new(Shim::new(ShimEnv {
        namespace: flags.namespace.clone(),
        events: events.clone(),
        runtimes: Arc::new(RunscFactory::new(reaper)),
        host: Arc::new(LinuxHost),
        node_policy: PathBuf::from(gvisor_hardened_core::policy_source::NODE_POLICY_PATH),
        console_dir: PathBuf::from(CONSOLE_DIR),
        records: Arc::new(crate::record::Containerd {
            socket: PathBuf::from(
                flags
                    .address
                    .strip_prefix("unix://")
                    .unwrap_or(&flags.address),
            ),
            namespace: flags.namespace.clone(),
        }),
    }));

    let (std_listener, socket_path) = listener(&flags)?;
    let listener = Listener::try_from(std_listener).context("ttrpc listener")?;
    let mut server = Server::new()
        .add_listener(listener)
        .register_service(crate::task::services(shim.clone()));
    server.start().await.context("starting the ttrpc server")?;
    log::info!("shim serving {} (namespace {})", flags.id, flags.namespace);

    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    tokio::select! {
        _ = shim.exit.cancelled() => log::info!("shutdown requested, exiting"),
        _ = term.recv() => {
            log::warn!("SIGTERM: tearing down every sandbox of this shim");
            shim.terminate_all().await;
        }
        _ = int.recv() => {
            log::warn!("SIGINT: tearing down every sandbox of this shim");
            shim.terminate_all().await;
        }
    }
    // Calls under way finish first (they may publish), then what they published is delivered.
    // containerd runs the `delete` action as soon as the connection closes: the socket goes
    // before the wait for events, so that action does not find it half gone.
    let _ = server.shutdown().await;
    if let Some(path) = socket_path {
        let _ = std::fs::remove_file(path);
    }
    if !events.flush(FLUSH_EVENTS_ON_EXIT).await {
        log::error!(
            "events still unanswered by containerd after {FLUSH_EVENTS_ON_EXIT:?}; exiting without them"
        );
    }
    Ok(())
}
