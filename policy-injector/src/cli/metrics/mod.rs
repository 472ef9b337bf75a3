//! `audit metrics`: the audit log followed into `policy_injector::metrics`, served over HTTP.
//! Two threads share the state: the follower folds lines in, each scrape renders it.

mod http;

use std::convert::Infallible;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;

use policy_injector::metrics::Metrics;

use crate::cli::follow;

/// Binds `listen` (before any reading, so a taken port fails at once), prints where it serves,
/// then follows `live` and answers scrapes until killed.
pub fn serve(live: &Path, listen: SocketAddr, poll: Duration) -> anyhow::Result<Infallible> {
    let listener =
        TcpListener::bind(listen).with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr().context("the listening address")?;
    let metrics = Arc::new(Mutex::new(Metrics::new()));
    let follower = follow::Follower::new(live, metrics.clone());
    std::thread::Builder::new()
        .name("follow".into())
        .spawn(move || follower.run(poll))
        .context("starting the log follower")?;
    // One line on stdout, for whoever started us on port 0.
    let mut out = std::io::stdout();
    writeln!(
        out,
        "serving http://{bound}/metrics from {}",
        live.display()
    )
    .and_then(|_| out.flush())
    .context("writing to stdout")?;
    let render = Arc::new(move || follow::lock(&metrics).render());
    http::serve(listener, render).context("serving")
}
