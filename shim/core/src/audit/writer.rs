//! The audit writer: appends performed off the caller's async thread, one at a time, in the order
//! they were handed over.
//!
//! An append takes the log's exclusive `flock` (shared with every other shim on the node) and
//! sometimes an `fsync`. A shim serves a whole pod from one async thread, so an append made there
//! would stop every other request of the pod for as long as another writer holds the lock or the
//! disk is slow. Lifecycle records are therefore queued here: the caller builds the record's line
//! (pure, microseconds), queues the write, and awaits its outcome without holding the thread.
//!
//! Each log file has its own queue, drained by one blocking task at a time (tokio's blocking
//! pool, which also keeps a paused test clock from jumping while a write is under way), so the
//! records land in the order they were queued, which is the order a trail's signature covers: a
//! record queued without waiting (the wall-clock limit firing) still lands before the exit record
//! queued after it. Per file rather than per process because a blocking task belongs to the
//! runtime that spawned it: with one queue, a task spawned by one runtime (one test's shim) could
//! run another runtime's write, whose paused clock would then jump while its write was under way.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::AuditError;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// A blocking task is draining `jobs`; it clears this, under the lock, when it finds the
    /// queue empty, so a job queued after that starts a new one.
    draining: bool,
}

/// One queue per log file, removed when drained so the map holds only files being written.
static QUEUES: Mutex<Option<HashMap<PathBuf, Queue>>> = Mutex::new(None);

fn with_queue<R>(path: &Path, f: impl FnOnce(&mut Queue) -> R) -> R {
    // A job runs outside the lock, so a panic in one never poisons it; be lenient anyway.
    let mut queues = QUEUES.lock().unwrap_or_else(|p| p.into_inner());
    let queues = queues.get_or_insert_with(HashMap::new);
    let queue = queues.entry(path.to_path_buf()).or_default();
    let out = f(queue);
    if queue.jobs.is_empty() && !queue.draining {
        queues.remove(path);
    }
    out
}

/// The outcome of a queued write; `None` if the write panicked.
struct Pending<T>(oneshot::Receiver<T>);

impl<T> Pending<T> {
    async fn outcome(self) -> Option<T> {
        self.0.await.ok()
    }
}

/// Queues an append to the log at `path` (see [`submit`]) and resolves to its result; a write
/// that panicked is [`AuditError::WriterStopped`].
pub(super) fn queue<T: Send + 'static>(
    path: &Path,
    write: impl FnOnce() -> Result<T, AuditError> + Send + 'static,
) -> impl std::future::Future<Output = Result<T, AuditError>> + Send + 'static {
    let pending = submit(path, write);
    let path = path.to_path_buf();
    async move {
        pending
            .outcome()
            .await
            .unwrap_or(Err(AuditError::WriterStopped { path }))
    }
}

/// Queues `write` behind every write to `path` queued before it. It runs even if the caller
/// never awaits the outcome. Outside a tokio runtime (no async thread to keep free) the calling
/// thread drains the queue itself when no blocking task is already doing so.
fn submit<T: Send + 'static>(
    path: &Path,
    write: impl FnOnce() -> T + Send + 'static,
) -> Pending<T> {
    let (tx, rx) = oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(write());
    });
    let runtime = tokio::runtime::Handle::try_current().ok();
    let start = with_queue(path, |q| {
        q.jobs.push_back(job);
        !std::mem::replace(&mut q.draining, true)
    });
    if start {
        let path = path.to_path_buf();
        match runtime {
            Some(rt) => {
                rt.spawn_blocking(move || drain(&path));
            }
            None => drain(&path),
        }
    }
    Pending(rx)
}

fn drain(path: &Path) {
    loop {
        let job = with_queue(path, |q| {
            let job = q.jobs.pop_front();
            if job.is_none() {
                q.draining = false;
            }
            job
        });
        let Some(job) = job else { return };
        // A panicking write answers its caller with `None` (its sender is dropped) and must not
        // strand the writes queued behind it.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}
