//! The pool of one root: a repository and a root in; out, a [`Lease`] on one of the root's
//! slots (claimed under the registry lock, its lock file naming the lease's branch; reused, or
//! built afresh by [`slot`](super::slot)), and the clearing of what no lease holds: stale git
//! locks, slots (`gc`), the scratch branches of earlier versions' builds.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, Oid, Repository};

use super::lease::Lease;
use super::registry::{link_files, registrations};
use super::tidy::{clear_slot_dir, make_dirs_writable};
use super::trusted::Trusted;
use super::{WorktreeError, canonical, display_path, git_err, io_err, same_path};

/// Upper bound on slot numbers tried before giving up; far above any sane concurrency.
const MAX_SLOTS: usize = 4096;
/// Where slot builds of earlier mvk versions put a scratch branch for the moment of the build,
/// as `<prefix><root tag>-<slot>-<unguessable>`: [`Pool::gc_scratch`] deletes those left behind.
const SCRATCH_PREFIX: &str = "refs/heads/mvk-scratch/";

/// Worktree slots of one repository under one root directory.
///
/// Holds only paths (the repository is reopened per call), so it is `Send + Sync` and
/// several processes may use pools on the same root at once: slot locks keep them apart.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    /// The repository's common git directory (`.git` of the main worktree).
    pub(super) git_dir: PathBuf,
    /// Canonical root holding `slot-N` directories and their lock files.
    pub(super) root: PathBuf,
    /// Short hash of `root`, so worktree names of pools on different roots never collide.
    pub(super) root_tag: String,
}

/// Writes the branch a slot's lease holds into the slot's lock file, which holds nothing else
/// (empty: a lease of no branch, as `gc`'s).
fn record_lease(lock: &File, branch: &str) -> io::Result<()> {
    lock.set_len(0)
        .and_then(|()| std::os::unix::fs::FileExt::write_all_at(lock, branch.as_bytes(), 0))
}

/// Opens (creating) the lock file at PATH, without locking it yet.
fn open_lock(path: &Path) -> Result<File, WorktreeError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_err("open lock file", path))
}

/// The marker of a retired slot (see [`Lease::retire`]) `n`, whose directory is `slot`.
pub(super) fn retired_path(slot: &Path, n: usize) -> PathBuf {
    slot.with_file_name(format!("slot-{n}.retired"))
}

impl Pool {
    /// Opens the pool for the repository at `repo_path` (its main worktree, a linked worktree or
    /// its git directory) with slots under `root`, creating `root` if needed.
    pub(crate) fn open(repo_path: &Path, root: &Path) -> Result<Pool, WorktreeError> {
        let repo = Repository::open(repo_path).map_err(git_err("open repository", repo_path))?;
        let git_dir = canonical(repo.commondir())?;
        let main = Repository::open(&git_dir).map_err(git_err("open repository", &git_dir))?;
        let shown = display_path(&main);
        if main.is_empty().map_err(git_err("read HEAD", &shown))? {
            return Err(WorktreeError::NoCommits { repo: shown });
        }
        fs::create_dir_all(root).map_err(io_err("create worktree root", root))?;
        let root = canonical(root)?;
        let mut inside = vec![git_dir.clone()];
        if let Some(workdir) = main.workdir() {
            inside.push(canonical(workdir)?);
        }
        if inside.iter().any(|repo_dir| root.starts_with(repo_dir)) {
            return Err(WorktreeError::RootInsideRepo { root, repo: shown });
        }
        // The path the default root hashes (see `default_root`), whoever chose this root.
        record_owner(&root, &canonical(repo_path)?)?;
        let hash = blake3::hash(root.as_os_str().as_encoded_bytes());
        let root_tag = hash.to_hex()[..8].to_string();
        Ok(Pool {
            git_dir,
            root,
            root_tag,
        })
    }

    /// Where the pool of `repo_path` lives unless the caller says otherwise:
    /// `$MVK_WORKTREE_ROOT/<hash>` if that variable is set, else
    /// `$XDG_CACHE_HOME/mvk/worktrees/<hash>` or `~/.cache/mvk/worktrees/<hash>`, where `<hash>`
    /// is the first 16 hex digits of the blake3 hash of the canonical repository path.
    pub(crate) fn default_root(repo_path: &Path) -> PathBuf {
        default_root_from(
            repo_path,
            std::env::var_os(crate::env::MVK_WORKTREE_ROOT),
            std::env::var_os(crate::env::XDG_CACHE_HOME),
            std::env::var_os(crate::env::HOME),
        )
    }

    /// The canonical directory holding the slots.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Takes an idle slot, or creates one, and makes it a clean checkout of `base` on `branch`
    /// (created, or force-reset to `base` if it exists). Untracked and ignored files left by a
    /// previous lease are removed and the index matches `base`, so `git status` is clean.
    pub(crate) fn acquire(&self, base: Oid, branch: &str) -> Result<Lease, WorktreeError> {
        let branch_ref = format!("refs/heads/{branch}");
        if branch.is_empty() || !git2::Reference::is_valid_name(&branch_ref) {
            return Err(WorktreeError::InvalidBranch {
                branch: branch.to_string(),
            });
        }
        let main = self.main()?;
        if let Err(source) = main.find_commit(base) {
            return Err(WorktreeError::BaseNotFound {
                base,
                repo: display_path(&main),
                source,
            });
        }
        let (slot, lock) = self.claim_slot(branch)?;
        let path = self.slot_path(slot);
        let reset = if self.slot_is_healthy(&main, &path) {
            match self.reset_slot(&main, &path, base, branch) {
                Ok(held) => Some(held),
                // Rebuilding would not help, and would throw away a healthy slot.
                Err(e @ WorktreeError::BranchCheckedOut { .. }) => return Err(e),
                // A slot the agent damaged beyond a checkout (permissions, a broken `.git`)
                // is rebuilt from scratch rather than failing the attempt.
                Err(_) => None,
            }
        } else {
            None
        };
        let held = match reset {
            Some(held) => held,
            None => {
                self.create_slot(&main, slot, base)?;
                self.reset_slot(&main, &path, base, branch)?
            }
        };
        // The reset's own repository, where it is kept, names the git directory it just wrote.
        let admin = match &held {
            Some(repo) => canonical(repo.path())?,
            None => Repository::open(&path)
                .map_err(git_err("open worktree", &path))
                .and_then(|r| canonical(r.path()))?,
        };
        let mut links = Vec::new();
        for file in link_files(&path, &admin) {
            let bytes = fs::read(&file).map_err(io_err("read git link", &file))?;
            links.push((file, bytes));
        }
        Ok(Lease {
            path,
            branch: branch.to_string(),
            base,
            slot,
            admin,
            common: self.git_dir.clone(),
            links,
            trusted: self.trusted(slot),
            swept: std::sync::Mutex::new(None),
            held: std::sync::Mutex::new(held.map(super::lease::Held)),
            _lock: lock,
        })
    }

    /// Removes the lock files git left in the git directories of the slots no one leases
    /// (`index.lock`, `HEAD.lock`): a kill inside libgit2's write of a slot's index or HEAD
    /// leaves one, which would fail the slot's next reset. A slot is judged idle as a lease
    /// claims one (its lock taken under the registry lock), so a slot in use is never touched.
    /// Out come the files removed.
    pub(crate) fn clear_idle_locks(&self) -> Result<Vec<PathBuf>, WorktreeError> {
        let main = self.main()?;
        let mut removed = Vec::new();
        for n in self.slot_numbers_on_disk()? {
            // Never a retired slot, where processes mvk could not end may still run git.
            let Some(_lock) = self.claim_idle(n, false)? else {
                continue;
            };
            // The slot's git directory as the repository registers it
            // (`worktrees/NAME`, whose `gitdir` names this slot), never through the slot's own
            // `.git`, which a process left running there could point anywhere.
            let path = self.slot_path(n);
            for (name, wt_path) in registrations(&main)? {
                if self.slot_of_path(&wt_path) != Some(n) || !same_path(&wt_path, &path) {
                    continue;
                }
                let admin = main.commondir().join("worktrees").join(&name);
                for lock in ["index.lock", "HEAD.lock"] {
                    let file = admin.join(lock);
                    match fs::symlink_metadata(&file) {
                        Ok(meta) if meta.is_file() => {
                            fs::remove_file(&file).map_err(io_err("remove stale lock", &file))?;
                            removed.push(file);
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_err("read", &file)(e)),
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Removes every slot that is not leased, together with its git worktree registration (and
    /// the marker of a retired one: its number is free again). Branches stay. Returns the slot
    /// directories removed (or whose stale registration was pruned), sorted.
    pub(crate) fn gc(&self) -> Result<Vec<PathBuf>, WorktreeError> {
        let main = self.main()?;
        let mut slots = self.slot_numbers_on_disk()?;
        for (_, wt_path) in registrations(&main)? {
            if let Some(n) = self.slot_of_path(&wt_path) {
                slots.insert(n);
            }
        }
        let mut removed = Vec::new();
        for n in slots {
            let Some(_lock) = self.claim_idle(n, true)? else {
                continue;
            };
            let path = self.slot_path(n);
            let existed = path.exists();
            // As a rebuild does, the directory first (a prune would fail on what cannot be
            // deleted): directories made writable, what still cannot go set aside.
            clear_slot_dir(&path)?;
            self.forget_relinked(&main, n)?;
            let pruned = self.remove_registrations(&main, n)?;
            // Its stat data means nothing to a slot built again.
            self.trusted(n).forget()?;
            let retired = retired_path(&path, n);
            match fs::remove_file(&retired) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io_err("remove", &retired)(e));
                }
                _ => {}
            }
            if existed || pruned {
                removed.push(path);
            }
        }
        // Slots set aside because something in them could not be removed: another try.
        if let Ok(entries) = fs::read_dir(&self.root) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let aside = name
                    .to_str()
                    .and_then(|n| n.split_once(".broken-"))
                    .is_some_and(|(slot, _)| parse_slot_name(slot, "").is_some());
                if aside && entry.file_type().is_ok_and(|t| t.is_dir()) {
                    make_dirs_writable(&entry.path());
                    if fs::remove_dir_all(entry.path()).is_ok() {
                        removed.push(entry.path());
                    }
                }
            }
        }
        removed.sort();
        Ok(removed)
    }

    /// Deletes the scratch branches this pool's slot builds left behind (earlier mvk versions
    /// built a slot off one, and died between creating it and dropping it), or with `dry_run`
    /// only names them; out come their short names, sorted. Under the registry lock, which such
    /// a build (an older mvk on the same pool) holds from its scratch branch's creation to its
    /// deletion: no branch a build is using now is taken. Other pools' are left alone: their
    /// builds hold their own locks.
    pub(crate) fn gc_scratch(&self, dry_run: bool) -> Result<Vec<String>, WorktreeError> {
        let main = self.main()?;
        let shown = display_path(&main);
        let _registry = self.lock_registry()?;
        let glob = format!("{SCRATCH_PREFIX}{}-*", self.root_tag);
        let names: Vec<String> = main
            .references_glob(&glob)
            .map_err(git_err("list scratch branches", &shown))?
            .names()
            .filter_map(|n| n.ok().map(str::to_string))
            .collect();
        let mut gone = Vec::new();
        for name in names {
            if !dry_run {
                // The reference, not the branch: `Branch::delete` refuses one a HEAD names (a
                // slot mvk died building, or an agent's planted HEAD), and none of them holds
                // anything.
                match main.find_reference(&name).and_then(|mut r| r.delete()) {
                    Err(e) if e.code() == ErrorCode::NotFound => continue,
                    deleted => {
                        deleted.map_err(git_err(format!("delete branch `{name}`"), &shown))?
                    }
                }
            }
            gone.push(name.trim_start_matches("refs/heads/").to_string());
        }
        gone.sort();
        Ok(gone)
    }

    pub(super) fn main(&self) -> Result<Repository, WorktreeError> {
        Repository::open(&self.git_dir).map_err(git_err("open repository", &self.git_dir))
    }

    pub(super) fn slot_path(&self, n: usize) -> PathBuf {
        self.root.join(format!("slot-{n}"))
    }

    pub(super) fn lock_path(&self, n: usize) -> PathBuf {
        self.root.join(format!("slot-{n}.lock"))
    }

    pub(super) fn trusted(&self, n: usize) -> Trusted {
        Trusted(self.root.join(format!("slot-{n}.index")))
    }

    /// Waits for, then holds, the lock on the repository's worktree registry for this pool:
    /// libgit2 reads every worktree's admin files when it adds one or moves a branch, and one
    /// half-written by a neighbour (another task, or another mvk) makes it fail
    /// ("already checked out").
    pub(super) fn lock_registry(&self) -> Result<File, WorktreeError> {
        let path = self.root.join("registry.lock");
        let file = open_lock(&path)?;
        file.lock().map_err(io_err("lock registry", &path))?;
        Ok(file)
    }

    /// Slot number of a path directly under the root named `slot-N`.
    pub(super) fn slot_of_path(&self, path: &Path) -> Option<usize> {
        let parent = path.parent()?;
        if !same_path(parent, &self.root) {
            return None;
        }
        parse_slot_name(path.file_name()?.to_str()?, "")
    }

    /// Slot numbers that have a directory or a lock file under the root.
    fn slot_numbers_on_disk(&self) -> Result<BTreeSet<usize>, WorktreeError> {
        let mut found = BTreeSet::new();
        let entries = fs::read_dir(&self.root).map_err(io_err("list worktree root", &self.root))?;
        for entry in entries {
            let entry = entry.map_err(io_err("list worktree root", &self.root))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Some(n) = parse_slot_name(name, ".lock").or_else(|| parse_slot_name(name, "")) {
                found.insert(n);
            }
        }
        Ok(found)
    }

    /// [`Pool::try_lock_slot`], `None` too when the slot is retired: looked for once its lock
    /// is held, since the lease that retires it writes the marker before it lets it go.
    fn try_lock_slot_in_use(&self, n: usize) -> Result<Option<File>, WorktreeError> {
        let lock = self.try_lock_slot(n)?;
        Ok(lock.filter(|_| fs::symlink_metadata(retired_path(&self.slot_path(n), n)).is_err()))
    }

    /// Locks slot `n` if nobody holds it; `None` when it is leased.
    pub(super) fn try_lock_slot(&self, n: usize) -> Result<Option<File>, WorktreeError> {
        let path = self.lock_path(n);
        let file = open_lock(&path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(source)) => Err(WorktreeError::Io {
                action: "lock slot",
                path,
                source,
            }),
        }
    }

    /// Claims slot `n` when no one leases it (a retired one too with `retired`), as a lease
    /// claims one (see [`Pool::claim_slot`]) but for no branch; `None` when it is leased.
    fn claim_idle(&self, n: usize, retired: bool) -> Result<Option<File>, WorktreeError> {
        let _registry = self.lock_registry()?;
        let lock = if retired {
            self.try_lock_slot(n)?
        } else {
            self.try_lock_slot_in_use(n)?
        };
        if let Some(lock) = &lock {
            record_lease(lock, "").map_err(io_err("record the lease in", &self.lock_path(n)))?;
        }
        Ok(lock)
    }

    /// Claims a slot for a lease of `branch`: its lock taken and its lock file naming the
    /// branch, both under the registry lock, which `free_branch` holds while it judges whether
    /// a live lease holds a branch. Taken apart, a neighbour's judgement could fall between the
    /// two: a slot a crash left on `branch` would look leased for it (its lock newly held, its
    /// file still naming the dead lease's branch), and the branch could never be made again.
    fn claim_slot(&self, branch: &str) -> Result<(usize, File), WorktreeError> {
        let _registry = self.lock_registry()?;
        let (slot, lock) = self.lock_slot()?;
        record_lease(&lock, branch)
            .map_err(io_err("record the lease in", &self.lock_path(slot)))?;
        Ok((slot, lock))
    }

    /// Locks an existing idle slot if there is one (lowest number first), else the lowest
    /// free number; never a retired one (see [`Lease::retire`]). Only under the registry lock
    /// (see [`Pool::claim_slot`]).
    fn lock_slot(&self) -> Result<(usize, File), WorktreeError> {
        let on_disk = self.slot_numbers_on_disk()?;
        for &n in &on_disk {
            if self.slot_path(n).is_dir()
                && let Some(lock) = self.try_lock_slot_in_use(n)?
            {
                return Ok((n, lock));
            }
        }
        for n in 0..MAX_SLOTS {
            if on_disk.contains(&n) && self.slot_path(n).is_dir() {
                continue;
            }
            if let Some(lock) = self.try_lock_slot_in_use(n)? {
                return Ok((n, lock));
            }
        }
        Err(WorktreeError::PoolExhausted {
            root: self.root.clone(),
            tried: MAX_SLOTS,
        })
    }
}

/// `slot-N` + `suffix` → `N`.
pub(super) fn parse_slot_name(name: &str, suffix: &str) -> Option<usize> {
    let digits = name.strip_prefix("slot-")?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn default_root_from(
    repo_path: &Path,
    mvk_root: Option<OsString>,
    xdg_cache: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    let repo = fs::canonicalize(repo_path).unwrap_or_else(|_| repo_path.to_path_buf());
    home_from(mvk_root, xdg_cache, home).join(tag_of(&repo))
}

/// The directory holding every repository's pool: `$MVK_WORKTREE_ROOT`, else the cache's.
pub(super) fn home_from(
    mvk_root: Option<OsString>,
    xdg_cache: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    let non_empty = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(root) = non_empty(mvk_root) {
        return root;
    }
    // The XDG spec says relative values are invalid and must be ignored.
    let cache = non_empty(xdg_cache)
        .filter(|p| p.is_absolute())
        .or_else(|| non_empty(home).map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("mvk").join("worktrees")
}

/// The name of the pool of the repository at the canonical path `repo`: the first 16 hex
/// digits of the blake3 hash of the path.
pub(super) fn tag_of(repo: &Path) -> String {
    blake3::hash(repo.as_os_str().as_encoded_bytes()).to_hex()[..16].to_string()
}

/// Writes `repo` into the pool's record (see [`super::orphans`]) unless it already holds it:
/// what `mvk gc --all` reads to tell a pool whose repository is gone.
fn record_owner(root: &Path, repo: &Path) -> Result<(), WorktreeError> {
    let file = root.join(super::orphans::RECORD);
    let bytes = repo.as_os_str().as_encoded_bytes();
    if crate::run::exec::untrusted::read(&file, super::LINK_MAX)
        .is_ok_and(|found| found.as_deref() == Some(bytes))
    {
        return Ok(());
    }
    super::tidy::replace_file(&file, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_root_prefers_env_then_xdg_then_home() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path();
        let canon = fs::canonicalize(repo).expect("canon");
        let tag = blake3::hash(canon.as_os_str().as_encoded_bytes()).to_hex()[..16].to_string();
        let root = |m: Option<&str>, x: Option<&str>, h: Option<&str>| {
            default_root_from(
                repo,
                m.map(Into::into),
                x.map(Into::into),
                h.map(Into::into),
            )
        };
        assert_eq!(
            root(Some("/pools"), Some("/xdg"), Some("/home/u")),
            Path::new("/pools").join(&tag)
        );
        assert_eq!(
            root(Some(""), Some("/xdg"), Some("/home/u")),
            Path::new("/xdg/mvk/worktrees").join(&tag)
        );
        assert_eq!(
            root(None, Some("relative"), Some("/home/u")),
            Path::new("/home/u/.cache/mvk/worktrees").join(&tag)
        );
        assert_eq!(tag.len(), 16);
        // Same repository through a different spelling of its path: same root.
        let dotted = repo.join(".");
        assert_eq!(
            default_root_from(&dotted, None, Some("/xdg".into()), None),
            root(None, Some("/xdg"), None)
        );
    }
}
