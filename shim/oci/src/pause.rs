//! `pause` and `resume`: runsc stops and restarts the sandbox's tasks itself (no cgroup
//! freezer involved).

use super::error::Result;
use crate::opened::{not_running, Opened};

pub async fn pause(c: &Opened) -> Result<()> {
    let id = &c.record.id;
    c.runtime.pause(id).await.map_err(|e| not_running(e, id))
}

pub async fn resume(c: &Opened) -> Result<()> {
    let id = &c.record.id;
    c.runtime.resume(id).await.map_err(|e| not_running(e, id))
}
