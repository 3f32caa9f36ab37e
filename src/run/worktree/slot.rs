//! One slot of the pool: its number, a base and a branch in; out, the slot made a clean
//! checkout of the base on the branch, built from nothing when it is not a healthy worktree
//! (its registration written by hand, under the registry lock), else reset (in place when few
//! files differ), the branch first freed from any idle worktree that held it.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use git2::build::CheckoutBuilder;
use git2::{Oid, Repository, WorktreePruneOptions};

use crate::run::exec::untrusted;

use super::pool::Pool;
use super::registry::{register, registrations};
use super::sweep::reset_in_place;
use super::tidy::{clear_slot_dir, empty_but_git, replace_file};
use super::{LINK_MAX, WorktreeError, display_path, git_err, io_err, same_path};

impl Pool {
    /// Whether `path` is a working linked worktree of this repository.
    pub(super) fn slot_is_healthy(&self, main: &Repository, path: &Path) -> bool {
        let Ok(slot) = Repository::open(path) else {
            return false;
        };
        let Ok(common) = fs::canonicalize(slot.commondir()) else {
            return false;
        };
        let workdir_ok = slot.workdir().is_some_and(|w| same_path(w, path));
        let registered = git2::Worktree::open_from_repository(&slot)
            .and_then(|wt| wt.validate())
            .is_ok();
        // The registration must name this slot: `validate` only asks that what it names
        // exists, and an agent can point it at the main checkout.
        let gitdir = slot.path().join("gitdir");
        let registered_here = untrusted::read(&gitdir, LINK_MAX)
            .ok()
            .flatten()
            .and_then(|said| String::from_utf8(said).ok())
            .is_some_and(|said| same_path(Path::new(said.trim_end()), &path.join(".git")));
        slot.is_worktree()
            && workdir_ok
            && registered
            && registered_here
            && same_path(&common, main.commondir())
    }

    /// Builds slot `n` from nothing: drops whatever is left of it, then registers a linked
    /// worktree there with a detached HEAD at `base` and nothing checked out (`reset_slot`
    /// puts it on its branch and checks out the files).
    ///
    /// The registration is written by hand, as `git worktree add --no-checkout --detach`
    /// writes it (the layout is git's documented one: `worktrees/<name>/{gitdir,commondir,HEAD}`
    /// and the worktree's `.git` file), for two reasons. libgit2 adds a worktree only on a
    /// branch no HEAD names, and a neighbour's agent can keep rewriting its HEAD to name any
    /// branch it can see; and libgit2 checks the files out while the registry lock is held,
    /// which made a flow's first slots get built one at a time.
    pub(super) fn create_slot(
        &self,
        main: &Repository,
        n: usize,
        base: Oid,
    ) -> Result<(), WorktreeError> {
        let path = self.slot_path(n);
        let shown = display_path(main);
        main.find_commit(base)
            .map_err(git_err(format!("find base commit `{base}`"), &shown))?;
        let admin = {
            let _registry = self.lock_registry()?;
            // The directory first: a prune would try to delete it too, and fail the same way.
            clear_slot_dir(&path)?;
            // A new slot's files are all written afresh: no stat data of the old one applies.
            self.trusted(n).forget()?;
            self.remove_registrations(main, n)?;
            self.forget_relinked(main, n)?;
            let name = self.fresh_worktree_name(main, n)?;
            let admin = main.commondir().join("worktrees").join(&name);
            if let Err(e) = register(&self.git_dir, &admin, &path, base) {
                // Nothing half-made stays registered: a later prune or add must not trip on it.
                let _ = fs::remove_dir_all(&admin);
                let _ = fs::remove_dir_all(&path);
                return Err(e);
            }
            admin
        };
        // What was written must open as a linked worktree of this repository; otherwise the
        // registration goes again, so no one mistakes it for a slot.
        let opened = Repository::open(&path).and_then(|wt| {
            wt.is_worktree()
                .then_some(())
                .ok_or_else(|| git2::Error::from_str("not a linked worktree"))
        });
        if let Err(source) = opened {
            let _registry = self.lock_registry()?;
            let _ = fs::remove_dir_all(&admin);
            let _ = fs::remove_dir_all(&path);
            return Err(WorktreeError::Git {
                action: "open the new worktree".to_string(),
                path,
                source,
            });
        }
        Ok(())
    }

    /// A worktree name not in use by the repository: `mvk-<root tag>-<n>`, with a suffix when
    /// a leftover admin directory of that name cannot be removed.
    fn fresh_worktree_name(&self, main: &Repository, n: usize) -> Result<String, WorktreeError> {
        let admin = main.commondir().join("worktrees");
        let listed: BTreeSet<String> = registrations(main)?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        for k in 0..100 {
            let name = if k == 0 {
                format!("mvk-{}-{n}", self.root_tag)
            } else {
                format!("mvk-{}-{n}-{k}", self.root_tag)
            };
            let dir = admin.join(&name);
            // A directory of this slot's name that git does not list is what a crash in the
            // middle of `register` left (no `gitdir` yet): mvk's, and no one's now (the
            // registry lock is held).
            if !listed.contains(&name) && fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
                let _ = fs::remove_dir_all(&dir);
            }
            if !dir.exists() {
                return Ok(name);
            }
        }
        Err(WorktreeError::PoolExhausted {
            root: self.root.clone(),
            tried: 100,
        })
    }

    /// Drops the git directories of this slot's registrations (by name, which mvk chose) that
    /// now name another worktree: an agent rewrote their `gitdir`. Only the git directory goes;
    /// a prune would delete the working tree it names, which may be the main checkout.
    pub(super) fn forget_relinked(&self, main: &Repository, n: usize) -> Result<(), WorktreeError> {
        let path = self.slot_path(n);
        for (name, wt_path) in registrations(main)? {
            if self.slot_of_name(&name) != Some(n) || same_path(&wt_path, &path) {
                continue;
            }
            let admin = main.commondir().join("worktrees").join(&name);
            if fs::symlink_metadata(&admin).is_ok_and(|m| m.is_dir()) {
                fs::remove_dir_all(&admin)
                    .map_err(io_err("remove worktree registration", &admin))?;
            }
        }
        Ok(())
    }

    /// Prunes this slot's worktree registrations (by name, which mvk chose) that point at the
    /// slot. Returns whether one was pruned. Never by the path alone: another slot's agent can
    /// make its registration name this slot, and pruning it would pull its git directory from
    /// under that attempt.
    pub(super) fn remove_registrations(
        &self,
        main: &Repository,
        n: usize,
    ) -> Result<bool, WorktreeError> {
        let path = self.slot_path(n);
        let mut pruned = false;
        for (name, wt_path) in registrations(main)? {
            if self.slot_of_name(&name) != Some(n) || !same_path(&wt_path, &path) {
                continue;
            }
            let wt = main.find_worktree(&name).map_err(git_err(
                format!("look up worktree `{name}`"),
                main.commondir(),
            ))?;
            let mut opts = WorktreePruneOptions::new();
            // Locked too: an agent can write `locked` into its own registration, and a slot
            // that cannot be pruned could never be rebuilt.
            opts.valid(true).working_tree(true).locked(true);
            wt.prune(Some(&mut opts)).map_err(git_err(
                format!("prune worktree `{name}`"),
                main.commondir(),
            ))?;
            pruned = true;
        }
        Ok(pruned)
    }

    /// Makes sure no other worktree has `branch_ref` checked out, so it can be force-moved.
    /// A slot of this pool holding it gets a detached HEAD instead, unless it is leased *for*
    /// that branch (mvk's own record, in the slot's lock file): a HEAD the slot's agent wrote
    /// naming a neighbour's branch is no reason to refuse. The main worktree or a worktree
    /// outside the pool holding it is an error. HEAD files are read and written in the
    /// repository's own git directory, never through the links a worktree's agent can rewrite.
    pub(super) fn free_branch(
        &self,
        main: &Repository,
        branch_ref: &str,
        branch: &str,
        except: Option<&Path>,
    ) -> Result<(), WorktreeError> {
        if !main.is_bare() && head_target(main).as_deref() == Some(branch_ref) {
            return Err(WorktreeError::BranchCheckedOut {
                branch: branch.to_string(),
                path: display_path(main),
            });
        }
        // A branch that does not exist yet (each attempt's is new) is checked out by no one
        // mvk must wait for: skip reading every registered worktree, which a wide flow would
        // pay per attempt. (An agent's HEAD may name it all the same: `create_slot` frees the
        // branch again once it exists, before adding the worktree.)
        if main.find_reference(branch_ref).is_err() {
            return Ok(());
        }
        let except_slot = except.and_then(|e| self.slot_of_path(e));
        for (name, wt_path) in registrations(main)? {
            let slot = self.slot_of_name(&name);
            let skip = match slot {
                Some(n) => except_slot == Some(n),
                None => except.is_some_and(|e| same_path(e, &wt_path)),
            };
            if skip {
                continue;
            }
            let head = main.commondir().join("worktrees").join(&name).join("HEAD");
            // A neighbour's agent may be writing it now: bounded, never followed or blocked on.
            let Ok(Some(said)) = untrusted::read(&head, LINK_MAX) else {
                continue;
            };
            let said = String::from_utf8_lossy(&said);
            if said.trim().strip_prefix("ref: ") != Some(branch_ref) {
                continue;
            }
            let busy = || WorktreeError::BranchCheckedOut {
                branch: branch.to_string(),
                path: wt_path.clone(),
            };
            let Some(n) = slot else {
                return Err(busy());
            };
            // Leased for this very branch: its lock held and its file naming the branch. A
            // lease claims both under the registry lock, held here (see `claim_slot`), so a
            // file naming the branch under a lock held is never a crashed lease's leftover
            // that a neighbour has just begun to claim.
            if self.try_lock_slot(n)?.is_none()
                && fs::read_to_string(self.lock_path(n)).is_ok_and(|held| held == branch)
            {
                return Err(busy());
            }
            // Detached where the branch points now (what that HEAD resolved to).
            let at = main
                .refname_to_id(branch_ref)
                .or_else(|_| main.head().and_then(|h| h.peel_to_commit()).map(|c| c.id()))
                .map_err(git_err("read HEAD", &display_path(main)))?;
            replace_file(&head, format!("{at}\n").as_bytes())?;
        }
        Ok(())
    }

    /// The slot number of a worktree this pool registered, from its name (`mvk-<tag>-N`, or
    /// `mvk-<tag>-N-K`): mvk chose it, unlike the path its `gitdir` file says.
    fn slot_of_name(&self, name: &str) -> Option<usize> {
        let rest = name.strip_prefix(&format!("mvk-{}-", self.root_tag))?;
        let digits = rest.split('-').next()?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    /// Turns the healthy slot at `path` into a clean checkout of `base` on `branch`.
    pub(super) fn reset_slot(
        &self,
        main: &Repository,
        path: &Path,
        base: Oid,
        branch: &str,
    ) -> Result<Option<Repository>, WorktreeError> {
        let slot = Repository::open(path).map_err(git_err("open worktree", path))?;
        let commit = slot
            .find_commit(base)
            .map_err(git_err(format!("find base commit `{base}`"), path))?;
        {
            let _registry = self.lock_registry()?;
            // Detach first: libgit2 refuses to force-move the branch a worktree has checked
            // out, and the slot may still hold the branch it is about to be reset to.
            slot.set_head_detached(base)
                .map_err(git_err("detach HEAD", path))?;
            let branch_ref = format!("refs/heads/{branch}");
            self.free_branch(main, &branch_ref, branch, Some(path))?;
            // A reference, not `branch()`: libgit2 refuses to move a branch that a neighbour's
            // HEAD names, and an agent can write its HEAD to name any branch.
            slot.reference(&branch_ref, commit.id(), true, "mvk: reset attempt branch")
                .map_err(git_err(format!("reset branch `{branch}`"), path))?;
            slot.set_head(&branch_ref)
                .map_err(git_err(format!("check out branch `{branch}`"), path))?;
        }
        let tree = commit
            .tree()
            .map_err(git_err(format!("read tree of `{base}`"), path))?;
        let trusted = self.slot_of_path(path).map(|n| self.trusted(n));
        // The slot's index as mvk last wrote it, never the one its last agent (or the code its
        // gates ran) left: stat data there could pass any file off as the blob it names.
        let mut restored = false;
        if let Some(t) = &trusted {
            restored = t.restore(slot.path())?;
            t.forget()?;
        }
        let mut index = slot.index().map_err(git_err("open index", path))?;
        // Most resets change a few files: only those are written. A full checkout walks and
        // compares every file of the tree, and was a third of a wide flow's CPU.
        let fast = restored && reset_in_place(&slot, &self.git_dir, path, &tree, &mut index)?;
        if !fast {
            // Nothing the last agent left is checked out over: libgit2 rewrites a file that
            // differs by opening its path with O_TRUNC, which writes through a symlink the
            // agent put there (to `~/.bashrc`) or a hard link it made (review r8d, W1). The
            // worktree is emptied first, through descriptors, so the checkout writes only new
            // files. What cannot be removed fails the reset, and the slot is rebuilt.
            empty_but_git(path)?;
            index.clear().map_err(git_err("clear index", path))?;
            index.write().map_err(git_err("write index", path))?;
            // `git_reset` would drop the remove-untracked/ignored flags, so check out by hand.
            let mut checkout = CheckoutBuilder::new();
            checkout.force().remove_untracked(true).remove_ignored(true);
            slot.checkout_tree(tree.as_object(), Some(&mut checkout))
                .map_err(git_err(format!("check out `{base}`"), path))?;
            // The checkout leaves entries of files it did not touch alone; reading the tree
            // makes the index exactly the base (stat data of unchanged entries is kept).
            index.read(true).map_err(git_err("read index", path))?;
            index
                .read_tree(&tree)
                .map_err(git_err("reset index", path))?;
        }
        clear_hiding_flags(&mut index).map_err(git_err("reset index", path))?;
        // Version 4 compresses each path against the one before: a fifth fewer bytes for the
        // SHA-1 libgit2 computes over the whole file at every read and write, four times an
        // attempt. Git reads it since 1.8.
        index.set_version(4).map_err(git_err("write index", path))?;
        index.write().map_err(git_err("write index", path))?;
        slot.cleanup_state()
            .map_err(git_err("clear merge or rebase state", path))?;
        if let Some(t) = &trusted {
            t.keep(slot.path())?;
        }
        // The repository holds the index it just wrote, which the copy now holds too: the
        // capture after the agent need not read and hash it again (see [`Lease::held`]). Not
        // after a checkout, which may have read attributes files the agent can rewrite.
        drop((index, tree, commit));
        Ok((fast && trusted.is_some()).then_some(slot))
    }
}

/// Clears the assume-unchanged and skip-worktree bits of every entry. `read_tree` keeps the
/// flags of entries it does not change, so a bit one lease's agent set would make `capture`
/// blind to the next lease's edits of that file.
fn clear_hiding_flags(index: &mut git2::Index) -> Result<(), git2::Error> {
    const ASSUME_UNCHANGED: u16 = 0x8000;
    const SKIP_WORKTREE: u16 = 1 << 14;
    let flagged: Vec<git2::IndexEntry> = index
        .iter()
        .filter(|e| e.flags & ASSUME_UNCHANGED != 0 || e.flags_extended & SKIP_WORKTREE != 0)
        .collect();
    for mut entry in flagged {
        entry.flags &= !ASSUME_UNCHANGED;
        entry.flags_extended &= !SKIP_WORKTREE;
        index.add(&entry)?;
    }
    Ok(())
}

/// Symbolic target of HEAD (`refs/heads/...`), `None` when detached or unreadable.
fn head_target(repo: &Repository) -> Option<String> {
    let head = repo.find_reference("HEAD").ok()?;
    head.symbolic_target().ok().flatten().map(str::to_string)
}
