//! One error variant per install/uninstall step, each naming what failed.

use std::path::PathBuf;

use thiserror::Error;

use crate::command::CommandError;
use crate::config::merged::MergedConfigError;
use crate::cri::CriError;
use crate::files::FileError;
use crate::kube::KubeError;
use crate::plan::PlanError;
use crate::state::StateError;

#[derive(Debug, Error)]
pub enum InstallError {
    #[error("sources: {0}")]
    Sources(String),
    #[error("reading the containerd config: {0}")]
    ReadConfig(#[source] FileError),
    #[error("`containerd config default` for the missing config {path}: {source}")]
    DefaultConfig {
        path: PathBuf,
        #[source]
        source: CommandError,
    },
    #[error("planning the config change: {0}")]
    Plan(#[from] PlanError),
    #[error("copying files onto the host: {0}")]
    Files(#[source] FileError),
    #[error("writing the containerd config: {0}")]
    WriteConfig(#[source] FileError),
    #[error("`containerd config dump` of the candidate config: {0}")]
    Dump(#[source] CommandError),
    #[error("refusing to restart containerd: {0}")]
    Refused(#[source] MergedConfigError),
    #[error("restarting containerd: {source}{rollback}")]
    Restart {
        #[source]
        source: CommandError,
        rollback: String,
    },
    #[error("verifying over CRI after the restart: {source}{rollback}")]
    CriVerify {
        #[source]
        source: CriError,
        /// What the rollback did, for the message.
        rollback: String,
    },
    #[error("install state: {0}")]
    State(#[from] StateError),
    #[error("labelling the node: {0}")]
    Label(#[source] KubeError),
}

#[derive(Debug, Error)]
pub enum UninstallError {
    #[error("unlabelling the node (everything else was undone): {0}")]
    Label(#[source] KubeError),
    #[error("install state: {0}")]
    State(#[from] StateError),
    #[error("restoring the containerd config: {0}")]
    Config(#[source] FileError),
    #[error("removing our handlers from the changed config: {0}")]
    Plan(#[from] PlanError),
    #[error("restarting containerd: {0}")]
    Restart(#[source] CommandError),
    #[error("verifying over CRI after the restart: {0}")]
    CriVerify(#[source] CriError),
    #[error("removing installed files: {0}")]
    Files(#[source] FileError),
}
