//! A pool of reusable git worktrees per repository: in goes a repository, a base commit and a
//! branch name; out comes a [`Lease`] on a clean checkout of that base, and later, from
//! [`capture`], the commit that records everything the agent left in it.
//!
//! Layout under the pool root (always outside the repository):
//! `slot-N/` is a linked git worktree registered with the repository (`git worktree list` shows
//! it) and `slot-N.lock` is the file whose exclusive lock says the slot is leased and which
//! names the branch of its lease; a lease takes both under the pool's registry lock. Lock files
//! are never deleted: unlinking a lock file another process has already opened would let two
//! processes believe they hold the same slot.
//!
//! Adding a worktree writes every file, so slots are kept and reset to the next base instead:
//! a forced checkout rewrites only what differs and removes untracked and ignored files.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{ErrorCode, IndexAddOption, Oid, Repository, Signature, WorktreePruneOptions};

use crate::run::exec::untrusted;

/// Name and email used for capture commits when the repository configuration has no user.
const FALLBACK_NAME: &str = "mvk";
const FALLBACK_EMAIL: &str = "mvk@localhost";

/// Upper bound on slot numbers tried before giving up; far above any sane concurrency.
const MAX_SLOTS: usize = 4096;
/// Where slot builds of earlier mvk versions put a scratch branch for the moment of the build,
/// as `<prefix><root tag>-<slot>-<unguessable>`: [`Pool::gc_scratch`] deletes those left behind.
const SCRATCH_PREFIX: &str = "refs/heads/mvk-scratch/";
/// The most mvk reads of a git link or a HEAD file: a path (`PATH_MAX`) and its prefix.
const LINK_MAX: u64 = 4096 + 64;

/// Failures of the worktree pool.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
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
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            WorktreeError::Git { .. }
                | WorktreeError::Io { .. }
                | WorktreeError::BranchCheckedOut { .. }
                | WorktreeError::PoolExhausted { .. }
        )
    }
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

/// Worktree slots of one repository under one root directory.
///
/// Holds only paths (the repository is reopened per call), so it is `Send + Sync` and
/// several processes may use pools on the same root at once: slot locks keep them apart.
#[derive(Debug, Clone)]
pub struct Pool {
    /// The repository's common git directory (`.git` of the main worktree).
    git_dir: PathBuf,
    /// Canonical root holding `slot-N` directories and their lock files.
    root: PathBuf,
    /// Short hash of `root`, so worktree names of pools on different roots never collide.
    root_tag: String,
}

/// An exclusive lease on one slot, checked out at `base` on `branch`.
///
/// Dropping it releases the slot; the branch and whatever was captured on it stay.
#[derive(Debug)]
pub struct Lease {
    pub path: PathBuf,
    pub branch: String,
    pub base: Oid,
    slot: usize,
    /// The worktree's own git directory and the repository's common one, as mvk made them:
    /// [`capture`] refuses a worktree whose links now lead elsewhere.
    admin: PathBuf,
    common: PathBuf,
    /// The bytes of the git links as mvk made them (`.git`, `gitdir`, `commondir`): put back
    /// before mvk opens the worktree, so a registration the agent rewrote never outlives it.
    links: Vec<(PathBuf, Vec<u8>)>,
    /// mvk's own copy of the slot's index, outside every sandbox grant (see [`Trusted`]).
    trusted: Trusted,
    /// Held open for its lock; closing the file releases it.
    _lock: File,
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
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// Gives the slot up for good, its directory left as it is: processes mvk could not end
    /// may still be in it (`escapees-survived`), and the next lease of it would be reset,
    /// checked, gated and judged while they write it. A marker beside it, `slot-N.retired`,
    /// written while the lease still holds the slot's lock, keeps every pool on this root (this
    /// run's, another mvk's) off that slot until [`Pool::gc`] removes the two.
    pub fn retire(self) -> Result<(), WorktreeError> {
        let marker = retired_path(&self.path, self.slot);
        fs::write(
            &marker,
            b"processes mvk could not end may still run in this slot\n",
        )
        .map_err(io_err("retire worktree slot", &marker))
    }

    /// The worktree's repository, if its git links still lead where mvk made them. The agent
    /// could write its worktree's `.git` file and git directory (`commondir`, `gitdir`): mvk
    /// must not commit, stage or move HEAD in whatever they now name (the main checkout's
    /// index and HEAD, another slot's). Links found rewritten are put back first (so the
    /// repository's registration of the worktree is whole again), and the lease is refused.
    fn open(&self) -> Result<Repository, WorktreeError> {
        let path = &self.path;
        if let Some(found) = self.restore_links() {
            return Err(WorktreeError::Relinked {
                path: path.clone(),
                found,
            });
        }
        let repo = Repository::open(path).map_err(git_err("open worktree", path))?;
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

/// The marker of a retired slot (see [`Lease::retire`]) `n`, whose directory is `slot`.
fn retired_path(slot: &Path, n: usize) -> PathBuf {
    slot.with_file_name(format!("slot-{n}.retired"))
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

/// Puts `bytes` at `file` without following whatever is there (a symlink, a directory): the
/// new content is written beside it, under a name no one can guess, and renamed over it. The
/// directory is made writable first: an agent may have taken its own git directory's write
/// permission away.
fn replace_file(file: &Path, bytes: &[u8]) -> Result<(), WorktreeError> {
    if let Some(dir) = file.parent() {
        // Chmod-ed through a descriptor of the directory itself, never of a symlink.
        untrusted::writable_dir_at(rustix::fs::CWD, dir).map_err(io_err("make writable", dir))?;
    }
    if fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_dir()) {
        fs::remove_dir_all(file).map_err(io_err("remove", file))?;
    }
    let mut tries = 0;
    let (new, mut out) = loop {
        let mut name = file.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".mvk-{:016x}", unguessable()));
        let new = file.with_file_name(name);
        match OpenOptions::new().write(true).create_new(true).open(&new) {
            Ok(out) => break (new, out),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(io_err("create", &new)(e)),
        }
    };
    let written = io::Write::write_all(&mut out, bytes)
        .map_err(io_err("write", &new))
        .and_then(|()| fs::rename(&new, file).map_err(io_err("replace", file)));
    if written.is_err() {
        let _ = fs::remove_file(&new);
    }
    written
}

/// Makes way for a new slot at `path`: what is there is removed, its directories made
/// writable first (an agent may have taken their permissions away). What still cannot be
/// removed (a file made immutable) is moved aside, to `slot-N.broken-<random>` beside it, so
/// the slot's number is free again: only the attempt that did it fails, never the run, nor
/// every later run (which would take the same lowest idle slot).
fn clear_slot_dir(path: &Path) -> Result<(), WorktreeError> {
    if fs::symlink_metadata(path).is_err() {
        return Ok(());
    }
    if fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        make_dirs_writable(path);
        if fs::remove_dir_all(path).is_ok() {
            return Ok(());
        }
    } else if fs::remove_file(path).is_ok() {
        return Ok(());
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".broken-{:016x}", unguessable()));
    let aside = path.with_file_name(name);
    tracing::warn!(
        "could not remove the worktree slot {}: moved aside to {}",
        path.display(),
        aside.display()
    );
    fs::rename(path, &aside).map_err(io_err("set aside broken worktree slot", path))
}

/// Gives the owner read, write and search permission on every directory under `dir`, parents
/// before their children (a directory is read after it is made readable). Nothing is reached
/// through a symlink, `dir` included: each directory is opened once (`O_NOFOLLOW`), chmod-ed
/// through that descriptor and listed through it, so a directory swapped for a symlink after
/// its listing (by a process an agent left running) gives no one else's directory away. Best
/// effort: what stays is found by the removal.
fn make_dirs_writable(dir: &Path) {
    if let Ok(Some(top)) = untrusted::writable_dir_at(rustix::fs::CWD, dir) {
        writable_below(&top, 0);
    }
}

/// Deeper than this the walk stops (one descriptor is open per level): what is left is for
/// the removal to find.
const WRITABLE_DEPTH: usize = 256;

fn writable_below(dir: &std::os::fd::OwnedFd, depth: usize) {
    if depth >= WRITABLE_DEPTH {
        return;
    }
    let Ok(listing) = untrusted::list(dir) else {
        return;
    };
    // Listed whole first: one descriptor per level, not two.
    let subdirs: Vec<_> = listing
        .filter(|(_, kind)| {
            matches!(
                kind,
                rustix::fs::FileType::Directory | rustix::fs::FileType::Unknown
            )
        })
        .map(|(name, _)| name)
        .collect();
    for name in subdirs {
        if let Ok(Some(sub)) = untrusted::writable_dir_at(dir, Path::new(&name)) {
            writable_below(&sub, depth + 1);
        }
    }
}

use crate::run::exec::untrusted::unguessable;

/// Writes the registration of a linked worktree at `path` whose git directory is `admin`
/// (which must not exist yet) in the repository whose common git directory is `common`
/// (canonical), HEAD detached at `base`, no index, no files checked out.
fn register(common: &Path, admin: &Path, path: &Path, base: Oid) -> Result<(), WorktreeError> {
    let worktrees = admin.parent().unwrap_or(admin);
    fs::create_dir_all(worktrees).map_err(io_err("create worktree registry", worktrees))?;
    // `create_dir`, not `create_dir_all`: an admin directory that exists is someone else's.
    fs::create_dir(admin).map_err(io_err("create worktree git directory", admin))?;
    fs::create_dir(path).map_err(io_err("create worktree slot", path))?;
    let admin = canonical(admin)?;
    let dot_git = canonical(path)?.join(".git");
    // Bytes, not `display()`: a path that is not UTF-8 must be written as it is.
    let line = |prefix: &[u8], p: &Path| {
        [
            prefix,
            std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()),
            b"\n",
        ]
        .concat()
    };
    // Absolute, as libgit2 wrote it: `../..` leads elsewhere when `worktrees` is a symlink.
    // `locked` first: `git worktree prune` (run by hand or by `git gc --auto`) removes a
    // registration whose `gitdir` or `.git` is not written yet, whatever its age, but never a
    // locked one.
    let locked = admin.join("locked");
    fs::write(&locked, b"mvk is adding this worktree\n")
        .map_err(io_err("write worktree git link", &locked))?;
    let files: [(PathBuf, Vec<u8>); 4] = [
        (admin.join("commondir"), line(b"", common)),
        (admin.join("HEAD"), format!("{base}\n").into_bytes()),
        (admin.join("gitdir"), line(b"", &dot_git)),
        // Last: until it exists the directory is no worktree at all.
        (dot_git.clone(), line(b"gitdir: ", &admin)),
    ];
    for (file, bytes) in files {
        fs::write(&file, bytes).map_err(io_err("write worktree git link", &file))?;
    }
    fs::remove_file(&locked).map_err(io_err("unlock new worktree", &locked))?;
    Ok(())
}

/// The files that link the worktree at `path` and its git directory `admin` to each other.
fn link_files(path: &Path, admin: &Path) -> [PathBuf; 3] {
    [
        path.join(".git"),
        admin.join("gitdir"),
        admin.join("commondir"),
    ]
}

impl Pool {
    /// Opens the pool for the repository at `repo_path` (its main worktree, a linked worktree or
    /// its git directory) with slots under `root`, creating `root` if needed.
    pub fn open(repo_path: &Path, root: &Path) -> Result<Pool, WorktreeError> {
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
    pub fn default_root(repo_path: &Path) -> PathBuf {
        default_root_from(
            repo_path,
            std::env::var_os(crate::env::MVK_WORKTREE_ROOT),
            std::env::var_os(crate::env::XDG_CACHE_HOME),
            std::env::var_os(crate::env::HOME),
        )
    }

    /// The canonical directory holding the slots.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Takes an idle slot, or creates one, and makes it a clean checkout of `base` on `branch`
    /// (created, or force-reset to `base` if it exists). Untracked and ignored files left by a
    /// previous lease are removed and the index matches `base`, so `git status` is clean.
    pub fn acquire(&self, base: Oid, branch: &str) -> Result<Lease, WorktreeError> {
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
        let reused = if self.slot_is_healthy(&main, &path) {
            match self.reset_slot(&main, &path, base, branch) {
                Ok(()) => true,
                // Rebuilding would not help, and would throw away a healthy slot.
                Err(e @ WorktreeError::BranchCheckedOut { .. }) => return Err(e),
                // A slot the agent damaged beyond a checkout (permissions, a broken `.git`)
                // is rebuilt from scratch rather than failing the attempt.
                Err(_) => false,
            }
        } else {
            false
        };
        if !reused {
            self.create_slot(&main, slot, base)?;
            self.reset_slot(&main, &path, base, branch)?;
        }
        let admin = Repository::open(&path)
            .map_err(git_err("open worktree", &path))
            .and_then(|r| canonical(r.path()))?;
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
            _lock: lock,
        })
    }

    /// Removes the lock files git left in the git directories of the slots no one leases
    /// (`index.lock`, `HEAD.lock`): a kill inside libgit2's write of a slot's index or HEAD
    /// leaves one, which would fail the slot's next reset. A slot is judged idle as a lease
    /// claims one (its lock taken under the registry lock), so a slot in use is never touched.
    /// Out come the files removed.
    pub fn clear_idle_locks(&self) -> Result<Vec<PathBuf>, WorktreeError> {
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
    pub fn gc(&self) -> Result<Vec<PathBuf>, WorktreeError> {
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
    pub fn gc_scratch(&self, dry_run: bool) -> Result<Vec<String>, WorktreeError> {
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

    fn main(&self) -> Result<Repository, WorktreeError> {
        Repository::open(&self.git_dir).map_err(git_err("open repository", &self.git_dir))
    }

    fn slot_path(&self, n: usize) -> PathBuf {
        self.root.join(format!("slot-{n}"))
    }

    fn lock_path(&self, n: usize) -> PathBuf {
        self.root.join(format!("slot-{n}.lock"))
    }

    fn trusted(&self, n: usize) -> Trusted {
        Trusted(self.root.join(format!("slot-{n}.index")))
    }

    /// Waits for, then holds, the lock on the repository's worktree registry for this pool:
    /// libgit2 reads every worktree's admin files when it adds one or moves a branch, and one
    /// half-written by a neighbour (another task, or another mvk) makes it fail
    /// ("already checked out").
    fn lock_registry(&self) -> Result<File, WorktreeError> {
        let path = self.root.join("registry.lock");
        let file = open_lock(&path)?;
        file.lock().map_err(io_err("lock registry", &path))?;
        Ok(file)
    }

    /// Slot number of a path directly under the root named `slot-N`.
    fn slot_of_path(&self, path: &Path) -> Option<usize> {
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
    fn try_lock_slot(&self, n: usize) -> Result<Option<File>, WorktreeError> {
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

    /// Whether `path` is a working linked worktree of this repository.
    fn slot_is_healthy(&self, main: &Repository, path: &Path) -> bool {
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
    fn create_slot(&self, main: &Repository, n: usize, base: Oid) -> Result<(), WorktreeError> {
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
    fn forget_relinked(&self, main: &Repository, n: usize) -> Result<(), WorktreeError> {
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
    fn remove_registrations(&self, main: &Repository, n: usize) -> Result<bool, WorktreeError> {
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
    fn free_branch(
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
    fn reset_slot(
        &self,
        main: &Repository,
        path: &Path,
        base: Oid,
        branch: &str,
    ) -> Result<(), WorktreeError> {
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
        index.write().map_err(git_err("write index", path))?;
        slot.cleanup_state()
            .map_err(git_err("clear merge or rebase state", path))?;
        if let Some(t) = &trusted {
            t.keep(slot.path())?;
        }
        Ok(())
    }
}

/// Removes everything in the worktree at `path` but its `.git` link, through descriptors
/// (nothing is followed), its directories made writable first.
fn empty_but_git(path: &Path) -> Result<(), WorktreeError> {
    let failed = |e: io::Error| io_err("empty the worktree before a full checkout", path)(e);
    let Some(top) = untrusted::writable_dir_at(rustix::fs::CWD, path).map_err(failed)? else {
        return Err(failed(io::Error::other("the worktree is not a directory")));
    };
    writable_below(&top, 0);
    let names: Vec<_> = untrusted::list(&top)
        .map_err(failed)?
        .map(|(name, _)| name)
        .filter(|name| name != ".git")
        .collect();
    for name in names {
        untrusted::remove_at(&top, Path::new(&name)).map_err(failed)?;
    }
    Ok(())
}

/// Where mvk keeps its own copy of a slot's index (`slot-N.index` beside the slot, under the
/// pool's root, which no sandbox grants): written right after mvk wrote the index (a reset, a
/// capture), put back in place before mvk next trusts the index's stat data. An agent can
/// write its worktree's index, and an entry holding one blob's id with another file's stat
/// data would make the capture, the gates' clean-in-place check and the next reset take that
/// file for the blob. Stat data mvk recorded cannot be forged that way: a changed file's
/// ctime or inode changes with it.
#[derive(Debug, Clone)]
struct Trusted(PathBuf);

impl Trusted {
    /// Copies the index in ADMIN (a worktree's git directory) here, its modification time
    /// kept: libgit2 and [`sweep`] tell racily clean entries by comparing with it.
    fn keep(&self, admin: &Path) -> Result<(), WorktreeError> {
        let index = admin.join("index");
        let tmp = self.0.with_extension("index.tmp");
        let copied = (|| {
            let modified = fs::symlink_metadata(&index)?.modified()?;
            let _ = fs::remove_file(&tmp);
            fs::copy(&index, &tmp)?;
            OpenOptions::new()
                .write(true)
                .open(&tmp)?
                .set_modified(modified)?;
            fs::rename(&tmp, &self.0)
        })();
        copied.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            WorktreeError::Io {
                action: "keep a copy of the index in",
                path: self.0.clone(),
                source: e,
            }
        })
    }

    /// Puts the copy back as ADMIN's index. Whatever the agent left there (a FIFO libgit2
    /// would block on for good, a directory, a link) is removed first, through a descriptor of
    /// ADMIN, so that when this returns, libgit2 finds either mvk's copy or no index at all
    /// (review r8d, W2: a directory at the temporary name made the restore fail and left the
    /// agent's index in place). False when there is no copy, or it cannot be put back.
    fn restore(&self, admin: &Path) -> Result<bool, WorktreeError> {
        use rustix::fs::{AtFlags, Mode, OFlags};
        let dir = untrusted::writable_dir_at(rustix::fs::CWD, admin)
            .map_err(io_err("open the git directory", admin))?
            .ok_or_else(|| {
                io_err("open the git directory", admin)(io::Error::other("not a directory"))
            })?;
        match untrusted::remove_at(&dir, Path::new("index")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                // What cannot be removed (a directory the agent left unreadable to mvk, say) is
                // moved aside, under a name of mvk's, in the slot's own git directory: the
                // attempt goes on, not the run's end (review r8e, M1).
                let aside = format!("index.mvk-aside-{:016x}", unguessable());
                rustix::fs::renameat(&dir, "index", &dir, aside.as_str())
                    .map_err(|_| io_err("remove the agent's index in", admin)(e))?;
            }
            _ => {}
        }
        let modified = match fs::metadata(&self.0).and_then(|m| m.modified()) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_err("read", &self.0)(e)),
        };
        // A name the agent cannot guess, so it cannot stand in the way beforehand.
        let tmp = format!("index.mvk-{:016x}", unguessable());
        let put = (|| -> io::Result<()> {
            let fd = rustix::fs::openat(
                &dir,
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o644),
            )?;
            let mut out = File::from(fd);
            io::copy(&mut File::open(&self.0)?, &mut out)?;
            out.set_modified(modified)?;
            drop(out);
            Ok(rustix::fs::renameat(&dir, tmp.as_str(), &dir, "index")?)
        })();
        if put.is_err() {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
        }
        Ok(put.is_ok())
    }

    /// Removes the copy (none is fine).
    fn forget(&self) -> Result<(), WorktreeError> {
        match fs::remove_file(&self.0) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", &self.0)(e)),
            _ => Ok(()),
        }
    }
}

/// Commit id the lease's worktree HEAD points at now.
pub fn head_of(lease: &Lease) -> Result<Oid, WorktreeError> {
    let repo = lease.open()?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(git_err("read HEAD", &lease.path))?;
    Ok(head.id())
}

/// Records the worktree's whole state as one commit on the lease's branch and returns it.
///
/// Commits the agent made stay as history (the capture commit's parent is whatever HEAD
/// points at, on any branch or detached). Modified, deleted and untracked files are included;
/// ignored files are not (build output such as `target/`). When nothing is uncommitted no
/// commit is made and HEAD's commit is returned. Either way the lease's branch is forced to
/// the result and checked out.
pub fn capture(lease: &Lease, message: &str) -> Result<Oid, WorktreeError> {
    let path = &lease.path;
    let repo = lease.open()?;
    let head = match repo.head() {
        Ok(head) => Some(head.peel_to_commit().map_err(git_err("read HEAD", path))?),
        Err(e) if e.code() == ErrorCode::UnbornBranch => None,
        Err(e) => return Err(git_err("read HEAD", path)(e)),
    };
    // Staged from mvk's own copy of the index (see `Trusted`), never the agent's; without
    // one, from nothing, every file hashed.
    let restored = lease.trusted.restore(repo.path())?;
    lease.trusted.forget()?;
    let mut index = repo.index().map_err(git_err("open index", path))?;
    index.read(true).map_err(git_err("read index", path))?;
    if !restored {
        index.clear().map_err(git_err("clear index", path))?;
    }
    index
        .add_all(["*"], IndexAddOption::DEFAULT, None)
        .map_err(git_err("stage changes", path))?;
    // `add_all` walks the index against the worktree once and applies every difference:
    // a file deleted from the worktree leaves the index too (libgit2 >= 1.0), so no second
    // walk with `update_all` (a unit test holds this).
    index.write().map_err(git_err("write index", path))?;
    lease.trusted.keep(repo.path())?;
    missing_from_base(&repo, lease, &index)?;
    let tree_id = index.write_tree().map_err(git_err("write tree", path))?;
    let final_id = match &head {
        Some(commit) if commit.tree_id() == tree_id => commit.id(),
        _ => {
            let tree = repo
                .find_tree(tree_id)
                .map_err(git_err("read written tree", path))?;
            let sig = signature(&repo).map_err(git_err("make commit signature", path))?;
            let parents: Vec<&git2::Commit<'_>> = head.iter().collect();
            repo.commit(None, &sig, &sig, message, &tree, &parents)
                .map_err(git_err("commit changes", path))?
        }
    };
    let branch_ref = format!("refs/heads/{}", lease.branch);
    // Detached first: libgit2 refuses to check out a branch another worktree's HEAD names
    // when HEAD is on a branch, and a neighbour's agent may have written its HEAD so.
    repo.set_head_detached(final_id)
        .map_err(git_err("detach HEAD", path))?;
    repo.reference(&branch_ref, final_id, true, "mvk: capture attempt")
        .map_err(git_err(format!("move branch `{}`", lease.branch), path))?;
    repo.set_head(&branch_ref).map_err(git_err(
        format!("check out branch `{}`", lease.branch),
        path,
    ))?;
    Ok(final_id)
}

/// Makes LEASE's worktree a clean checkout of HEAD, its captured commit, in place: what the
/// gates need, without a second lease and a full checkout. True when done; false when the
/// worktree is not exactly what `capture` recorded (a file changed since, an index flag, a
/// submodule, a filter or line-ending setting a checkout would apply), and the caller takes a
/// fresh lease instead. Only reads directories and stats tracked files: after `capture` the
/// index holds every tracked file's stat data, so a file that still matches it is the blob
/// the commit names, and anything the index does not list (ignored build output, empty
/// directories) is removed.
pub fn clean_in_place(lease: &Lease, head: Oid) -> Result<bool, WorktreeError> {
    let path = &lease.path;
    let repo = match lease.open() {
        Ok(repo) => repo,
        Err(WorktreeError::Relinked { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    let on_head = repo
        .head()
        .ok()
        .and_then(|h| h.target())
        .is_some_and(|id| id == head);
    let commit = repo
        .find_commit(head)
        .map_err(git_err(format!("find commit `{head}`"), path))?;
    // What `capture` wrote, from mvk's copy: whatever stands in the worktree's index now.
    if !lease.trusted.restore(repo.path())? {
        return Ok(false);
    }
    let mut index = repo.index().map_err(git_err("open index", path))?;
    index.read(true).map_err(git_err("read index", path))?;
    if !on_head || index.write_tree().ok() != Some(commit.tree_id()) {
        return Ok(false);
    }
    if !sweep(&repo, &lease.common, path, &index)?.is_some_and(|dirty| dirty.is_empty()) {
        return Ok(false);
    }
    // What a fresh lease's reset clears: a merge, rebase or bisect the agent left half done.
    repo.cleanup_state()
        .map_err(git_err("clear merge or rebase state", path))?;
    Ok(true)
}

/// Removes from the worktree at PATH what INDEX does not list (ignored and untracked files,
/// directories holding no tracked file) and returns the tracked paths whose file is missing
/// or differs from the stat data INDEX holds for it. `None` when the worktree is one mvk
/// does not judge by stat data alone, and a full checkout must do: a checkout would convert
/// line endings or run filters, the index has a conflict, an entry hidden by a flag, a
/// submodule, or a directory cannot be read or removed.
fn sweep(
    repo: &Repository,
    common: &Path,
    path: &Path,
    index: &git2::Index,
) -> Result<Option<Vec<Vec<u8>>>, WorktreeError> {
    use std::collections::{HashMap, HashSet};

    const ASSUME_UNCHANGED: u16 = 0x8000;
    const SKIP_WORKTREE: u16 = 1 << 14;
    let config = repo
        .config()
        .and_then(|mut c| c.snapshot())
        .map_err(git_err("read configuration", path))?;
    // libgit2 also reads the user's and the system's attributes files with no key naming them.
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))
        .map(|d| d.join("git").join("attributes"));
    let converting = [
        "core.autocrlf",
        "core.eol",
        "core.attributesfile",
        "core.symlinks",
    ]
    .iter()
    .any(|key| config.get_entry(key).is_ok())
        || common.join("info").join("attributes").exists()
        || xdg.is_some_and(|f| f.exists())
        || Path::new("/etc/gitattributes").exists();
    if converting || index.has_conflicts() {
        return Ok(None);
    }
    // Entries not older than the index file are racily clean: a write in the same clock tick
    // as the index's leaves the same stat data (git's rule), so their files are rewritten.
    let Ok(stamp) = fs::symlink_metadata(repo.path().join("index")) else {
        return Ok(None);
    };
    let stamp = {
        use std::os::unix::fs::MetadataExt;
        (stamp.mtime(), stamp.mtime_nsec())
    };
    let mut tracked: HashMap<Vec<u8>, git2::IndexEntry> = HashMap::new();
    let mut dirs: HashSet<Vec<u8>> = HashSet::new();
    for entry in index.iter() {
        let name = entry.path.clone();
        if entry.flags & ASSUME_UNCHANGED != 0
            || entry.flags_extended & SKIP_WORKTREE != 0
            || entry.mode == 0o160000
            || is_attributes(&name)
        {
            return Ok(None);
        }
        let mut at = 0;
        while let Some(i) = name[at..].iter().position(|&b| b == b'/') {
            dirs.insert(name[..at + i].to_vec());
            at += i + 1;
        }
        tracked.insert(name, entry);
    }
    // A path both a file and a directory of others is no index git writes.
    if tracked.keys().any(|k| dirs.contains(k)) {
        return Ok(None);
    }
    let mut dirty = Vec::new();
    // Walked through descriptors, never by a path looked up again: a process the agent left
    // running may swap a directory for a symlink to one outside the worktree after it was
    // seen, and mvk (unconfined) would delete what it found there.
    let Ok(Some(top)) = untrusted::open_dir_at(rustix::fs::CWD, path) else {
        return Ok(None);
    };
    let mut seen = Seen {
        dirs: &dirs,
        tracked: &mut tracked,
        dirty: &mut dirty,
        stamp,
    };
    if !sweep_dir(&top, &[], &mut seen) {
        return Ok(None);
    }
    // What is left was never seen: missing from the worktree.
    dirty.extend(tracked.into_keys());
    Ok(Some(dirty))
}

/// What [`sweep`] knows of the index, and what it found so far.
struct Seen<'a> {
    /// The directories that hold tracked files.
    dirs: &'a std::collections::HashSet<Vec<u8>>,
    /// The tracked files not seen yet.
    tracked: &'a mut std::collections::HashMap<Vec<u8>, git2::IndexEntry>,
    /// Tracked files that differ from their stat data.
    dirty: &'a mut Vec<Vec<u8>>,
    /// The index file's modification time: entries not older are racily clean.
    stamp: (i64, i64),
}

/// [`sweep`] of the directory open at DIR, REL in the worktree, and of what it holds: false when
/// it cannot be judged (something cannot be read or removed, or was swapped meanwhile).
fn sweep_dir(dir: &std::os::fd::OwnedFd, rel: &[u8], seen: &mut Seen<'_>) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(listing) = untrusted::list(dir) else {
        return false;
    };
    // Listed whole first: one descriptor per level, not two.
    let names: Vec<std::ffi::OsString> = listing.map(|(name, _)| name).collect();
    for name in names {
        if rel.is_empty() && name == ".git" {
            continue;
        }
        let mut child = rel.to_vec();
        if !child.is_empty() {
            child.push(b'/');
        }
        child.extend_from_slice(name.as_bytes());
        let name = Path::new(&name);
        // The entry's own type, never through a link.
        let Ok(stat) = rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) else {
            return false;
        };
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory {
            if seen.dirs.contains(&child) {
                // Opened once, without following: one swapped for a symlink since is refused.
                let Ok(Some(sub)) = untrusted::open_dir_at(dir, name) else {
                    return false;
                };
                if !sweep_dir(&sub, &child, seen) {
                    return false;
                }
            } else if untrusted::remove_at(dir, name).is_err() {
                return false;
            }
            continue;
        }
        match seen.tracked.remove(&child) {
            Some(e)
                if same_stat(&e, &stat)
                    && (
                        i64::from(e.mtime.seconds()),
                        i64::from(e.mtime.nanoseconds()),
                    ) < seen.stamp => {}
            Some(_) => seen.dirty.push(child),
            None => {
                // A directory swapped in since the stat is not removed (EISDIR).
                if rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty()).is_err() {
                    return false;
                }
            }
        }
    }
    true
}

/// Whether the path names a `.gitattributes` file, which changes how a checkout writes files.
fn is_attributes(path: &[u8]) -> bool {
    path == b".gitattributes" || path.ends_with(b"/.gitattributes")
}

/// The most files [`reset_in_place`] writes; more are left to a full checkout.
const RESET_IN_PLACE_MAX: usize = 64;

/// Resets the slot's worktree to TREE without a full checkout: removes what the index does
/// not list, then writes only the files that differ (those the index's tree and TREE name
/// differently, and tracked files changed or missing on disk), and stages them in INDEX
/// after it has read TREE. False, with nothing promised about the worktree, when a full
/// checkout must do it (see [`sweep`]; also a file becoming a directory or the reverse, a
/// submodule or attributes file among the changes).
fn reset_in_place(
    slot: &Repository,
    common: &Path,
    path: &Path,
    tree: &git2::Tree<'_>,
    index: &mut git2::Index,
) -> Result<bool, WorktreeError> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;

    if index.read(true).is_err() {
        return Ok(false);
    }
    let Some(dirty) = sweep(slot, common, path, index)? else {
        return Ok(false);
    };
    let mut changed: BTreeSet<Vec<u8>> = dirty.into_iter().collect();
    // Compared by ids only: no tree is written for an index mvk is about to replace.
    let diff = slot
        .diff_tree_to_index(Some(tree), Some(index), None)
        .map_err(git_err("compare the index with the tree", path))?;
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            if let Some(p) = file.path_bytes() {
                changed.insert(p.to_vec());
            }
        }
    }
    // Many files to write (a new slot, a base far ahead): libgit2's checkout does it in one
    // pass, where staging each file written here would cost more than its walk.
    if changed.len() > RESET_IN_PLACE_MAX {
        return Ok(false);
    }
    let mut written = Vec::new();
    // Removals first: a file that goes may stand where a directory comes.
    let mut wanted = Vec::new();
    for rel in changed {
        // A path git would refuse to check out (`..`, `.git`, empty components) is left to
        // libgit2's checkout, which refuses it with an error.
        if is_attributes(&rel) || !plain_path(&rel) {
            return Ok(false);
        }
        // Every directory above it must be a real one (or not be there yet): never remove or
        // write through a link standing where the tree has a directory.
        if !real_dirs_above(path, &rel) {
            return Ok(false);
        }
        let full = path.join(std::ffi::OsStr::from_bytes(&rel));
        match fs::symlink_metadata(&full) {
            Ok(m) if m.is_dir() => return Ok(false),
            Ok(_) => {
                if fs::remove_file(&full).is_err() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => return Ok(false),
        }
        match tree.get_path(Path::new(std::ffi::OsStr::from_bytes(&rel))) {
            Ok(entry) if entry.kind() == Some(git2::ObjectType::Blob) => {
                wanted.push((rel, full, entry.id(), entry.filemode()));
            }
            Ok(_) => return Ok(false),
            Err(e) if e.code() == ErrorCode::NotFound => remove_empty_parents(path, &full),
            Err(e) => return Err(git_err("read tree", path)(e)),
        }
    }
    for (rel, full, id, mode) in wanted {
        let blob = slot
            .find_blob(id)
            .map_err(git_err(format!("read blob `{id}`"), path))?;
        if let Some(parent) = full.parent()
            && fs::create_dir_all(parent).is_err()
        {
            return Ok(false);
        }
        let made = if mode == 0o120000 {
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(blob.content()), &full)
        } else {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                // The modes libgit2's checkout writes, so a file is the same whichever path wrote it.
                .mode(if mode == 0o100755 { 0o755 } else { 0o644 })
                .open(&full)
                .and_then(|mut f| io::Write::write_all(&mut f, blob.content()))
        };
        if made.is_err() {
            return Ok(false);
        }
        written.push(rel);
    }
    index
        .read_tree(tree)
        .map_err(git_err("reset index", path))?;
    for rel in written {
        index
            .add_path(Path::new(std::ffi::OsStr::from_bytes(&rel)))
            .map_err(git_err("stage reset file", path))?;
    }
    Ok(true)
}

/// Whether REL is a relative path whose every component is a plain name: not empty, `.`,
/// `..`, or `.git` in any case, and without a NUL byte.
fn plain_path(rel: &[u8]) -> bool {
    !rel.is_empty()
        && rel.split(|&b| b == b'/').all(|c| {
            !c.is_empty()
                && c != b"."
                && c != b".."
                && !c.eq_ignore_ascii_case(b".git")
                && !c.contains(&0)
        })
}

/// Whether each directory between ROOT and REL (relative, `/`-separated) is a directory itself,
/// not a link to one, or is not there.
fn real_dirs_above(root: &Path, rel: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let mut at = 0;
    while let Some(i) = rel[at..].iter().position(|&b| b == b'/') {
        let dir = root.join(std::ffi::OsStr::from_bytes(&rel[..at + i]));
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return true,
            _ => return false,
        }
        at += i + 1;
    }
    true
}

/// Removes the directories above FULL, up to ROOT, that are left empty.
fn remove_empty_parents(root: &Path, full: &Path) {
    let mut dir = full.parent();
    while let Some(d) = dir {
        if d == root || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Whether META is the file ENTRY recorded: same type, executable bit, size, change and
/// modification times, inode. `capture` staged every file, so each tracked entry carries the
/// stat data of the file it hashed.
fn same_stat(entry: &git2::IndexEntry, stat: &rustix::fs::Stat) -> bool {
    use rustix::fs::FileType;
    let mode = match FileType::from_raw_mode(stat.st_mode) {
        FileType::Symlink => 0o120000,
        FileType::RegularFile if stat.st_mode & 0o100 != 0 => 0o100755,
        FileType::RegularFile => 0o100644,
        _ => return false,
    };
    // A second name for the file (a hard link an agent made) would carry an edit of one path
    // into the other.
    if stat.st_nlink != 1 {
        return false;
    }
    // The index keeps 32 bits of each: compared as git compares them.
    entry.mode == mode
        && entry.file_size == stat.st_size as u32
        && entry.ino == stat.st_ino as u32
        && i64::from(entry.mtime.seconds()) == stat.st_mtime
        && i64::try_from(stat.st_mtime_nsec).ok() == Some(i64::from(entry.mtime.nanoseconds()))
        && i64::from(entry.ctime.seconds()) == stat.st_ctime
        && i64::try_from(stat.st_ctime_nsec).ok() == Some(i64::from(entry.ctime.nanoseconds()))
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

/// Refuses an index that names an object the repository lacks, among the entries that differ
/// from the lease's base (mvk's own commit, whole), before any tree is written from it. Trees
/// are written without libgit2's per-entry check (see the CLI), and the index is the agent's:
/// an entry it forged with `git update-index --cacheinfo` for a file whose bytes hash the same
/// is kept by `add_all` without its blob ever being written, and the gates' checkout, finding
/// the file in place, would never read it either.
fn missing_from_base(
    repo: &Repository,
    lease: &Lease,
    index: &git2::Index,
) -> Result<(), WorktreeError> {
    let path = &lease.path;
    let odb = repo.odb().map_err(git_err("open object database", path))?;
    let base = repo
        .find_commit(lease.base)
        .and_then(|c| c.tree())
        .map_err(git_err(format!("read base `{}`", lease.base), path))?;
    let diff = repo
        .diff_tree_to_index(Some(&base), Some(index), None)
        .map_err(git_err("compare the index with the base", path))?;
    for delta in diff.deltas() {
        let new = delta.new_file();
        // A submodule's commit lives in another repository.
        if delta.status() == git2::Delta::Deleted || new.mode() == git2::FileMode::Commit {
            continue;
        }
        if !odb.exists(new.id()) {
            return Err(WorktreeError::MissingObject {
                path: path.clone(),
                file: new
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                what: "blob",
                id: new.id(),
            });
        }
    }
    Ok(())
}

/// The configured user if the repository configuration (any level) has one, else mvk's own.
pub(crate) fn signature(repo: &Repository) -> Result<Signature<'static>, git2::Error> {
    match repo
        .config()
        .ok()
        .and_then(|config| signature_from(&config))
    {
        Some(sig) => Ok(sig),
        None => Signature::now(FALLBACK_NAME, FALLBACK_EMAIL),
    }
}

fn signature_from(config: &git2::Config) -> Option<Signature<'static>> {
    let name = config.get_string("user.name").ok()?;
    let email = config.get_string("user.email").ok()?;
    Signature::now(&name, &email).ok()
}

/// `(name, path)` of every worktree registered with the repository.
fn registrations(main: &Repository) -> Result<Vec<(String, PathBuf)>, WorktreeError> {
    // Read here, not through libgit2's worktree lookup: that reads every registration's
    // `gitdir`, `commondir` and `locked` whole and blocks on a FIFO, and a running neighbour's
    // agent may write its own (a sparse file of gigabytes, a FIFO). As libgit2 does, a
    // registration counts when both its `commondir` and `gitdir` can be read; the worktree is
    // the directory holding the `.git` that `gitdir` names.
    let admin = main.commondir().join("worktrees");
    let entries = match fs::read_dir(&admin) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list worktrees", &admin)(e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let dir = entry.path();
        let read = |file: &str| {
            untrusted::read(&dir.join(file), LINK_MAX)
                .ok()
                .flatten()
                .and_then(|b| String::from_utf8(b).ok())
        };
        let (Some(_), Some(gitdir)) = (read("commondir"), read("gitdir")) else {
            continue;
        };
        let gitlink = dir.join(gitdir.trim_end());
        if let Some(path) = gitlink.parent() {
            out.push((name, path.to_path_buf()));
        }
    }
    Ok(out)
}

/// Symbolic target of HEAD (`refs/heads/...`), `None` when detached or unreadable.
fn head_target(repo: &Repository) -> Option<String> {
    let head = repo.find_reference("HEAD").ok()?;
    head.symbolic_target().ok().flatten().map(str::to_string)
}

/// `slot-N` + `suffix` → `N`.
fn parse_slot_name(name: &str, suffix: &str) -> Option<usize> {
    let digits = name.strip_prefix("slot-")?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
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

fn default_root_from(
    repo_path: &Path,
    mvk_root: Option<OsString>,
    xdg_cache: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    let repo = fs::canonicalize(repo_path).unwrap_or_else(|_| repo_path.to_path_buf());
    let hash = blake3::hash(repo.as_os_str().as_encoded_bytes());
    let tag = &hash.to_hex()[..16];
    let non_empty = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(root) = non_empty(mvk_root) {
        return root.join(tag);
    }
    // The XDG spec says relative values are invalid and must be ignored.
    let cache = non_empty(xdg_cache)
        .filter(|p| p.is_absolute())
        .or_else(|| non_empty(home).map(|h| h.join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    cache.join("mvk").join("worktrees").join(tag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    use crate::run::testing::git;

    struct Fixture {
        _tmp: tempfile::TempDir,
        repo: PathBuf,
        root: PathBuf,
        c1: Oid,
        c2: Oid,
    }

    /// A repository with two commits: c1 has `a.txt`, `src/lib.rs` and a `.gitignore` that
    /// ignores `target/`; c2 changes `a.txt`, deletes `src/lib.rs` and adds `b.txt`.
    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("repo");
        let root = tmp.path().join("pool");
        fs::create_dir_all(repo.join("src")).expect("mkdir");
        git(&repo, &["init", "-q", "-b", "main"]);
        fs::write(repo.join("a.txt"), "one\n").expect("write");
        fs::write(repo.join("src/lib.rs"), "// lib\n").expect("write");
        fs::write(repo.join(".gitignore"), "target/\n").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "c1"]);
        let c1 = rev(&repo, "HEAD");
        fs::write(repo.join("a.txt"), "two\n").expect("write");
        fs::remove_file(repo.join("src/lib.rs")).expect("rm");
        fs::write(repo.join("b.txt"), "bee\n").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "c2"]);
        let c2 = rev(&repo, "HEAD");
        Fixture {
            _tmp: tmp,
            repo,
            root,
            c1,
            c2,
        }
    }

    fn rev(dir: &Path, what: &str) -> Oid {
        Oid::from_str(git(dir, &["rev-parse", what]).trim()).expect("oid")
    }

    /// Every file under `dir` except `.git`, relative, with contents.
    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
            for entry in fs::read_dir(dir).expect("read_dir") {
                let entry = entry.expect("entry");
                let path = entry.path();
                if entry.file_name() == ".git" {
                    continue;
                }
                if path.is_dir() {
                    walk(base, &path, out);
                } else {
                    let rel = path
                        .strip_prefix(base)
                        .expect("rel")
                        .to_string_lossy()
                        .into();
                    out.push((rel, fs::read(&path).expect("read")));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    /// Files of commit `id` as `files` would list them after a checkout.
    fn tree_files(repo: &Path, id: Oid) -> Vec<(String, Vec<u8>)> {
        let repo = Repository::open(repo).expect("open");
        let tree = repo.find_commit(id).expect("commit").tree().expect("tree");
        let mut out = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob) {
                let blob = repo.find_blob(entry.id()).expect("blob");
                let name = entry.name().expect("utf-8 name");
                out.push((format!("{dir}{name}"), blob.content().to_vec()));
            }
            git2::TreeWalkResult::Ok
        })
        .expect("walk");
        out.sort();
        out
    }

    fn branch_tip(repo: &Path, branch: &str) -> Oid {
        rev(repo, &format!("refs/heads/{branch}"))
    }

    #[test]
    fn acquire_gives_clean_checkout_outside_repo_listed_by_git() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/att-1").expect("acquire");
        let repo_canon = fs::canonicalize(&f.repo).expect("canon");
        assert!(!lease.path.starts_with(&repo_canon));
        assert!(lease.path.starts_with(pool.root()));
        assert_eq!(files(&lease.path), tree_files(&f.repo, f.c1));
        assert_eq!(git(&lease.path, &["status", "--porcelain"]), "");
        assert_eq!(
            git(&lease.path, &["symbolic-ref", "HEAD"]).trim(),
            "refs/heads/mvk/att-1"
        );
        assert_eq!(head_of(&lease).expect("head"), f.c1);
        assert_eq!(branch_tip(&f.repo, "mvk/att-1"), f.c1);
        let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
        assert!(
            list.contains(&format!("worktree {}\n", lease.path.display())),
            "{list}"
        );
        assert!(list.contains("branch refs/heads/mvk/att-1"), "{list}");
        // mvk writes the registration itself: git must take it for one of its own, neither
        // pruning it nor finding anything to repair.
        git(&f.repo, &["worktree", "prune"]);
        assert_eq!(git(&f.repo, &["worktree", "repair"]), "");
        let after = git(&f.repo, &["worktree", "list", "--porcelain"]);
        assert_eq!(after, list);
        assert_eq!(git(&lease.path, &["fsck", "--no-progress"]), "");
        // The user's checkout is untouched.
        assert_eq!(
            git(&f.repo, &["symbolic-ref", "HEAD"]).trim(),
            "refs/heads/main"
        );
        assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");
    }

    #[test]
    fn existing_branch_is_reset_to_base() {
        let f = fixture();
        git(&f.repo, &["branch", "mvk/att-x", &f.c2.to_string()]);
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/att-x").expect("acquire");
        assert_eq!(branch_tip(&f.repo, "mvk/att-x"), f.c1);
        assert_eq!(files(&lease.path), tree_files(&f.repo, f.c1));
    }

    #[test]
    fn reuse_removes_untracked_and_ignored_and_matches_new_base() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let first = pool.acquire(f.c1, "mvk/r1").expect("acquire");
        let path = first.path.clone();
        // Files written in the same second as the index are "racy" to git and may be rewritten
        // on reset; let a second pass and refresh the index so the mtime check below is fair.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        git(&path, &["status", "--porcelain"]);
        // The agent makes a mess: edits, deletions, untracked nested dirs, ignored build
        // output, a commit of its own and a half-staged change.
        fs::write(path.join("a.txt"), "agent\n").expect("write");
        fs::create_dir_all(path.join("new/deep/er")).expect("mkdir");
        fs::write(path.join("new/deep/er/x.txt"), "x").expect("write");
        fs::create_dir_all(path.join("target/debug")).expect("mkdir");
        fs::write(path.join("target/debug/bin"), "elf").expect("write");
        fs::write(path.join("committed.txt"), "c").expect("write");
        git(&path, &["add", "committed.txt"]);
        git(&path, &["commit", "-q", "-m", "agent commit"]);
        fs::write(path.join("staged.txt"), "s").expect("write");
        git(&path, &["add", "staged.txt"]);
        fs::remove_file(path.join("src/lib.rs")).expect("rm");
        let untouched_mtime = || {
            fs::metadata(path.join(".gitignore"))
                .and_then(|m| m.modified())
                .expect("mtime")
        };
        let before = untouched_mtime();
        let first_slot = first.slot();
        drop(first);
        wait_free(&pool, first_slot);

        let second = pool.acquire(f.c2, "mvk/r2").expect("reacquire");
        assert_eq!(second.path, path, "the idle slot is reused");
        assert_eq!(
            untouched_mtime(),
            before,
            "unchanged files are not rewritten"
        );
        assert_eq!(files(&second.path), tree_files(&f.repo, f.c2));
        assert!(!path.join("target").exists(), "ignored dir removed");
        assert!(!path.join("new").exists(), "untracked dir removed");
        assert_eq!(git(&path, &["status", "--porcelain", "--ignored"]), "");
        assert_eq!(
            git(&path, &["symbolic-ref", "HEAD"]).trim(),
            "refs/heads/mvk/r2"
        );
        // The first branch keeps the agent's commit for inspection.
        let r1 = branch_tip(&f.repo, "mvk/r1");
        assert_ne!(r1, f.c1);
        assert_eq!(rev(&f.repo, "mvk/r1^"), f.c1);
        drop(second);

        // Going back to an older base restores deleted files too.
        let third = pool.acquire(f.c1, "mvk/r1").expect("reacquire older base");
        assert_eq!(third.path, path);
        assert_eq!(files(&third.path), tree_files(&f.repo, f.c1));
        assert_eq!(branch_tip(&f.repo, "mvk/r1"), f.c1);
        assert_eq!(git(&path, &["status", "--porcelain", "--ignored"]), "");
    }

    #[test]
    fn concurrent_leases_get_different_slots() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let a = pool.acquire(f.c1, "mvk/a").expect("a");
        let b = pool.acquire(f.c2, "mvk/b").expect("b");
        assert_ne!(a.path, b.path);
        assert_ne!(a.slot(), b.slot());
        assert_eq!(files(&a.path), tree_files(&f.repo, f.c1));
        assert_eq!(files(&b.path), tree_files(&f.repo, f.c2));
        // A second pool object on the same root respects the same locks.
        let other = Pool::open(&f.repo, &f.root).expect("open pool again");
        let c = other.acquire(f.c1, "mvk/c").expect("c");
        assert!(c.path != a.path && c.path != b.path);
    }

    #[test]
    fn branch_held_by_a_leased_slot_or_the_main_checkout_is_refused() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let held = pool.acquire(f.c1, "mvk/held").expect("held");
        match pool.acquire(f.c2, "mvk/held") {
            Err(WorktreeError::BranchCheckedOut { path, .. }) => assert_eq!(path, held.path),
            other => panic!("expected BranchCheckedOut, got {other:?}"),
        }
        assert_eq!(branch_tip(&f.repo, "mvk/held"), f.c1, "branch not moved");
        match pool.acquire(f.c1, "main") {
            Err(WorktreeError::BranchCheckedOut { .. }) => {}
            other => panic!("expected BranchCheckedOut, got {other:?}"),
        }
        assert_eq!(branch_tip(&f.repo, "main"), f.c2, "user's branch not moved");
        assert!(matches!(
            pool.acquire(f.c1, "bad..name"),
            Err(WorktreeError::InvalidBranch { .. })
        ));
        // The refusals neither rebuilt nor broke the idle slot they tried.
        let idle = pool.acquire(f.c2, "mvk/idle").expect("idle");
        let idle_path = idle.path.clone();
        let idle_slot = idle.slot();
        // A process another test forks while a lease is held keeps a copy of the lock's file
        // until it execs; wait for the slot to be free before asserting it is reused.
        let wait_free = || wait_free(&pool, idle_slot);
        // As above: step past git's racy-timestamp window so no refusal rewrites a file.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        git(&idle_path, &["status", "--porcelain"]);
        drop(idle);
        let mtime = || {
            fs::metadata(idle_path.join("a.txt"))
                .and_then(|m| m.modified())
                .expect("mtime")
        };
        let before = mtime();
        wait_free();
        assert!(matches!(
            pool.acquire(f.c2, "mvk/held"),
            Err(WorktreeError::BranchCheckedOut { .. })
        ));
        assert_eq!(mtime(), before, "idle slot was not rebuilt");
        wait_free();
        let next = pool
            .acquire(f.c2, "mvk/next")
            .expect("acquire after refusals");
        assert_eq!(next.path, idle_path);
        assert_eq!(files(&next.path), tree_files(&f.repo, f.c2));
    }

    #[test]
    fn idle_slot_holding_the_branch_is_detached() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let a = pool.acquire(f.c1, "mvk/shared").expect("a");
        let b = pool.acquire(f.c1, "mvk/other").expect("b");
        let a_path = a.path.clone();
        let a_slot = a.slot();
        drop(a);
        wait_free(&pool, a_slot);
        let main = pool.main().expect("main");
        pool.free_branch(&main, "refs/heads/mvk/shared", "mvk/shared", Some(&b.path))
            .expect("free");
        let head = git(&a_path, &["rev-parse", "--abbrev-ref", "HEAD"]);
        assert_eq!(head.trim(), "HEAD", "idle slot detached");
        assert_eq!(git(&a_path, &["status", "--porcelain"]), "");
    }

    // Guards against a kill inside libgit2's write of a slot's index: the `index.lock` it left
    // in the slot's git directory outlived the resumed run (crash campaign, seed 5, trial 55).
    #[test]
    fn stale_git_locks_of_idle_slots_are_removed_and_a_leased_slot_is_left_alone() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let leased = pool.acquire(f.c1, "mvk/leased").expect("leased");
        let idle = pool.acquire(f.c1, "mvk/idle").expect("idle");
        let idle_admin = idle.admin.clone();
        let slot = idle.slot();
        drop(idle);
        wait_free(&pool, slot);
        fs::write(idle_admin.join("index.lock"), "").expect("stale lock");
        fs::write(leased.admin.join("index.lock"), "").expect("live lock");
        let removed = pool.clear_idle_locks().expect("clear");
        assert!(!idle_admin.join("index.lock").exists(), "{removed:?}");
        assert_eq!(removed.len(), 1, "{removed:?}");
        assert!(
            leased.admin.join("index.lock").exists(),
            "a leased slot's lock stays"
        );
        fs::remove_file(leased.admin.join("index.lock")).expect("tidy");
        drop(leased);
    }

    #[test]
    fn a_lease_claims_its_slot_only_under_the_registry_lock_so_a_crashed_slot_never_looks_leased() {
        // A crash left a slot on `mvk/c`: its HEAD names the branch, so does its lock file, and
        // no one holds its lock. `free_branch` judges under the registry lock whether a live
        // lease holds the branch; were a neighbour's claim of the slot (the lock, then the file)
        // not under that lock too, the judgement could fall between the two and find the slot
        // leased for `mvk/c`, and the branch could never be made again.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let crashed = pool.acquire(f.c1, "mvk/c").expect("c");
        let (slot, admin) = (crashed.slot(), crashed.admin.clone());
        drop(crashed);
        wait_free(&pool, slot);
        fs::write(admin.join("HEAD"), "ref: refs/heads/mvk/c\n").expect("leave HEAD on c");
        let registry = pool.lock_registry().expect("lock registry");
        let neighbour = {
            let pool = pool.clone();
            let base = f.c2;
            std::thread::spawn(move || pool.acquire(base, "mvk/d"))
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            pool.try_lock_slot(slot).expect("probe slot").is_some(),
            "a neighbour took the slot's lock outside the registry lock"
        );
        let main = pool.main().expect("main");
        pool.free_branch(&main, "refs/heads/mvk/c", "mvk/c", None)
            .expect("a crashed lease's slot is no live lease");
        assert_eq!(
            fs::read_to_string(admin.join("HEAD")).expect("HEAD").trim(),
            f.c1.to_string(),
            "detached where the branch points"
        );
        drop(registry);
        let d = neighbour.join().expect("join").expect("d");
        assert_eq!(d.slot(), slot, "the neighbour leased the crashed slot");
        assert_eq!(
            fs::read_to_string(pool.lock_path(slot)).expect("lock file"),
            "mvk/d"
        );
        let c = pool.acquire(f.c2, "mvk/c").expect("c made again");
        assert_eq!(branch_tip(&f.repo, "mvk/c"), f.c2);
        drop((c, d));
    }

    #[test]
    fn a_head_planted_by_a_leased_neighbour_does_not_keep_a_branch_from_its_attempt() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let a = pool.acquire(f.c1, "mvk/a").expect("a");
        // A's agent names the next attempt's branch in its HEAD (names are predictable).
        let planted = "ref: refs/heads/mvk/c\n";
        fs::write(a.admin.join("HEAD"), planted).expect("plant");
        let c = pool.acquire(f.c2, "mvk/c").expect("c is not refused");
        assert_eq!(branch_tip(&f.repo, "mvk/c"), f.c2);
        fs::write(a.admin.join("HEAD"), planted).expect("plant again");
        fs::write(c.path.join("x"), "x").expect("write");
        let id = capture(&c, "m").expect("capture despite the planted HEAD");
        assert_eq!(branch_tip(&f.repo, "mvk/c"), id);
        // A slot leased for the branch itself is still refused.
        assert!(matches!(
            pool.acquire(f.c1, "mvk/c"),
            Err(WorktreeError::BranchCheckedOut { .. })
        ));
    }

    #[test]
    fn a_slot_whose_registration_names_the_main_checkout_is_rebuilt_and_the_registration_dropped() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/x").expect("acquire");
        let (slot, gitdir) = (lease.slot(), lease.admin.join("gitdir"));
        drop(lease);
        wait_free(&pool, slot);
        // Rewritten after the lease ended (a process that outlived its agent, or mvk killed).
        fs::write(&gitdir, format!("{}\n", f.repo.join(".git").display())).expect("relink");
        fs::write(f.repo.join("mine.txt"), "main's own").expect("write");
        let again = pool.acquire(f.c2, "mvk/y").expect("acquire again");
        assert_eq!(again.slot(), slot);
        assert_eq!(files(&again.path), tree_files(&f.repo, f.c2));
        let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
        let main = fs::canonicalize(&f.repo).expect("canonical");
        let listed: Vec<&str> = list
            .lines()
            .filter_map(|l| l.strip_prefix("worktree "))
            .collect();
        assert_eq!(
            listed.iter().filter(|w| Path::new(w) == main).count(),
            1,
            "{list}"
        );
        assert_eq!(
            fs::read_to_string(f.repo.join("mine.txt")).expect("main untouched"),
            "main's own"
        );
    }

    #[test]
    fn a_rewritten_gitdir_is_refused_and_put_back_before_anything_is_staged() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/r").expect("acquire");
        let gitdir = lease.admin.join("gitdir");
        let made = fs::read(&gitdir).expect("read gitdir");
        fs::write(f.repo.join("untracked.txt"), "main's own").expect("write");
        fs::write(&gitdir, format!("{}\n", f.repo.join(".git").display())).expect("relink");
        let err = capture(&lease, "m").expect_err("relinked");
        assert!(matches!(err, WorktreeError::Relinked { .. }), "{err:?}");
        assert_eq!(
            fs::read(&gitdir).expect("read"),
            made,
            "registration put back"
        );
        assert_eq!(branch_tip(&f.repo, "mvk/r"), f.c1, "nothing committed");
        // A link replaced by a symlink is removed, not written through.
        let victim = f.root.parent().expect("tmp").join("victim");
        fs::write(&victim, "keep").expect("victim");
        let commondir = lease.admin.join("commondir");
        let made = fs::read(&commondir).expect("read commondir");
        fs::remove_file(&commondir).expect("rm");
        std::os::unix::fs::symlink(&victim, &commondir).expect("symlink");
        assert!(head_of(&lease).is_err());
        assert_eq!(fs::read_to_string(&victim).expect("victim"), "keep");
        assert_eq!(fs::read(&commondir).expect("read"), made);
        // Intact again: the lease works.
        assert_eq!(head_of(&lease).expect("head"), f.c1);
        let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
        assert!(list.contains(&lease.path.display().to_string()), "{list}");
    }

    #[test]
    fn a_registration_naming_a_future_slot_is_not_pruned_when_that_slot_is_made() {
        // Slot 0's agent makes its registration name slot 1's path: building slot 1 must not
        // prune slot 0's git directory from under its attempt.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let first = pool.acquire(f.c1, "mvk/f0").expect("acquire");
        let gitdir = first.admin.join("gitdir");
        let made = fs::read(&gitdir).expect("read gitdir");
        let next = f
            .root
            .join(format!("slot-{}", first.slot() + 1))
            .join(".git");
        fs::write(&gitdir, format!("{}\n", next.display())).expect("relink");
        let second = pool.acquire(f.c1, "mvk/f1").expect("acquire a second slot");
        assert_ne!(second.slot(), first.slot());
        assert!(
            first.admin.is_dir(),
            "slot 0's git directory is still there"
        );
        let err = head_of(&first).expect_err("relinked");
        assert!(matches!(err, WorktreeError::Relinked { .. }), "{err:?}");
        assert_eq!(fs::read(&gitdir).expect("read"), made, "put back");
    }

    #[test]
    fn a_head_planted_without_pause_keeps_no_new_slot_from_its_branch() {
        // A leased neighbour's agent rewrites its HEAD to name the branch over and over: the
        // slot built for that branch must still be added (mvk registers it detached, with no
        // branch for a HEAD to name).
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let neighbour = pool.acquire(f.c1, "mvk/n").expect("acquire");
        let (stop, planter) = keep_planting(&neighbour.admin, "mvk/p");
        let failed = build_each(&pool, f.c1, (0..20).map(|_| "mvk/p".to_string()));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        planter.join().expect("planter");
        assert!(failed.is_empty(), "{failed:?}");
        let branches = git(&f.repo, &["branch", "--list", "mvk-scratch/*"]);
        assert_eq!(branches, "", "no scratch branch left");
    }

    /// Leases a slot built from nothing for each of BRANCHES (the slot is removed after each);
    /// out come the errors of those that failed.
    fn build_each(pool: &Pool, base: Oid, branches: impl Iterator<Item = String>) -> Vec<String> {
        let mut failed = Vec::new();
        for branch in branches {
            match pool.acquire(base, &branch) {
                Ok(lease) => {
                    let (path, slot) = (lease.path.clone(), lease.slot());
                    drop(lease);
                    wait_free(pool, slot);
                    fs::remove_dir_all(&path).expect("rm slot");
                }
                Err(e) => failed.push(e.to_string()),
            }
        }
        failed
    }

    /// Starts a thread that writes `ref: refs/heads/BRANCH` into HEAD (in ADMIN, a leased
    /// neighbour's git directory) without pause, whole files only (write, then rename, as a
    /// careful agent would), until the flag is set.
    fn keep_planting(
        admin: &Path,
        branch: &str,
    ) -> (
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    ) {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (head, planted) = (admin.join("HEAD"), admin.join("HEAD.planted"));
        let text = format!("ref: refs/heads/{branch}\n");
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = fs::write(&planted, &text);
                    let _ = fs::rename(&planted, &head);
                }
            })
        };
        (stop, thread)
    }

    #[test]
    fn a_head_planted_during_capture_and_reset_refuses_nothing_and_moves_no_branch() {
        // `capture` detaches HEAD, force-moves the lease's branch, then points HEAD at it; a
        // reset (`free_branch`) rewrites HEADs naming the branch. A leased neighbour's agent
        // writes its HEAD to name that branch between any two of those steps: nothing is
        // refused (libgit2 checks other worktrees' HEADs only when HEAD leaves a branch for
        // another, never from a detached HEAD, nor when a reference is written), and the
        // branch holds exactly what mvk put there.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let neighbour = pool.acquire(f.c1, "mvk/n").expect("neighbour");
        // The plant has teeth: from a HEAD on a branch, libgit2 refuses the planted one.
        fs::write(neighbour.admin.join("HEAD"), "ref: refs/heads/mvk/c\n").expect("plant");
        let probe = pool.acquire(f.c1, "mvk/probe").expect("probe");
        git(&f.repo, &["branch", "-f", "mvk/c", &f.c1.to_string()]);
        let refused = Repository::open(&probe.path)
            .expect("open")
            .set_head("refs/heads/mvk/c")
            .expect_err("refused from a HEAD on a branch");
        assert!(refused.message().contains("linked"), "{refused}");
        drop(probe);
        let (stop, planter) = keep_planting(&neighbour.admin, "mvk/c");
        let main = Repository::open(&f.repo).expect("open");
        let mut failed = Vec::new();
        for i in 0..40 {
            // A new lease of the existing branch: `reset_slot` and `free_branch` run.
            let lease = match pool.acquire(f.c1, "mvk/c") {
                Ok(lease) => lease,
                Err(e) => {
                    failed.push(format!("acquire {i}: {e}"));
                    continue;
                }
            };
            fs::write(lease.path.join("x"), format!("{i}\n")).expect("write");
            // Its own agent left HEAD on a branch of its own, as `git switch -c` does. (No git
            // child processes in this loop: each fork holds a copy of the slot locks until it
            // execs, which other tests' waits for a free slot would see.)
            let head = lease.admin.join("HEAD");
            fs::write(&head, "ref: refs/heads/mvk/side\n").expect("switch");
            match capture(&lease, "m") {
                Ok(id) => {
                    let at = main.refname_to_id("refs/heads/mvk/c").expect("tip");
                    if at != id {
                        failed.push(format!("capture {i}: branch at {at}, captured {id}"));
                    }
                    let head = fs::read_to_string(&head).expect("read HEAD");
                    if head.trim() != "ref: refs/heads/mvk/c" {
                        failed.push(format!("capture {i}: HEAD is {head}"));
                    }
                }
                Err(e) => failed.push(format!("capture {i}: {e}")),
            }
            let slot = lease.slot();
            drop(lease);
            wait_free(&pool, slot);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        planter.join().expect("planter");
        assert!(failed.is_empty(), "{failed:#?}");
        // The neighbour's own capture (its HEAD names `mvk/c`, so its commit builds on that
        // branch's tip) moves its own branch, never `mvk/c`.
        fs::write(neighbour.admin.join("HEAD"), "ref: refs/heads/mvk/c\n").expect("plant");
        let before = branch_tip(&f.repo, "mvk/c");
        fs::write(neighbour.path.join("y"), "y\n").expect("write");
        let theirs = capture(&neighbour, "n").expect("neighbour's capture");
        assert_eq!(branch_tip(&f.repo, "mvk/c"), before);
        assert_eq!(branch_tip(&f.repo, "mvk/n"), theirs);
    }

    #[test]
    fn a_neighbour_that_plants_every_new_branch_keeps_no_new_slot_from_being_built() {
        // Building a slot off a branch, however unguessable its name, was open to this: every
        // ref is readable, and a leased neighbour's agent that lists them without pause and
        // writes each new one into its HEAD, before libgit2 checked, made it refuse to add the
        // worktree ("already checked out": about one build in 300 here, the run ending on
        // mvk's own error). No branch is made for a build now: there is nothing to plant.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let neighbour = pool.acquire(f.c1, "mvk/n").expect("neighbour");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let planter = {
            let stop = stop.clone();
            let heads = f.repo.join(".git/refs/heads");
            let head = neighbour.admin.join("HEAD");
            std::thread::spawn(move || {
                let mut planted = std::collections::BTreeSet::new();
                let known: BTreeSet<String> = ["main", "mvk"].map(String::from).into();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for e in walkdir::WalkDir::new(&heads).into_iter().flatten() {
                        let Ok(name) = e.path().strip_prefix(&heads) else {
                            continue;
                        };
                        let name = name.to_string_lossy().into_owned();
                        let top = name.split('/').next().unwrap_or_default().to_string();
                        // The attempts' own branches are planted by the tests above.
                        if e.file_type().is_file() && !known.contains(&top) {
                            let _ = fs::write(&head, format!("ref: refs/heads/{name}\n"));
                            planted.insert(name);
                        }
                    }
                }
                planted
            })
        };
        let failed = build_each(&pool, f.c1, (0..100).map(|i| format!("mvk/s{i}")));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let planted = planter.join().expect("planter");
        assert!(
            failed.is_empty(),
            "{} of 100 failed: {failed:#?}",
            failed.len()
        );
        assert!(planted.is_empty(), "a build made a branch: {planted:?}");
        let branches = git(&f.repo, &["branch", "--list", "mvk-scratch/*"]);
        assert_eq!(branches, "", "no scratch branch left");
    }

    #[test]
    fn slot_deleted_behind_our_back_is_recreated() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/d1").expect("acquire");
        let path = lease.path.clone();
        let slot = lease.slot();
        drop(lease);
        wait_free(&pool, slot);
        fs::remove_dir_all(&path).expect("rm slot");
        let lease = acquire_slot(&pool, f.c2, "mvk/d2", &path);
        assert_eq!(files(&lease.path), tree_files(&f.repo, f.c2));
        let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
        assert_eq!(
            list.matches("worktree ").count(),
            2,
            "no stale entry: {list}"
        );
        assert!(!list.contains("prunable"), "{list}");
    }

    #[test]
    fn slot_with_broken_git_link_is_rebuilt() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/g1").expect("acquire");
        let path = lease.path.clone();
        fs::remove_file(path.join(".git")).expect("rm .git link");
        fs::write(path.join("junk"), "j").expect("write");
        let slot = lease.slot();
        drop(lease);
        wait_free(&pool, slot);
        let lease = acquire_slot(&pool, f.c2, "mvk/g2", &path);
        assert_eq!(files(&lease.path), tree_files(&f.repo, f.c2));
        assert_eq!(git(&path, &["status", "--porcelain"]), "");
    }

    /// Puts a file mvk cannot delete under `slot`: immutable (`chattr +i`, as root), or, where
    /// that is refused, in a directory without permissions (as a user that is not root).
    /// Returns whether the file was made immutable (which only `chattr -i` undoes).
    fn pin_a_file(slot: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let dir = slot.join("junk/locked");
        fs::create_dir_all(&dir).expect("mkdir");
        let pinned = dir.join("f");
        fs::write(&pinned, "pinned").expect("write");
        let immutable = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&pinned)
            .status()
            .is_ok_and(|s| s.success());
        if !immutable {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o000)).expect("chmod");
        }
        immutable
    }

    #[test]
    fn a_slot_holding_a_file_mvk_cannot_delete_is_set_aside_and_rebuilt() {
        // Regression: the rebuild's removal failed and ended the run, and every later run
        // (the lowest idle slot is always taken first).
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/p1").expect("acquire");
        let path = lease.path.clone();
        pin_a_file(&path);
        // Broken, so that the next lease rebuilds it.
        fs::remove_file(path.join(".git")).expect("rm .git link");
        let slot = lease.slot();
        drop(lease);
        wait_free(&pool, slot);
        let again = pool.acquire(f.c2, "mvk/p2");
        let _ = std::process::Command::new("chattr")
            .args(["-R", "-f", "-i"])
            .arg(&f.root)
            .status();
        let again = again.expect("a rebuilt slot");
        assert_eq!(files(&again.path), tree_files(&f.repo, f.c2));
        assert_eq!(git(&again.path, &["status", "--porcelain"]), "");
    }

    #[test]
    fn gc_sets_aside_a_slot_holding_a_file_it_cannot_delete_and_removes_it_once_it_can() {
        // Regression: gc's plain removal failed, and so did every later gc.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/gc1").expect("acquire");
        let path = lease.path.clone();
        let immutable = pin_a_file(&path);
        let slot = lease.slot();
        drop(lease);
        wait_free(&pool, slot);
        let first = pool.gc();
        let _ = std::process::Command::new("chattr")
            .args(["-R", "-f", "-i"])
            .arg(&f.root)
            .status();
        assert_eq!(first.expect("gc"), vec![path.clone()]);
        assert!(!path.exists());
        let aside: Vec<PathBuf> = fs::read_dir(&f.root)
            .expect("list")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().contains(".broken-"))
            .collect();
        assert_eq!(aside.len(), usize::from(immutable), "{aside:?}");
        // Unpinned now: the next gc takes what was set aside.
        let second = pool.gc().expect("gc again");
        assert_eq!(second, aside);
        assert!(aside.iter().all(|p| !p.exists()));
    }

    #[test]
    fn a_link_is_put_back_in_a_directory_made_read_only() {
        // The agent may take its git directory's write permission away; root writes there
        // all the same, so only the mode tells that mvk gave it back.
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("admin");
        fs::create_dir(&dir).expect("mkdir");
        fs::write(dir.join("gitdir"), "elsewhere").expect("write");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o500)).expect("chmod");
        replace_file(&dir.join("gitdir"), b"here").expect("replace");
        assert_eq!(fs::read(dir.join("gitdir")).expect("read"), b"here");
        let mode = fs::metadata(&dir).expect("stat").permissions().mode();
        assert_eq!(mode & 0o700, 0o700, "{mode:o}");
    }

    #[test]
    fn empty_repository_is_a_clear_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let repo = tmp.path().join("repo");
        fs::create_dir(&repo).expect("mkdir");
        git(&repo, &["init", "-q"]);
        let err = Pool::open(&repo, &tmp.path().join("pool")).expect_err("empty repo");
        assert!(matches!(err, WorktreeError::NoCommits { .. }), "{err:?}");
        assert!(err.to_string().contains("no commits"), "{err}");
    }

    #[test]
    fn root_inside_repo_and_unknown_base_are_refused() {
        let f = fixture();
        let err = Pool::open(&f.repo, &f.repo.join("pool")).expect_err("inside");
        assert!(
            matches!(err, WorktreeError::RootInsideRepo { .. }),
            "{err:?}"
        );
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let missing = Oid::from_str("1234567890123456789012345678901234567890").expect("oid");
        assert!(matches!(
            pool.acquire(missing, "mvk/m"),
            Err(WorktreeError::BaseNotFound { .. })
        ));
    }

    /// Review r8d, W2: a directory at the restore's temporary name made it fail, and capture
    /// then had libgit2 open the agent's index: a FIFO there blocked mvk for good.
    #[test]
    fn an_index_the_agent_replaced_by_a_fifo_neither_hangs_capture_nor_is_read() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/fifo").expect("acquire");
        fs::write(lease.path.join("a.txt"), "changed\n").expect("write");
        fs::remove_file(lease.admin.join("index")).expect("rm index");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            lease.admin.join("index"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        fs::create_dir(lease.admin.join("index.mvk-tmp")).expect("mkdir");
        fs::write(lease.admin.join("index.mvk-tmp/x"), "").expect("write");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(capture(&lease, "w2").map(|head| (head, lease.path.clone())));
        });
        let (head, path) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("capture returns")
            .expect("capture succeeds");
        assert_eq!(committed(&path, head, "a.txt"), b"changed\n");
    }

    /// Review r8e, M1: an index replaced by a directory nested deeper than mvk removed (then)
    /// made the restore, and the whole run, fail; now it goes, and capture goes on.
    #[test]
    fn an_index_replaced_by_a_directory_too_deep_to_remove_is_moved_aside() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/deep-index").expect("acquire");
        fs::write(lease.path.join("a.txt"), "changed\n").expect("write");
        fs::remove_file(lease.admin.join("index")).expect("rm index");
        let mut deep = lease.admin.join("index");
        for _ in 0..300 {
            deep.push("d");
        }
        fs::create_dir_all(&deep).expect("mkdir deep");
        let head = capture(&lease, "m1").expect("capture succeeds");
        assert_eq!(committed(&lease.path, head, "a.txt"), b"changed\n");
    }

    /// A lease of the slot at `want` (the one just released). Another test's child process may
    /// hold the slot's lock for the moment between its fork and its exec (the lock is on the
    /// open file, which the child shares until exec closes it): then the pool rightly hands out
    /// another slot, and this tries again.
    fn acquire_slot(pool: &Pool, base: Oid, branch: &str, want: &Path) -> Lease {
        for _ in 0..200 {
            let lease = pool.acquire(base, branch).expect("acquire");
            if lease.path == want {
                return lease;
            }
            drop(lease);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("slot {} never came back", want.display());
    }

    /// What commit `head` holds at `file`, read through the repository at `path`.
    fn committed(path: &Path, head: Oid, file: &str) -> Vec<u8> {
        let repo = Repository::open(path).expect("open");
        let tree = repo
            .find_commit(head)
            .expect("commit")
            .tree()
            .expect("tree");
        let blob = tree.get_path(Path::new(file)).expect("file").id();
        repo.find_blob(blob).expect("blob").content().to_vec()
    }

    #[test]
    fn capture_without_changes_returns_head() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/none").expect("acquire");
        assert_eq!(capture(&lease, "nothing").expect("capture"), f.c1);
        // Only ignored output: still nothing to record.
        fs::create_dir_all(lease.path.join("target")).expect("mkdir");
        fs::write(lease.path.join("target/out"), "o").expect("write");
        assert_eq!(capture(&lease, "nothing").expect("capture"), f.c1);
        assert_eq!(branch_tip(&f.repo, "mvk/none"), f.c1);
    }

    #[test]
    fn capture_records_commits_edits_deletions_and_untracked_files() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/cap").expect("acquire");
        let p = &lease.path;
        fs::write(p.join("first.txt"), "1").expect("write");
        git(p, &["add", "first.txt"]);
        git(p, &["commit", "-q", "-m", "agent"]);
        let agent = rev(p, "HEAD");
        fs::write(p.join("a.txt"), "changed\n").expect("write");
        fs::remove_file(p.join("src/lib.rs")).expect("rm");
        fs::create_dir_all(p.join("n1/n2")).expect("mkdir");
        fs::write(p.join("n1/n2/deep.txt"), "deep").expect("write");
        fs::write(p.join(".hidden"), "h").expect("write");
        fs::create_dir_all(p.join("target")).expect("mkdir");
        fs::write(p.join("target/out"), "o").expect("write");

        let id = capture(&lease, "attempt 1").expect("capture");
        assert_ne!(id, agent);
        assert_eq!(rev(&f.repo, &format!("{id}^")), agent, "agent commit kept");
        assert_eq!(branch_tip(&f.repo, "mvk/cap"), id);
        assert_eq!(head_of(&lease).expect("head"), id);
        let listed = git(&f.repo, &["ls-tree", "-r", "--name-only", &id.to_string()]);
        let names: Vec<&str> = listed.lines().collect();
        assert_eq!(
            names,
            [
                ".gitignore",
                ".hidden",
                "a.txt",
                "first.txt",
                "n1/n2/deep.txt"
            ]
        );
        let msg = git(&f.repo, &["log", "-1", "--format=%s", &id.to_string()]);
        assert_eq!(msg.trim(), "attempt 1");
        assert_eq!(
            git(p, &["status", "--porcelain"]),
            "",
            "index matches capture"
        );
    }

    /// Every path under DIR but `.git`, files and directories alike, sorted.
    fn tree_on_disk(dir: &Path) -> Vec<String> {
        let mut out: Vec<String> = walkdir::WalkDir::new(dir)
            .min_depth(1)
            .into_iter()
            .filter_entry(|e| e.file_name() != ".git" || e.depth() != 1)
            .map(|e| {
                let e = e.expect("walk");
                let rel = e.path().strip_prefix(dir).expect("inside");
                rel.to_string_lossy().into_owned()
            })
            .collect();
        out.sort();
        out
    }

    /// An agent's leftovers: an edit, a deletion leaving `src/` empty, a new nested file, an
    /// empty directory, ignored output. Returns the lease and the captured commit.
    fn captured_attempt(f: &Fixture, pool: &Pool, branch: &str) -> (Lease, Oid) {
        let lease = pool.acquire(f.c1, branch).expect("acquire");
        let p = &lease.path;
        fs::write(p.join("a.txt"), "changed\n").expect("write");
        fs::remove_file(p.join("src/lib.rs")).expect("rm");
        fs::create_dir_all(p.join("n1/n2")).expect("mkdir");
        fs::write(p.join("n1/n2/deep.txt"), "deep").expect("write");
        fs::create_dir_all(p.join("empty/inner")).expect("mkdir");
        fs::create_dir_all(p.join("target/debug")).expect("mkdir");
        fs::write(p.join("target/debug/forged"), "o").expect("write");
        let id = capture(&lease, "attempt").expect("capture");
        (lease, id)
    }

    #[test]
    fn a_reset_in_place_writes_only_what_differs_and_leaves_a_clean_checkout() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/r1").expect("acquire");
        let p = lease.path.clone();
        // The same in c1 and c2, rewritten to the same size: only its stat data tells.
        fs::write(p.join(".gitignore"), "TARGET/\n").expect("write");
        fs::write(p.join("untracked.txt"), "u").expect("write");
        fs::create_dir_all(p.join("target/x")).expect("mkdir");
        fs::write(p.join("target/x/o"), "o").expect("write");
        fs::create_dir_all(p.join("empty/inner")).expect("mkdir");
        drop(lease);
        let repo = Repository::open(&p).expect("open");
        let tree = repo.find_commit(f.c2).and_then(|c| c.tree()).expect("tree");
        let mut index = repo.index().expect("index");
        assert!(
            reset_in_place(&repo, &pool.git_dir, &p, &tree, &mut index).expect("reset"),
            "reset in place"
        );
        // An index written in the same clock tick as the files makes them racily clean (and
        // rewritten by the next reset, as git would): a tick later, they are simply clean.
        std::thread::sleep(std::time::Duration::from_millis(20));
        index.write().expect("write index");
        assert_eq!(tree_on_disk(&p), [".gitignore", "a.txt", "b.txt"]);
        assert_eq!(
            fs::read_to_string(p.join(".gitignore")).expect("read"),
            "target/\n"
        );
        assert_eq!(fs::read_to_string(p.join("a.txt")).expect("read"), "two\n");
        let c2 = f.c2.to_string();
        git(&p, &["diff", "--quiet", &c2]);
        git(&p, &["diff", "--cached", "--quiet", &c2]);
        assert_eq!(git(&p, &["ls-files", "--others"]), "");
        // Every entry carries the stat data of its file: the next reset trusts it.
        let dirty = sweep(&repo, &pool.git_dir, &p, &index)
            .expect("sweep")
            .expect("judged");
        assert!(dirty.is_empty(), "{dirty:?}");
    }

    /// Writes an index entry for REL in the worktree at DIR holding ID but the stat data of the
    /// file now on disk: what an agent can do to its own index, by hand.
    fn forge_entry(dir: &Path, rel: &str, id: Oid, mode: u32) {
        use std::os::unix::fs::MetadataExt;
        let repo = Repository::open(dir).expect("open");
        let mut index = repo.index().expect("index");
        let meta = fs::symlink_metadata(dir.join(rel)).expect("stat");
        let time =
            |s: i64, ns: i64| git2::IndexTime::new(i32::try_from(s).expect("time"), ns as u32);
        index
            .add(&git2::IndexEntry {
                ctime: time(meta.ctime(), meta.ctime_nsec()),
                mtime: time(meta.mtime(), meta.mtime_nsec()),
                dev: meta.dev() as u32,
                ino: meta.ino() as u32,
                mode,
                uid: meta.uid(),
                gid: meta.gid(),
                file_size: meta.size() as u32,
                id,
                flags: 0,
                flags_extended: 0,
                path: rel.as_bytes().to_vec(),
            })
            .expect("add forged entry");
        // A tick after the file, so the entry is not racily clean.
        std::thread::sleep(std::time::Duration::from_millis(20));
        index.write().expect("write forged index");
    }

    #[test]
    fn an_index_the_agent_forged_fools_neither_capture_nor_the_gates_nor_the_next_reset() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/forged").expect("acquire");
        let p = lease.path.clone();
        let one = Repository::open(&p)
            .and_then(|r| r.revparse_single("HEAD:a.txt").map(|o| o.id()))
            .expect("blob of a.txt");
        // The file weakened on disk, its entry still naming the base's blob.
        fs::write(p.join("a.txt"), "two\n").expect("write");
        std::thread::sleep(std::time::Duration::from_millis(20));
        forge_entry(&p, "a.txt", one, 0o100644);
        let head = capture(&lease, "attempt").expect("capture");
        // The commit holds what the gates will run: the file on disk.
        let tree = tree_files(&f.repo, head);
        assert!(
            tree.contains(&("a.txt".to_string(), b"two\n".to_vec())),
            "{tree:?}"
        );
        // Forged again after capture: the gates' clean-in-place check is not fooled either.
        fs::write(p.join("a.txt"), "six\n").expect("write");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let captured = Repository::open(&p)
            .and_then(|r| r.revparse_single("HEAD:a.txt").map(|o| o.id()))
            .expect("blob");
        forge_entry(&p, "a.txt", captured, 0o100644);
        // `clean_in_place` reads what capture wrote (mvk's), so it refuses or rewrites.
        let clean = clean_in_place(&lease, head).expect("clean in place");
        assert!(
            !clean || fs::read_to_string(p.join("a.txt")).expect("read") == "two\n",
            "the gates would run a file the commit does not hold"
        );
        drop(lease);
        // The next lease of the slot, on the base: the file is the base's again.
        let _lease = acquire_slot(&pool, f.c1, "mvk/next", &p);
        assert_eq!(fs::read_to_string(p.join("a.txt")).expect("read"), "one\n");
        git(&p, &["diff", "--quiet", &f.c1.to_string()]);
    }

    #[test]
    fn a_link_and_a_forged_entry_below_it_make_no_reset_touch_anything_outside() {
        let f = fixture();
        let outside = f._tmp.path().join("victim");
        fs::create_dir_all(&outside).expect("mkdir");
        fs::write(outside.join("secret"), "keep").expect("write");
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/link").expect("acquire");
        let p = lease.path.clone();
        std::os::unix::fs::symlink(&outside, p.join("L")).expect("symlink");
        let repo = Repository::open(&p).expect("open");
        let target = repo
            .blob(outside.as_os_str().as_encoded_bytes())
            .expect("blob");
        let any = repo.blob(b"x").expect("blob");
        drop(repo);
        forge_entry(&p, "L", target, 0o120000);
        // An entry below the link, missing on disk: a reset would "restore" it by removing
        // and writing through the link.
        {
            let repo = Repository::open(&p).expect("open");
            let mut index = repo.index().expect("index");
            let mut entry = index.get_path(Path::new("a.txt"), 0).expect("entry");
            entry.path = b"L/secret".to_vec();
            entry.id = any;
            index.add(&entry).expect("add");
            index.write().expect("write");
        }
        drop(lease);
        let _lease = acquire_slot(&pool, f.c2, "mvk/after", &p);
        assert_eq!(
            fs::read_to_string(outside.join("secret")).expect("the file outside is still there"),
            "keep"
        );
        assert!(
            fs::symlink_metadata(p.join("L")).is_err(),
            "the link is gone"
        );
        git(&p, &["diff", "--quiet", &f.c2.to_string()]);
    }

    /// Review r8d, W1: a reset that cannot go in place (a base 65 files away) checked out over
    /// what the agent left, and libgit2 could write the base's `a.txt` through the agent's
    /// symlink into a file outside, and `src/lib.rs` through its hard link.
    #[test]
    fn a_full_checkout_writes_through_no_link_the_agent_left() {
        let f = fixture();
        let outside = f._tmp.path().join("bashrc");
        fs::write(&outside, "VICTIM").expect("write");
        // c3: c1 and more new files than a reset in place writes.
        let c3 = {
            let repo = Repository::open(&f.repo).expect("open");
            let c1 = repo.find_commit(f.c1).expect("c1");
            let mut tb = repo
                .treebuilder(Some(&c1.tree().expect("tree")))
                .expect("tb");
            for i in 0..=RESET_IN_PLACE_MAX {
                let blob = repo.blob(format!("{i}\n").as_bytes()).expect("blob");
                tb.insert(format!("new-{i}.txt"), blob, 0o100_644)
                    .expect("insert");
            }
            let tree = repo.find_tree(tb.write().expect("write")).expect("tree");
            let sig = git2::Signature::now("t", "t@example.com").expect("sig");
            repo.commit(None, &sig, &sig, "c3", &tree, &[&c1])
                .expect("commit")
        };
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/w1").expect("acquire");
        let p = lease.path.clone();
        fs::remove_file(p.join("a.txt")).expect("rm");
        std::os::unix::fs::symlink(&outside, p.join("a.txt")).expect("symlink");
        fs::remove_file(p.join("src/lib.rs")).expect("rm");
        fs::write(f._tmp.path().join("hard"), "HARD").expect("write");
        fs::hard_link(f._tmp.path().join("hard"), p.join("src/lib.rs")).expect("hard link");
        drop(lease);
        let _lease = acquire_slot(&pool, c3, "mvk/w1b", &p);
        assert_eq!(fs::read_to_string(&outside).expect("read"), "VICTIM");
        assert_eq!(
            fs::read_to_string(f._tmp.path().join("hard")).expect("read"),
            "HARD"
        );
        assert!(
            !fs::symlink_metadata(p.join("a.txt"))
                .expect("stat")
                .is_symlink()
        );
        assert_eq!(
            fs::read_to_string(p.join("new-3.txt")).expect("read"),
            "3\n"
        );
        git(&p, &["diff", "--quiet", &c3.to_string()]);
        git(&p, &["diff", "--cached", "--quiet", &c3.to_string()]);
    }

    #[test]
    fn a_hard_link_between_tracked_files_does_not_survive_a_reset() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/hard").expect("acquire");
        let p = lease.path.clone();
        drop(lease);
        fs::remove_file(p.join("a.txt")).expect("rm");
        fs::hard_link(p.join("src/lib.rs"), p.join("a.txt")).expect("link");
        let _lease = acquire_slot(&pool, f.c1, "mvk/hard2", &p);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(fs::metadata(p.join("src/lib.rs")).expect("stat").nlink(), 1);
        assert_eq!(fs::read_to_string(p.join("a.txt")).expect("read"), "one\n");
    }

    #[test]
    fn a_reset_in_place_leaves_paths_git_refuses_to_a_checkout() {
        assert!(plain_path(b"a/b.txt"));
        for bad in [
            &b"../x"[..],
            b"a/../x",
            b"",
            b"a//b",
            b"./a",
            b".GIT/config",
            b"a/.git/x",
        ] {
            assert!(!plain_path(bad), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_sweep_deletes_nothing_through_a_directory_swapped_for_a_symlink() {
        // Regression: the sweep saw that a tracked directory was one, then listed it and
        // removed what it held by path: swapped for a symlink in between (by a process an
        // agent left running), it made mvk delete the files of the directory the symlink named.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/swap").expect("acquire");
        let p = lease.path.clone();
        // `src` is tracked (`src/lib.rs`); what else it holds is the sweep's to remove.
        fs::write(p.join("src/untracked.txt"), "u").expect("write");
        drop(lease);
        let outside = f._tmp.path().join("outside");
        fs::create_dir_all(outside.join("dir")).expect("mkdir");
        fs::write(outside.join("victim.txt"), "keep").expect("write");
        fs::write(outside.join("dir/victim.txt"), "keep").expect("write");
        let repo = Repository::open(&p).expect("open");
        let tree = repo.find_commit(f.c1).and_then(|c| c.tree()).expect("tree");
        let mut index = repo.index().expect("index");
        let (src, to) = (p.join("src"), outside.clone());
        untrusted::race::set(move |name| {
            if name == Path::new("src") && fs::symlink_metadata(&src).is_ok_and(|m| m.is_dir()) {
                fs::rename(&src, src.with_file_name("src.aside")).expect("rename");
                std::os::unix::fs::symlink(&to, &src).expect("symlink");
            }
        });
        let reset = reset_in_place(&repo, &pool.git_dir, &p, &tree, &mut index);
        untrusted::race::clear();
        assert!(!reset.expect("reset"), "left to a full checkout");
        for victim in ["victim.txt", "dir/victim.txt"] {
            assert_eq!(
                fs::read_to_string(outside.join(victim)).ok().as_deref(),
                Some("keep"),
                "{victim}"
            );
        }
    }

    #[test]
    fn a_retired_slot_is_left_as_it_is_and_never_leased_until_gc() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/retired").expect("acquire");
        let (slot, path) = (lease.slot(), lease.path.clone());
        fs::write(path.join("left.txt"), "by a process mvk could not end").expect("write");
        lease.retire().expect("retire");
        let next = pool.acquire(f.c1, "mvk/next").expect("acquire");
        assert_ne!(next.slot(), slot, "a retired slot is leased again");
        assert!(path.join("left.txt").exists(), "a retired slot is touched");
        drop(next);
        let removed = pool.gc().expect("gc");
        assert!(removed.contains(&path), "{removed:?}");
        let again = pool.acquire(f.c1, "mvk/again").expect("acquire");
        assert_eq!(again.slot(), slot, "gc frees the number");
        assert!(!path.join("left.txt").exists());
    }

    #[test]
    fn clean_in_place_leaves_exactly_the_captured_commit() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let (lease, id) = captured_attempt(&f, &pool, "mvk/clean");
        assert!(
            clean_in_place(&lease, id).expect("clean"),
            "cleaned in place"
        );
        // What a fresh checkout of the commit holds: no ignored output, no empty directory.
        assert_eq!(
            tree_on_disk(&lease.path),
            [".gitignore", "a.txt", "n1", "n1/n2", "n1/n2/deep.txt"]
        );
        assert_eq!(
            git(&lease.path, &["status", "--porcelain", "--ignored"]),
            ""
        );
        assert_eq!(head_of(&lease).expect("head"), id);
    }

    #[test]
    fn clean_in_place_refuses_a_worktree_that_is_not_what_capture_recorded() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        // A tracked file rewritten after the capture, to the same size.
        let (lease, id) = captured_attempt(&f, &pool, "mvk/edited");
        fs::write(lease.path.join("a.txt"), "CHANGED\n").expect("write");
        assert!(!clean_in_place(&lease, id).expect("clean"), "edited file");
        drop(lease);
        // Only its mode changed.
        let (lease, id) = captured_attempt(&f, &pool, "mvk/chmod");
        let a = lease.path.join("a.txt");
        let mut perms = fs::metadata(&a).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        fs::set_permissions(&a, perms).expect("chmod");
        assert!(!clean_in_place(&lease, id).expect("clean"), "mode changed");
        drop(lease);
        // A tracked file gone.
        let (lease, id) = captured_attempt(&f, &pool, "mvk/gone");
        fs::remove_file(lease.path.join("n1/n2/deep.txt")).expect("rm");
        assert!(!clean_in_place(&lease, id).expect("clean"), "file gone");
        drop(lease);
        // HEAD is not the commit asked for.
        let (lease, _) = captured_attempt(&f, &pool, "mvk/other");
        assert!(
            !clean_in_place(&lease, f.c1).expect("clean"),
            "other commit"
        );
        drop(lease);
        // A checkout would convert line endings.
        git(&f.repo, &["config", "core.autocrlf", "input"]);
        let (lease, id) = captured_attempt(&f, &pool, "mvk/crlf");
        assert!(!clean_in_place(&lease, id).expect("clean"), "autocrlf");
    }

    #[test]
    fn capture_uses_repo_user_when_configured() {
        let f = fixture();
        git(&f.repo, &["config", "user.name", "Repo User"]);
        git(&f.repo, &["config", "user.email", "repo@example.com"]);
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/user").expect("acquire");
        fs::write(lease.path.join("x"), "x").expect("write");
        let id = capture(&lease, "m").expect("capture");
        let who = git(
            &f.repo,
            &["log", "-1", "--format=%an <%ae>|%cn", &id.to_string()],
        );
        assert_eq!(who.trim(), "Repo User <repo@example.com>|Repo User");
    }

    #[test]
    fn capture_without_any_git_user_configured() {
        // libgit2 reads the user's global and XDG config at startup, so run the real capture in
        // a child test process whose HOME and XDG dirs are empty.
        let tmp = tempfile::tempdir().expect("tempdir");
        let exe = std::env::current_exe().expect("test binary");
        let out = Command::new(exe)
            .args([
                "--exact",
                "run::worktree::tests::child_capture_with_empty_home",
                "--ignored",
                "--nocapture",
            ])
            .env("HOME", tmp.path())
            .env("XDG_CONFIG_HOME", tmp.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env(CHILD_ENV, tmp.path())
            .output()
            .expect("run child test");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("1 passed"),
            "child test did not run: {stdout}"
        );
    }

    const CHILD_ENV: &str = "MVK_WORKTREE_TEST_CHILD";

    #[test]
    #[ignore = "run by capture_without_any_git_user_configured in a clean environment"]
    fn child_capture_with_empty_home() {
        let home = std::env::var_os(CHILD_ENV).expect("only run as a child");
        assert_eq!(std::env::var_os("HOME"), Some(home));
        let f = fixture();
        let repo = Repository::open(&f.repo).expect("open");
        let config = repo.config().expect("config");
        assert!(
            config.get_string("user.name").is_err(),
            "a user is configured"
        );
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/nouser").expect("acquire");
        fs::write(lease.path.join("x"), "x").expect("write");
        let id = capture(&lease, "m").expect("capture");
        let commit = repo.find_commit(id).expect("commit");
        assert_eq!(commit.author().name().ok(), Some("mvk"));
        assert_eq!(commit.author().email().ok(), Some("mvk@localhost"));
        assert_eq!(commit.committer().name().ok(), Some("mvk"));
    }

    #[test]
    fn capture_from_other_branch_or_detached_head() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");

        let lease = pool.acquire(f.c1, "mvk/wander").expect("acquire");
        let p = lease.path.clone();
        git(&p, &["checkout", "-q", "-b", "agent-side"]);
        fs::write(p.join("side.txt"), "s").expect("write");
        git(&p, &["add", "side.txt"]);
        git(&p, &["commit", "-q", "-m", "side"]);
        let side = rev(&p, "HEAD");
        fs::write(p.join("loose.txt"), "l").expect("write");
        let id = capture(&lease, "wander").expect("capture");
        assert_eq!(rev(&f.repo, &format!("{id}^")), side);
        assert_eq!(branch_tip(&f.repo, "mvk/wander"), id);
        assert_eq!(
            branch_tip(&f.repo, "agent-side"),
            side,
            "agent branch untouched"
        );
        assert_eq!(
            git(&p, &["symbolic-ref", "HEAD"]).trim(),
            "refs/heads/mvk/wander"
        );
        drop(lease);

        let lease = pool.acquire(f.c1, "mvk/detached").expect("acquire");
        let p = lease.path.clone();
        git(&p, &["checkout", "-q", "--detach"]);
        fs::write(p.join("d.txt"), "d").expect("write");
        git(&p, &["add", "d.txt"]);
        git(&p, &["commit", "-q", "-m", "detached work"]);
        let detached = rev(&p, "HEAD");
        let id = capture(&lease, "detached").expect("capture");
        assert_eq!(id, detached, "nothing uncommitted: HEAD itself");
        assert_eq!(branch_tip(&f.repo, "mvk/detached"), detached);
        assert_eq!(
            git(&p, &["symbolic-ref", "HEAD"]).trim(),
            "refs/heads/mvk/detached"
        );
    }

    /// Waits until no process holds slot `n`'s lock: a process another test forks while a
    /// lease is held keeps a copy of the lock's file until it execs.
    fn wait_free(pool: &Pool, n: usize) {
        for _ in 0..500 {
            if pool.try_lock_slot(n).expect("probe slot").is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("slot {n} stayed locked");
    }

    #[test]
    fn gc_removes_idle_slots_and_keeps_leased_ones() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let kept = pool.acquire(f.c1, "mvk/k").expect("kept");
        let idle = pool.acquire(f.c1, "mvk/i").expect("idle");
        let idle_path = idle.path.clone();
        let idle_slot = idle.slot();
        drop(idle);
        wait_free(&pool, idle_slot);
        let removed = pool.gc().expect("gc");
        assert_eq!(removed, vec![idle_path.clone()]);
        assert!(!idle_path.exists());
        assert!(kept.path.exists());
        let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
        assert!(!list.contains(&idle_path.display().to_string()), "{list}");
        assert!(list.contains(&kept.path.display().to_string()), "{list}");
        assert_eq!(branch_tip(&f.repo, "mvk/i"), f.c1, "branches stay");
        let kept_slot = kept.slot();
        drop(kept);
        wait_free(&pool, kept_slot);
        assert_eq!(pool.gc().expect("gc").len(), 1);
        assert!(pool.gc().expect("gc again").is_empty());
        // The pool still works after a full gc.
        let again = pool.acquire(f.c2, "mvk/after").expect("acquire after gc");
        assert_eq!(files(&again.path), tree_files(&f.repo, f.c2));
    }

    /// Plants `refs/heads/NAME` at `at`, as a build that died would leave it.
    fn plant_branch(repo: &Path, name: &str, at: Oid) {
        git(
            repo,
            &["update-ref", &format!("refs/heads/{name}"), &at.to_string()],
        );
    }

    #[test]
    fn gc_scratch_removes_this_pools_leftover_scratch_branches_only() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/k").expect("acquire");
        let mine = format!("mvk-scratch/{}-0-00000000deadbeef", pool.root_tag);
        let other = "mvk-scratch/0123abcd-0-00000000deadbeef";
        plant_branch(&f.repo, &mine, f.c1);
        plant_branch(&f.repo, other, f.c1);
        // A slot mvk died building still names its scratch branch in its HEAD.
        fs::write(
            lease.admin.join("HEAD"),
            format!("ref: refs/heads/{mine}\n"),
        )
        .expect("plant");
        assert_eq!(pool.gc_scratch(true).expect("dry run"), [mine.as_str()]);
        assert_eq!(
            branch_tip(&f.repo, &mine),
            f.c1,
            "a dry run deletes nothing"
        );
        assert_eq!(pool.gc_scratch(false).expect("gc"), [mine.as_str()]);
        let left = git(&f.repo, &["branch", "--list", "mvk-scratch/*"]);
        assert!(!left.contains(&mine), "{left}");
        assert!(
            left.contains(other),
            "another pool's is not this gc's: {left}"
        );
        assert_eq!(branch_tip(&f.repo, "mvk/k"), f.c1, "other branches stay");
        assert!(pool.gc_scratch(false).expect("again").is_empty());
    }

    #[test]
    fn gc_scratch_waits_for_a_slot_build_in_progress() {
        // A build holds the registry lock from its scratch branch's creation to its deletion:
        // gc takes the lock first, so it never deletes a branch a build is using.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let building = format!("mvk-scratch/{}-3-00000000feedface", pool.root_tag);
        let registry = pool.lock_registry().expect("lock registry");
        plant_branch(&f.repo, &building, f.c1);
        let gc = {
            let pool = pool.clone();
            std::thread::spawn(move || pool.gc_scratch(false))
        };
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(branch_tip(&f.repo, &building), f.c1, "deleted mid-build");
        assert!(!gc.is_finished(), "gc did not wait for the build");
        // The build ends: it drops its branch, then the lock.
        git(
            &f.repo,
            &["update-ref", "-d", &format!("refs/heads/{building}")],
        );
        drop(registry);
        assert!(gc.join().expect("gc thread").expect("gc").is_empty());
    }

    #[test]
    fn index_flags_one_lease_set_hide_nothing_from_the_next_leases_capture() {
        // An agent marks a.txt assume-unchanged and skip-worktree... on another file; the next
        // lease of the slot edits both, and its capture must record the edits.
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let first = pool.acquire(f.c1, "mvk/flags-1").expect("acquire");
        git(
            &first.path,
            &["update-index", "--assume-unchanged", "a.txt"],
        );
        git(
            &first.path,
            &["update-index", "--skip-worktree", "src/lib.rs"],
        );
        let slot = first.slot();
        drop(first);
        wait_free(&pool, slot);
        let second = pool.acquire(f.c1, "mvk/flags-2").expect("acquire");
        assert_eq!(second.slot(), slot, "the same slot again");
        fs::write(second.path.join("a.txt"), "edited\n").expect("write");
        fs::write(second.path.join("src/lib.rs"), "edited too\n").expect("write");
        let id = capture(&second, "attempt").expect("capture");
        let shown = |file: &str| git(&f.repo, &["show", &format!("{id}:{file}")]);
        assert_eq!(shown("a.txt"), "edited\n");
        assert_eq!(shown("src/lib.rs"), "edited too\n");
    }

    #[test]
    fn a_locked_registration_or_a_half_written_one_does_not_keep_a_slot_from_being_rebuilt() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let worktrees = f.repo.join(".git/worktrees");
        let names = || -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(&worktrees)
                .expect("list")
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        let lease = pool.acquire(f.c1, "mvk/lock-1").expect("acquire");
        let (path, slot, admin) = (lease.path.clone(), lease.slot(), lease.admin.clone());
        let made = names();
        // The agent locks its registration (git refuses to prune a locked worktree) and breaks
        // the slot beyond a reset: the rebuild must still drop the old registration.
        fs::write(admin.join("locked"), "mine").expect("lock");
        fs::remove_file(path.join(".git")).expect("break");
        drop(lease);
        wait_free(&pool, slot);
        let again = pool.acquire(f.c1, "mvk/lock-2").expect("rebuilt");
        assert_eq!(files(&again.path), tree_files(&f.repo, f.c1));
        assert_eq!(names(), made, "the same name, no second registration");
        // A crash in the middle of writing a registration (no `gitdir` yet) leaves a directory
        // git does not list; the next build of the slot takes the name back.
        let admin = again.admin.clone();
        drop(again);
        wait_free(&pool, slot);
        fs::remove_file(admin.join("gitdir")).expect("half-written");
        fs::remove_file(path.join(".git")).expect("break");
        let third = pool.acquire(f.c1, "mvk/lock-3").expect("rebuilt again");
        assert_eq!(files(&third.path), tree_files(&f.repo, f.c1));
        assert_eq!(names(), made, "the leftover went, its name reused");
    }

    #[test]
    fn gc_removes_a_slot_whose_agent_locked_its_registration() {
        let f = fixture();
        let pool = Pool::open(&f.repo, &f.root).expect("open pool");
        let lease = pool.acquire(f.c1, "mvk/locked").expect("acquire");
        let (path, slot) = (lease.path.clone(), lease.slot());
        fs::write(lease.admin.join("locked"), "mine").expect("lock");
        drop(lease);
        wait_free(&pool, slot);
        assert_eq!(pool.gc().expect("gc"), vec![path]);
        let list = git(&f.repo, &["worktree", "list", "--porcelain"]);
        assert_eq!(list.matches("worktree ").count(), 1, "{list}");
    }

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

    /// A directory outside the slot, `0o500` like its subdirectory `in`, holding a file.
    fn outside_dir(tmp: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let outside = tmp.join("outside");
        fs::create_dir_all(outside.join("in")).expect("mkdir");
        fs::write(outside.join("in/keep"), "keep").expect("write");
        for dir in [outside.join("in"), outside.clone()] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o500)).expect("chmod");
        }
        outside
    }

    /// Gives `outside_dir`'s permissions back, so that its temporary directory can go.
    fn give_back(outside: &Path) {
        use std::os::unix::fs::PermissionsExt;
        for dir in [outside.to_path_buf(), outside.join("in")] {
            let _ = fs::set_permissions(&dir, fs::Permissions::from_mode(0o700));
        }
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::symlink_metadata(path)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn making_a_slot_writable_chmods_nothing_through_a_symlink() {
        // Regression: the walk checked each entry (a directory, not a symlink), then chmod-ed
        // it by path: swapped for a symlink in between, by a process an agent left running,
        // it gave mvk's user write permission on any directory the symlink named. The walk's
        // root was followed when it was a symlink.
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = outside_dir(tmp.path());
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).expect("symlink");
        make_dirs_writable(&link);
        assert_eq!((mode(&outside), mode(&outside.join("in"))), (0o500, 0o500));
        // A subdirectory swapped for a symlink once listed, before it is opened.
        let slot = tmp.path().join("slot");
        fs::create_dir_all(slot.join("sub")).expect("mkdir");
        fs::set_permissions(slot.join("sub"), fs::Permissions::from_mode(0o500)).expect("chmod");
        let (sub, to) = (slot.join("sub"), outside.clone());
        untrusted::race::set(move |name| {
            if name == Path::new("sub") && fs::symlink_metadata(&sub).is_ok_and(|m| m.is_dir()) {
                fs::rename(&sub, sub.with_file_name("sub.aside")).expect("rename");
                std::os::unix::fs::symlink(&to, &sub).expect("symlink");
            }
        });
        make_dirs_writable(&slot);
        untrusted::race::clear();
        assert_eq!((mode(&outside), mode(&outside.join("in"))), (0o500, 0o500));
        // The directories that are the slot's own are made writable.
        assert_eq!(mode(&slot.join("sub.aside")) & 0o700, 0o500);
        make_dirs_writable(&slot);
        assert_eq!(mode(&slot.join("sub.aside")) & 0o700, 0o700);
        assert_eq!((mode(&outside), mode(&outside.join("in"))), (0o500, 0o500));
        give_back(&outside);
    }

    #[test]
    fn clearing_a_slot_leaves_what_its_symlinks_name_as_it_was() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = outside_dir(tmp.path());
        let slot = tmp.path().join("slot");
        fs::create_dir_all(slot.join("locked")).expect("mkdir");
        std::os::unix::fs::symlink(&outside, slot.join("link")).expect("symlink");
        std::os::unix::fs::symlink(&outside, slot.join("locked/link")).expect("symlink");
        fs::set_permissions(slot.join("locked"), fs::Permissions::from_mode(0o000)).expect("chmod");
        clear_slot_dir(&slot).expect("clear");
        assert!(fs::symlink_metadata(&slot).is_err(), "the slot is gone");
        assert_eq!((mode(&outside), mode(&outside.join("in"))), (0o500, 0o500));
        assert_eq!(
            fs::read_to_string(outside.join("in/keep")).expect("read"),
            "keep"
        );
        give_back(&outside);
    }
}
