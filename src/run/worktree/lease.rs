//! A leased slot in; what mvk may do with it out: its number, its retirement for good, and its
//! repository opened only while its git links still lead where mvk made them (links the agent
//! rewrote are put back and the lease refused). Dropping it gives the branch back, then the slot.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::run::exec::untrusted;

use super::pool::retired_path;
use super::tidy::replace_file;
use super::trusted::Trusted;
use super::{LINK_MAX, WorktreeError, git_err, io_err, same_path};

/// An exclusive lease on one slot, checked out at `base` on `branch`.
///
/// Dropping it releases the slot; the branch and whatever was captured on it stay.
#[derive(Debug)]
pub(crate) struct Lease {
    pub(crate) path: PathBuf,
    pub(crate) branch: String,
    pub(crate) base: Oid,
    pub(super) slot: usize,
    /// The worktree's own git directory and the repository's common one, as mvk made them:
    /// [`capture`] refuses a worktree whose links now lead elsewhere.
    pub(super) admin: PathBuf,
    pub(super) common: PathBuf,
    /// The bytes of the git links as mvk made them (`.git`, `gitdir`, `commondir`): put back
    /// before mvk opens the worktree, so a registration the agent rewrote never outlives it.
    pub(super) links: Vec<(PathBuf, Vec<u8>)>,
    /// mvk's own copy of the slot's index, outside every sandbox grant (see [`Trusted`]).
    pub(super) trusted: Trusted,
    /// The commit `capture` left the worktree exactly a checkout of, its index staged and
    /// everything else swept in the same walk: the gates' clean-in-place needs no walk of its
    /// own while nothing has run in it since (taken by the first that trusts it).
    pub(super) swept: std::sync::Mutex<Option<Oid>>,
    /// The worktree's repository as a reset in place left it ([`super::sweep::reset_in_place`]),
    /// holding in memory the index the reset wrote and [`Trusted`] kept, and the trees it read:
    /// taken by the first [`Lease::open`] after the reset, so that the capture stages against
    /// that index without reading and hashing the whole file again, and writes its tree from
    /// trees in memory (on a 20,000-file repository, some 8 ms of a 100 ms attempt). Only
    /// after a reset that read no attributes file and converted nothing: what such a
    /// repository caches of the worktree, an agent could rewrite keeping size and time.
    pub(super) held: std::sync::Mutex<Option<Held>>,
    /// Held open for its lock; closing the file releases it.
    pub(super) _lock: File,
}

/// The reset's repository (see [`Lease::held`]).
pub(super) struct Held(pub(super) Repository);

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Held").field(&self.0.path()).finish()
    }
}

impl Drop for Lease {
    /// Gives the branch back before the slot: an idle slot that still had the branch checked
    /// out would keep another slot from taking it (libgit2 will not move a branch checked out
    /// elsewhere), and the slot's next holder may be busy resetting it by then. Best effort: a
    /// slot left on its branch is detached by the next lease of that branch when it is idle.
    fn drop(&mut self) {
        // Never through links the agent rewrote: that could detach the main checkout's HEAD.
        if let Ok(repo) = self.open()
            && let Ok(at) = repo.head().and_then(|h| h.peel_to_commit())
        {
            let _ = repo.set_head_detached(at.id());
        }
    }
}

impl Lease {
    /// Number of the pool slot this lease holds.
    #[cfg(test)]
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// Gives the slot up for good, its directory left as it is: processes mvk could not end
    /// may still be in it (`escapees-survived`), and the next lease of it would be reset,
    /// checked, gated and judged while they write it. A marker beside it, `slot-N.retired`,
    /// written while the lease still holds the slot's lock, keeps every pool on this root (this
    /// run's, another mvk's) off that slot until [`Pool::gc`] removes the two.
    pub(crate) fn retire(self) -> Result<(), WorktreeError> {
        let marker = retired_path(&self.path, self.slot);
        fs::write(
            &marker,
            b"processes mvk could not end may still run in this slot\n",
        )
        .map_err(io_err("retire worktree slot", &marker))
    }

    /// Forgets that `capture` swept the worktree: what a test does to stand for a process
    /// that changed it since, unseen by the reaper.
    #[cfg(test)]
    pub(crate) fn forget_sweep(&self) {
        if let Ok(mut at) = self.swept.lock() {
            *at = None;
        }
    }

    /// The worktree's repository, if its git links still lead where mvk made them. The agent
    /// could write its worktree's `.git` file and git directory (`commondir`, `gitdir`): mvk
    /// must not commit, stage or move HEAD in whatever they now name (the main checkout's
    /// index and HEAD, another slot's). Links found rewritten are put back first (so the
    /// repository's registration of the worktree is whole again), and the lease is refused.
    /// The first call after a reset in place gets the reset's own repository ([`Lease::held`]),
    /// whose index in memory is the one mvk wrote; later calls open it anew.
    pub(super) fn open(&self) -> Result<Repository, WorktreeError> {
        let path = &self.path;
        if let Some(found) = self.restore_links() {
            return Err(WorktreeError::Relinked {
                path: path.clone(),
                found,
            });
        }
        let held = self.held.lock().ok().and_then(|mut held| held.take());
        let repo = match held {
            Some(Held(repo)) => repo,
            None => Repository::open(path).map_err(git_err("open worktree", path))?,
        };
        let workdir = repo.workdir().unwrap_or_else(|| repo.path());
        for (found, made) in [
            (repo.path(), &self.admin),
            (repo.commondir(), &self.common),
            (workdir, path),
        ] {
            if !same_path(found, made) {
                return Err(WorktreeError::Relinked {
                    path: path.clone(),
                    found: found.to_path_buf(),
                });
            }
        }
        Ok(repo)
    }

    /// Rewrites every git link that no longer holds what mvk wrote; out comes where the first
    /// rewritten one led (`None`: all intact). A link replaced by a symlink or a directory is
    /// removed, never written through. A link mvk cannot put back (the agent stood in the way)
    /// is the agent's doing like any other: the lease is refused all the same, and the slot,
    /// not healthy, is rebuilt before its next use.
    fn restore_links(&self) -> Option<PathBuf> {
        let mut found = None;
        for (file, made) in &self.links {
            // One byte more than mvk wrote tells a longer file from the same one.
            let now = untrusted::read(file, made.len() as u64 + 1);
            if now
                .as_ref()
                .is_ok_and(|now| now.as_deref() == Some(made.as_slice()))
            {
                continue;
            }
            if found.is_none() {
                found = Some(what_link_says(file));
            }
            if let Err(e) = replace_file(file, made) {
                tracing::warn!("could not put back the git link {}: {e}", file.display());
            }
        }
        // A `locked` file is never mvk's: it would make a later prune of the slot fail, and
        // libgit2 reads it whole before a prune (blocking, on a FIFO). Gone in any case; the
        // attempt fails when it was no small regular file.
        let locked = self.admin.join("locked");
        let lock = untrusted::open(&locked);
        let lock_sane = match &lock {
            Ok(untrusted::Found::Regular(_, n)) => *n <= LINK_MAX,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
            Ok(_) => false,
        };
        if !lock_sane {
            found.get_or_insert_with(|| what_link_says(&locked));
        }
        if !matches!(&lock, Err(e) if e.kind() == io::ErrorKind::NotFound) {
            let gone = match fs::symlink_metadata(&locked) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&locked),
                _ => fs::remove_file(&locked),
            };
            if let Err(e) = gone {
                tracing::warn!("could not remove {}: {e}", locked.display());
            }
        }
        // Not a link, but libgit2 reads it whole when it opens the worktree's HEAD (capture,
        // a reset): a sparse HEAD of gigabytes would cost that much memory. Such a HEAD holds
        // no commit, so the base stands in for it.
        let head = self.admin.join("HEAD");
        let sane =
            matches!(untrusted::open(&head), Ok(untrusted::Found::Regular(_, n)) if n <= LINK_MAX);
        if !sane {
            found.get_or_insert_with(|| what_link_says(&head));
            if let Err(e) = replace_file(&head, format!("{}\n", self.base).as_bytes()) {
                tracing::warn!("could not put back {}: {e}", head.display());
            }
        }
        found
    }
}

/// Where the rewritten link `file` leads, for the message: a symlink's target, a file's first
/// line (`gitdir: ` dropped), or what else is there. Nothing is followed, blocked on or read past
/// a page.
fn what_link_says(file: &Path) -> PathBuf {
    match untrusted::open(file) {
        Ok(untrusted::Found::Regular(_, n)) if n > LINK_MAX => {
            PathBuf::from(format!("<a file of {n} bytes>"))
        }
        Ok(untrusted::Found::Regular(f, _)) => {
            let mut said = Vec::new();
            let _ = io::Read::read_to_end(&mut io::Read::take(f, 4096), &mut said);
            let said = String::from_utf8_lossy(&said);
            let said = said.trim();
            PathBuf::from(said.strip_prefix("gitdir: ").unwrap_or(said))
        }
        Ok(untrusted::Found::Symlink(to)) => to,
        Ok(untrusted::Found::Other(kind)) => PathBuf::from(format!("<a {kind}>")),
        Err(e) => PathBuf::from(format!("<unreadable: {e}>")),
    }
}
