//! The pools home (`$MVK_WORKTREE_ROOT`, else the user's cache) in; out, each pool in it with
//! the repository it belongs to and whether that repository is still there, the size of those
//! whose repository is gone, and their removal (`mvk gc --all`; `mvk doctor` counts them).
//!
//! A pool is `<home>/<tag>`, `<tag>` the first 16 hex digits of the blake3 hash of its
//! repository's canonical path (see [`Pool::default_root`]). [`Pool::open`] records that path
//! in the pool's [`RECORD`] file; a pool an earlier mvk made has none, and its repository is
//! read from its slots' `.git` links. Either way a path counts only if it hashes to the pool's
//! tag, so neither a record nor a link an agent rewrote can name another repository; a pool
//! whose repository cannot be told is kept.
//!
//! A pool is an orphan when no repository stands at its path any more (the path is gone, holds
//! no repository, or leads elsewhere through a link): no run can use it again, since a run in a
//! repository at that path would hash to the same pool and find it. It is removed only with its
//! registry lock and every slot's lock held, its repository looked for again under them: a slot
//! a live process leases keeps the whole pool.

use std::fs::{self, File, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use super::pool::{Pool, parse_slot_name, tag_of};
use super::tidy::make_dirs_writable;
use super::{LINK_MAX, WorktreeError, io_err};
use crate::run::exec::untrusted;

/// The file in a pool that names its repository's canonical path.
pub(crate) const RECORD: &str = "repository";

/// Who a pool belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A repository stands at this path.
    Present(PathBuf),
    /// No repository stands at this path any more: the pool is an orphan.
    Gone(PathBuf),
    /// Neither a record nor a slot names a path that hashes to the pool's tag, or mvk cannot
    /// tell whether a repository stands at the path named (see `repository_at`).
    Unknown,
}

/// One pool under the home.
#[derive(Debug, Clone)]
pub(crate) struct PoolDir {
    pub(crate) path: PathBuf,
    pub(crate) owner: Owner,
    /// What its files take, counted for orphans only (a live pool is not walked).
    pub(crate) bytes: u64,
}

/// What became of an orphan pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    Removed,
    /// A live process holds its registry or one of its slots.
    InUse,
    /// A repository stands at its path again (or mvk can no longer tell that none does).
    Returned,
}

/// Every pool under `home`, sorted by path; none when `home` does not exist.
pub(crate) fn survey(home: &Path) -> Result<Vec<PoolDir>, WorktreeError> {
    let entries = match fs::read_dir(home) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list worktree pools", home)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("list worktree pools", home))?;
        let Some(tag) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // Only what mvk names a pool, and never through a link.
        let is_tag = tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_tag || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        let owner = owner_of(&path, &tag);
        let bytes = match owner {
            Owner::Gone(_) => size(&path),
            _ => 0,
        };
        out.push(PoolDir { path, owner, bytes });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Removes an orphan pool, under its registry lock and every slot's lock, after looking for its
/// repository again.
pub(crate) fn remove(pool: &PoolDir) -> Result<Removal, WorktreeError> {
    let Owner::Gone(repo) = &pool.owner else {
        return Ok(Removal::Returned);
    };
    let mut held: Vec<File> = Vec::new();
    let mut locks = vec![pool.path.join("registry.lock")];
    let entries = fs::read_dir(&pool.path).map_err(io_err("list worktree pool", &pool.path))?;
    for entry in entries.flatten() {
        if let Some(name) = entry.file_name().to_str()
            && parse_slot_name(name, ".lock").is_some()
        {
            locks.push(entry.path());
        }
    }
    for path in locks {
        // Opened without creating: a lock file that is not there is held by no one.
        let file = match untrusted::open(&path).map_err(io_err("open lock file", &path))? {
            untrusted::Found::Regular(file, _) => file,
            _ => continue,
        };
        match file.try_lock() {
            Ok(()) => held.push(file),
            Err(TryLockError::WouldBlock) => return Ok(Removal::InUse),
            Err(TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
        }
    }
    if repository_at(repo) != Some(false) {
        return Ok(Removal::Returned);
    }
    make_dirs_writable(&pool.path);
    fs::remove_dir_all(&pool.path).map_err(io_err("remove worktree pool", &pool.path))?;
    drop(held);
    Ok(Removal::Removed)
}

/// The pool's repository, from its record or its slots, judged present or gone.
fn owner_of(pool: &Path, tag: &str) -> Owner {
    let named = recorded(pool, tag).or_else(|| from_slots(pool, tag));
    match named.map(|repo| (repository_at(&repo), repo)) {
        Some((Some(true), repo)) => Owner::Present(repo),
        Some((Some(false), repo)) => Owner::Gone(repo),
        Some((None, _)) | None => Owner::Unknown,
    }
}

/// The path the pool's record names, if it hashes to the pool's tag.
fn recorded(pool: &Path, tag: &str) -> Option<PathBuf> {
    let bytes = untrusted::read(&pool.join(RECORD), LINK_MAX).ok()??;
    let text = String::from_utf8(bytes).ok()?;
    let path = PathBuf::from(text.trim_end_matches('\n'));
    (tag_of(&path) == tag).then_some(path)
}

/// The repository a slot's `.git` link leads to (`gitdir: <git dir>/worktrees/<name>`), its
/// working directory or its git directory, whichever hashes to the pool's tag.
fn from_slots(pool: &Path, tag: &str) -> Option<PathBuf> {
    let entries = fs::read_dir(pool).ok()?;
    entries.flatten().find_map(|entry| {
        let name = entry.file_name();
        parse_slot_name(name.to_str()?, "")?;
        let bytes = untrusted::read(&entry.path().join(".git"), LINK_MAX).ok()??;
        let text = String::from_utf8(bytes).ok()?;
        let admin = PathBuf::from(text.strip_prefix("gitdir: ")?.trim_end());
        let git_dir = admin.parent()?.parent()?;
        [git_dir.parent(), Some(git_dir)]
            .into_iter()
            .flatten()
            .find(|p| tag_of(p) == tag)
            .map(Path::to_path_buf)
    })
}

/// Whether a repository stands at `path` itself (it opens as one, and the path leads nowhere
/// else): `Some(false)` only when it surely does not (the path is not there, leads elsewhere
/// through a link, or is a directory git finds no repository in); `None` when mvk cannot tell
/// (a directory it may not read, a mount not there just now, a repository libgit2 refuses to
/// open: its owner, an extension it does not know), and the pool is kept.
fn repository_at(path: &Path) -> Option<bool> {
    match fs::canonicalize(path) {
        Ok(c) if c != path => return Some(false),
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Some(false),
        Err(_) => return None,
    }
    match git2::Repository::open(path) {
        Ok(_) => Some(true),
        Err(e) if e.code() == git2::ErrorCode::NotFound => Some(false),
        Err(_) => None,
    }
}

/// The bytes of every file under `dir`, links not followed.
fn size(dir: &Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
        .sum()
}

impl Pool {
    /// Where every pool lives: `$MVK_WORKTREE_ROOT`, else `$XDG_CACHE_HOME/mvk/worktrees` or
    /// `~/.cache/mvk/worktrees`.
    pub(crate) fn home() -> PathBuf {
        super::pool::home_from(
            std::env::var_os(crate::env::MVK_WORKTREE_ROOT),
            std::env::var_os(crate::env::XDG_CACHE_HOME),
            std::env::var_os(crate::env::HOME),
        )
    }
}
