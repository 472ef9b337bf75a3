//! The signals a guard passes on to the container's init: the engine sends them to "the
//! container's pid", which is the guard's.

use tokio::signal::unix::{signal, SignalKind};

/// The signals a guard passes on to the container's init.
pub(crate) struct Forwarded {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Forwarded {
    pub(crate) fn new() -> Forwarded {
        let streams = [
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
        ]
        .into_iter()
        .filter_map(|(n, k)| signal(k).ok().map(|s| (n, s)))
        .collect();
        Forwarded { streams }
    }

    pub(crate) async fn next(&mut self) -> i32 {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let futures = self
            .streams
            .iter_mut()
            .map(|(n, s)| {
                let n = *n;
                Box::pin(async move {
                    s.recv().await;
                    n
                })
            })
            .collect::<Vec<_>>();
        futures_select_all(futures).await
    }
}

/// The first of several futures to finish (a few, so polling them all is cheap).
async fn futures_select_all<F: std::future::Future<Output = i32> + Unpin>(
    mut futures: Vec<F>,
) -> i32 {
    std::future::poll_fn(move |cx| {
        for f in futures.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}
