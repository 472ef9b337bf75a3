//! `audit metrics`: the audit log followed into `policy_injector::metrics`, served over HTTP.
//! Two kinds of thread share the state: the follower folds lines in, each scrape renders it.

mod conn;
mod http;

use std::convert::Infallible;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context as _};

use policy_injector::metrics::Metrics;

use crate::cli::args::MetricsListen;
use crate::cli::follow;

/// Checks who may read (a non-loopback address needs a token), binds `listen` (before any
/// reading, so a taken port fails at once), prints where it serves, then follows `live` and
/// answers scrapes until killed.
pub fn serve(live: &Path, listen: MetricsListen, poll: Duration) -> anyhow::Result<Infallible> {
    let token = listen
        .bearer_token_file
        .as_deref()
        .map(read_token)
        .transpose()?;
    // What node exporters do: serve the node itself, or anyone the network lets in only with
    // a credential. Not a flag to forget: serving the pod network openly is refused.
    if token.is_none() && !listen.addr.ip().is_loopback() {
        bail!(
            "{} is not a loopback address: give --bearer-token-file, so only a scraper holding the token reads the metrics",
            listen.addr
        );
    }
    let listener = TcpListener::bind(listen.addr)
        .with_context(|| format!("cannot listen on {}", listen.addr))?;
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
    let site = Arc::new(conn::Site {
        render: Box::new(move || follow::lock(&metrics).render()),
        token,
    });
    conn::serve(listener, site, conn::LIMITS).context("serving")
}

/// The token in `path`, without trailing whitespace (a file written with `echo` ends in a
/// newline that no client sends).
fn read_token(path: &Path) -> anyhow::Result<Vec<u8>> {
    let text = std::fs::read(path)
        .with_context(|| format!("cannot read the bearer token file {}", path.display()))?;
    let token = text.trim_ascii_end().to_vec();
    if token.is_empty() || token.iter().any(|b| !b.is_ascii_graphic()) {
        bail!(
            "{}: the bearer token must be one word of printable ASCII",
            path.display()
        );
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_newline_is_not_part_of_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc123\n").unwrap();
        assert_eq!(read_token(&path).unwrap(), b"abc123");
    }

    #[test]
    fn an_empty_or_spaced_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        for bad in ["", "\n", "two words\n"] {
            std::fs::write(&path, bad).unwrap();
            assert!(read_token(&path).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_non_loopback_address_without_a_token_is_refused_before_binding() {
        let listen = MetricsListen {
            addr: "0.0.0.0:0".parse().unwrap(),
            bearer_token_file: None,
        };
        let err = serve(
            Path::new("/nonexistent/audit.jsonl"),
            listen,
            Duration::from_secs(1),
        )
        .err()
        .unwrap();
        assert!(
            format!("{err:#}").contains("--bearer-token-file"),
            "{err:#}"
        );
    }
}
