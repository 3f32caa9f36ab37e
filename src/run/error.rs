//! The interpreter's own failures in (the ledger, git, the disk, a process that would not
//! start, a definition a resume cannot carry on); out, one typed error the CLI maps to exit 70,
//! or to 71 when the disk is full.

use std::path::PathBuf;

use crate::ledger;
use crate::run::git::land::LandError;
use crate::run::judge::gate;
use crate::run::{trail, worktree};

#[derive(Debug, thiserror::Error)]
pub(crate) enum RunError {
    #[error("cannot {action} `{}`", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot {action}")]
    Git {
        action: String,
        #[source]
        source: git2::Error,
    },
    #[error(transparent)]
    Worktree(#[from] worktree::WorktreeError),
    #[error(transparent)]
    Ledger(#[from] ledger::LedgerError),
    #[error(transparent)]
    Trail(#[from] trail::TrailError),
    #[error(transparent)]
    Land(#[from] LandError),
    #[error(transparent)]
    Seal(crate::run::git::seal::SealError),
    #[error(transparent)]
    Gate(gate::GateError),
    #[error("cannot run agent `{agent}`")]
    Agent {
        agent: String,
        #[source]
        source: crate::run::exec::process::ProcessError,
    },
    #[error("template `{template}` does not render{}: {message}", line.map_or(String::new(), |l| format!(" at line {l}")))]
    Template {
        template: String,
        message: String,
        line: Option<usize>,
    },
    #[error("{message}")]
    Config { message: String },
    /// A request from a Temporal workflow that no honest one sends (an answer to one of its
    /// activities came from someone else): refused, and the workflow fails on it.
    #[error("{message}")]
    #[cfg_attr(not(feature = "temporal"), allow(dead_code))]
    Refused { message: String },
    /// The executor that runs attempts elsewhere (Temporal) failed: the server, a worker.
    #[error("{message}")]
    #[cfg_attr(not(feature = "temporal"), allow(dead_code))]
    Executor { message: String },
    #[error("a worker thread doing `{action}` ended abnormally")]
    Worker {
        action: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Runs F, a git or filesystem step that takes a while (a checkout, a commit of a worktree, a
/// merge), on tokio's blocking pool: a flow's tasks are futures of one task, so a step run in
/// place would stall every other task's agent, gate and landing until it ended.
pub(crate) async fn blocking<T, F>(action: &'static str, f: F) -> Result<T, RunError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| RunError::Worker { action, source })
}

impl RunError {
    /// Whether the error is the disk (or a file-size limit) running out of room while mvk wrote
    /// its ledger, trail or repository: the run is then left as it stands, to be resumed.
    pub(crate) fn is_out_of_space(&self) -> bool {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && (matches!(
                    io.kind(),
                    std::io::ErrorKind::StorageFull
                        | std::io::ErrorKind::FileTooLarge
                        | std::io::ErrorKind::QuotaExceeded
                ))
            {
                return true;
            }
            if let Some(rusqlite::Error::SqliteFailure(f, _)) = e.downcast_ref::<rusqlite::Error>()
                && matches!(
                    f.code,
                    rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::SystemIoFailure
                )
            {
                return true;
            }
            if let Some(g) = e.downcast_ref::<git2::Error>()
                && g.message().contains("No space left")
            {
                return true;
            }
            next = e.source();
        }
        false
    }
}
