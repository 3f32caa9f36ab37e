//! A pool of reusable git worktrees per repository: in goes a repository, a base commit and a
//! branch name; out comes a [`Lease`] on a clean checkout of that base, and later, from
//! [`capture`](fn@capture), the commit that records everything the agent left in it.
//!
//! Layout under the pool root (always outside the repository):
//! `slot-N/` is a linked git worktree registered with the repository (`git worktree list` shows
//! it) and `slot-N.lock` is the file whose exclusive lock says the slot is leased and which
//! names the branch of its lease; a lease takes both under the pool's registry lock;
//! `repository` names the repository's canonical path (see [`orphans`]). Lock files are never
//! deleted while the repository exists: unlinking a lock file another process has already
//! opened would let two processes believe they hold the same slot (a pool whose repository is
//! gone goes whole, every lock held).
//!
//! Adding a worktree writes every file, so slots are kept and reset to the next base instead:
//! a forced checkout rewrites only what differs and removes untracked and ignored files.
//!
//! Its rooms: [`pool`] (the slots of one root: claiming one for a lease, clearing what no lease
//! holds), [`slot`] (building a slot and resetting it to a base), [`registry`] (the repository's
//! worktree registrations, written and read by hand), [`lease`] (a leased slot, opened only
//! through the git links mvk made), [`trusted`] (mvk's own copy of a slot's index),
//! [`capture`](mod@capture) (the agent's work as a commit), [`sweep`] (a worktree judged by stat
//! data: cleaned or reset in place), [`stage`] (the agent's changes staged and the rest swept,
//! in one walk) and [`tidy`] (what an agent may have tampered with, put right without following
//! a link); [`orphans`] finds and removes the pools whose repository is gone.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

mod capture;
mod lease;
pub(crate) mod orphans;
mod pool;
mod registry;
mod slot;
mod stage;
mod sweep;
#[cfg(test)]
mod tests;
mod tidy;
mod trusted;

pub(crate) use capture::capture;
#[cfg(test)]
pub(crate) use capture::head_of;
pub(crate) use capture::signature;
pub(crate) use lease::Lease;
pub(crate) use pool::Pool;
pub(crate) use sweep::clean_in_place;

/// The most mvk reads of a git link or a HEAD file: a path (`PATH_MAX`) and its prefix.
const LINK_MAX: u64 = 4096 + 64;

/// Failures of the worktree pool.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorktreeError {
    #[error("cannot {action} in `{path}`")]
    Git {
        action: String,
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("cannot {action} `{path}`")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("repository `{repo}` has no commits yet; make a first commit before running attempts")]
    NoCommits { repo: PathBuf },
    #[error("worktree root `{root}` is inside repository `{repo}`; pick a root outside it")]
    RootInsideRepo { root: PathBuf, repo: PathBuf },
    #[error("base commit `{base}` is not in repository `{repo}`")]
    BaseNotFound {
        base: Oid,
        repo: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("`{branch}` is not a valid branch name")]
    InvalidBranch { branch: String },
    #[error("branch `{branch}` is checked out in `{path}`; pick another branch name")]
    BranchCheckedOut { branch: String, path: PathBuf },
    #[error(
        "the git directory of worktree `{path}` now leads to `{found}`, not to the one mvk made for it"
    )]
    Relinked { path: PathBuf, found: PathBuf },
    #[error(
        "the work in worktree `{path}` names {what} `{id}` at `{file}`, which the repository does not have"
    )]
    MissingObject {
        path: PathBuf,
        file: String,
        what: &'static str,
        id: Oid,
    },
    #[error("no free worktree slot under `{root}` after trying {tried} slots")]
    PoolExhausted { root: PathBuf, tried: usize },
}

impl WorktreeError {
    /// Whether the same request may succeed a moment later: a neighbour's lease holding the
    /// branch, the disk, git's files in the middle of another process's write. Not one that
    /// can never be met (a bad branch name, a base the repository lacks, a root inside it, a
    /// repository without commits), nor a verdict on an agent's work.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(
            self,
            WorktreeError::Git { .. }
                | WorktreeError::Io { .. }
                | WorktreeError::BranchCheckedOut { .. }
                | WorktreeError::PoolExhausted { .. }
        )
    }
}

fn git_err(action: impl Into<String>, path: &Path) -> impl FnOnce(git2::Error) -> WorktreeError {
    let action = action.into();
    let path = path.to_path_buf();
    move |source| WorktreeError::Git {
        action,
        path,
        source,
    }
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> WorktreeError {
    let path = path.to_path_buf();
    move |source| WorktreeError::Io {
        action,
        path,
        source,
    }
}

fn canonical(path: &Path) -> Result<PathBuf, WorktreeError> {
    fs::canonicalize(path).map_err(io_err("resolve path", path))
}

fn same_path(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// The path to show for a repository: its working directory, or its git directory if bare.
fn display_path(repo: &Repository) -> PathBuf {
    repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf()
}
