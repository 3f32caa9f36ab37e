//! A worktree and its index in; out, the worktree judged by stat data alone and put right in
//! place: swept to exactly its captured commit ([`clean_in_place`]), or reset to a new base by
//! writing only the files that differ ([`reset_in_place`]); `false` or `None` whenever only a
//! full checkout can do it.

use std::collections::BTreeSet;

use rustc_hash::{FxHashMap, FxHashSet};
use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use git2::{ErrorCode, Oid, Repository};

use crate::run::exec::untrusted;

use super::lease::Lease;
use super::{WorktreeError, git_err};

/// Makes LEASE's worktree a clean checkout of HEAD, its captured commit, in place: what the
/// gates need, without a second lease and a full checkout. True when done; false when the
/// worktree is not exactly what `capture` recorded (a file changed since, an index flag, a
/// submodule, a filter or line-ending setting a checkout would apply), and the caller takes a
/// fresh lease instead. Only reads directories and stats tracked files: after `capture` the
/// index holds every tracked file's stat data, so a file that still matches it is the blob
/// the commit names, and anything the index does not list (ignored build output, empty
/// directories) is removed.
pub(crate) fn clean_in_place(lease: &Lease, head: Oid) -> Result<bool, WorktreeError> {
    let path = &lease.path;
    let repo = match lease.open() {
        Ok(repo) => repo,
        Err(WorktreeError::Relinked { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    // The capture's own walk left it so, and nothing has run in it since.
    let swept = lease.swept.lock().ok().and_then(|mut at| at.take());
    if swept == Some(head) && repo.head().ok().and_then(|h| h.target()) == Some(head) {
        repo.cleanup_state()
            .map_err(git_err("clear merge or rebase state", path))?;
        return Ok(true);
    }
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
    // Read from disk by this first call (the repository was just opened), after the restore.
    let mut index = repo.index().map_err(git_err("open index", path))?;
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
pub(super) fn sweep(
    repo: &Repository,
    common: &Path,
    path: &Path,
    index: &git2::Index,
) -> Result<Option<Vec<Vec<u8>>>, WorktreeError> {
    let Some(Judged {
        tracked,
        dirs,
        stamp,
    }) = judged(repo, common, path, index)?
    else {
        return Ok(None);
    };
    // Walked through descriptors, never by a path looked up again: a process the agent left
    // running may swap a directory for a symlink to one outside the worktree after it was
    // seen, and mvk (unconfined) would delete what it found there.
    let Ok(Some(top)) = untrusted::open_dir_at(rustix::fs::CWD, path) else {
        return Ok(None);
    };
    let Some(found) = parallel_sweep(top, &dirs, &tracked, stamp) else {
        return Ok(None);
    };
    let mut dirty = found.dirty;
    if found.seen.len() != tracked.len() {
        // Some tracked file was never seen: missing from the worktree.
        let seen: FxHashSet<&[u8]> = found.seen.into_iter().collect();
        dirty.extend(
            tracked
                .keys()
                .filter(|k| !seen.contains(k.as_slice()))
                .cloned(),
        );
    }
    Ok(Some(dirty))
}

/// What [`parallel_sweep`] found: the tracked files that differ from their stat data, and the
/// tracked paths it saw (the index's own keys).
struct Found<'a> {
    dirty: Vec<Vec<u8>>,
    seen: Vec<&'a [u8]>,
}

/// A subdirectory to walk, by its name in the directory being walked, and where it stands in
/// the worktree. Opened only when a worker takes it: a directory of thousands of subdirectories
/// must not hold a descriptor for each while they wait.
pub(super) type Dir = (std::ffi::OsString, Vec<u8>);

/// A directory waiting to be walked: the top, or a name in an open parent.
enum Pending {
    Top(std::os::fd::OwnedFd),
    Under(
        std::sync::Arc<std::os::fd::OwnedFd>,
        std::ffi::OsString,
        Vec<u8>,
    ),
}

/// The directories still to walk, and how many workers are walking one now.
struct Queue {
    dirs: Vec<Pending>,
    busy: usize,
    failed: bool,
}

/// How many threads walk a worktree whose index lists FILES: as many as the machine has cores
/// (at most 4), one per 4,096 files. Stat-ing 20,000 files is most of a reset's and a capture's
/// time, and git spreads its own over threads too. Tests walk their small worktrees on every
/// thread there is, so that the work queue is what they exercise.
pub(super) fn walkers(files: usize) -> usize {
    #[cfg(not(test))]
    const PER_THREAD: usize = 4096;
    #[cfg(test)]
    const PER_THREAD: usize = 1;
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(4)
        .min(files / PER_THREAD)
        .max(1)
}

/// Walks TOP and the directories VISIT hands back, on THREADS threads, each with a state
/// INIT makes: VISIT judges one directory's entries and pushes the subdirectories to walk.
/// The states, or `None` when a VISIT (or an INIT) failed.
pub(super) fn walk_parallel<S: Send>(
    top: std::os::fd::OwnedFd,
    threads: usize,
    init: impl Fn() -> Option<S> + Sync,
    visit: impl Fn(&mut S, &std::os::fd::OwnedFd, &[u8], &mut Vec<Dir>) -> bool + Sync,
) -> Option<Vec<S>> {
    use std::sync::{Condvar, Mutex};
    // A test's race hook is this thread's: the walk stays on it.
    #[cfg(test)]
    let threads = if untrusted::race::is_set() {
        1
    } else {
        threads
    };
    let queue = Mutex::new(Queue {
        dirs: vec![Pending::Top(top)],
        busy: 0,
        failed: false,
    });
    let ready = Condvar::new();
    let fail = || {
        if let Ok(mut q) = queue.lock() {
            q.failed = true;
        }
        ready.notify_all();
    };
    let worker = || -> Option<S> {
        let Some(mut state) = init() else {
            fail();
            return None;
        };
        loop {
            let pending = {
                let mut q = queue.lock().ok()?;
                loop {
                    if q.failed {
                        return None;
                    }
                    if let Some(next) = q.dirs.pop() {
                        q.busy += 1;
                        break next;
                    }
                    if q.busy == 0 {
                        ready.notify_all();
                        return Some(state);
                    }
                    q = ready.wait(q).ok()?;
                }
            };
            let mut subdirs = Vec::new();
            // Opened without following: a directory swapped for a symlink since is refused.
            let opened = match pending {
                Pending::Top(fd) => Some((fd, Vec::new())),
                Pending::Under(parent, name, rel) => {
                    match untrusted::open_dir_at(&*parent, Path::new(&name)) {
                        Ok(Some(fd)) => Some((fd, rel)),
                        _ => None,
                    }
                }
            };
            let ok =
                opened.is_some_and(|(dir, rel)| {
                    // A worker that panicked would leave the others waiting for it for good.
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        visit(&mut state, &dir, &rel, &mut subdirs)
                    }))
                    .unwrap_or(false);
                    let parent = std::sync::Arc::new(dir);
                    let mut q = match queue.lock() {
                        Ok(q) => q,
                        Err(_) => return false,
                    };
                    q.dirs.extend(subdirs.drain(..).map(|(name, rel)| {
                        Pending::Under(std::sync::Arc::clone(&parent), name, rel)
                    }));
                    ok
                });
            let mut q = queue.lock().ok()?;
            q.busy -= 1;
            q.failed |= !ok;
            ready.notify_all();
        }
    };
    let results: Vec<Option<S>> = std::thread::scope(|scope| {
        let others: Vec<_> = (1..threads).map(|_| scope.spawn(worker)).collect();
        let mut all = vec![worker()];
        all.extend(others.into_iter().map(|h| h.join().ok().flatten()));
        all
    });
    results.into_iter().collect()
}

/// [`sweep_dir`] of TOP and every tracked directory under it, on [`walkers`] threads. `None`
/// when something cannot be judged.
fn parallel_sweep<'a>(
    top: std::os::fd::OwnedFd,
    dirs: &FxHashSet<Vec<u8>>,
    tracked: &'a FxHashMap<Vec<u8>, git2::IndexEntry>,
    stamp: (i64, i64),
) -> Option<Found<'a>> {
    let states = walk_parallel(
        top,
        walkers(tracked.len()),
        || {
            Some(Found {
                dirty: Vec::new(),
                seen: Vec::new(),
            })
        },
        |found, dir, rel, subdirs| {
            let mut seen = Seen {
                dirs,
                tracked,
                found,
                subdirs,
                stamp,
            };
            sweep_dir(dir, rel, &mut seen)
        },
    )?;
    let mut out = Found {
        dirty: Vec::new(),
        seen: Vec::new(),
    };
    for r in states {
        out.dirty.extend(r.dirty);
        out.seen.extend(r.seen);
    }
    Some(out)
}

/// What a walk that judges a worktree by stat data needs of its index.
pub(super) struct Judged {
    /// Every entry (its path moved out), by path. Hashed with FxHash: a walk looks up every
    /// file of the worktree, and SipHash's resistance to chosen keys buys nothing for paths of
    /// mvk's own index.
    pub(super) tracked: FxHashMap<Vec<u8>, git2::IndexEntry>,
    /// The directories that hold tracked files.
    pub(super) dirs: FxHashSet<Vec<u8>>,
    /// The index file's modification time: entries not older are racily clean.
    pub(super) stamp: (i64, i64),
}

/// The index of the worktree at PATH laid out for a walk, or `None` when the worktree is one
/// mvk does not judge by stat data alone (see [`sweep`]).
pub(super) fn judged(
    repo: &Repository,
    common: &Path,
    path: &Path,
    index: &git2::Index,
) -> Result<Option<Judged>, WorktreeError> {
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
    let mut tracked = FxHashMap::with_capacity_and_hasher(index.len(), Default::default());
    let mut dirs = FxHashSet::default();
    // The index is sorted: entries of one directory come together, and its ancestors are
    // recorded once, when the first of them is seen.
    let mut last_parent: Vec<u8> = Vec::new();
    for mut entry in index.iter() {
        let name = std::mem::take(&mut entry.path);
        if entry.flags & ASSUME_UNCHANGED != 0
            || entry.flags_extended & SKIP_WORKTREE != 0
            || entry.mode == 0o160000
            || is_attributes(&name)
        {
            return Ok(None);
        }
        if let Some(end) = name.iter().rposition(|&b| b == b'/')
            && name[..end] != last_parent[..]
        {
            let mut at = end;
            // An ancestor already recorded was recorded with all of its own.
            while dirs.insert(name[..at].to_vec()) {
                match name[..at].iter().rposition(|&b| b == b'/') {
                    Some(up) => at = up,
                    None => break,
                }
            }
            last_parent.clear();
            last_parent.extend_from_slice(&name[..end]);
        }
        tracked.insert(name, entry);
    }
    // A path both a file and a directory of others is no index git writes.
    if tracked.keys().any(|k| dirs.contains(k)) {
        return Ok(None);
    }
    Ok(Some(Judged {
        tracked,
        dirs,
        stamp,
    }))
}

/// Whether ENTRY still describes the file statted as STAT, and is older than the index file
/// (stamped STAMP) that recorded it: only then is the file known to be the blob it names.
pub(super) fn unchanged(
    entry: &git2::IndexEntry,
    stat: &rustix::fs::Stat,
    stamp: (i64, i64),
) -> bool {
    same_stat(entry, stat)
        && (
            i64::from(entry.mtime.seconds()),
            i64::from(entry.mtime.nanoseconds()),
        ) < stamp
}

/// What [`sweep_dir`] knows of the index, and what it found so far.
struct Seen<'s, 'a> {
    /// The directories that hold tracked files.
    dirs: &'s FxHashSet<Vec<u8>>,
    /// Every tracked file.
    tracked: &'a FxHashMap<Vec<u8>, git2::IndexEntry>,
    /// Tracked files that differ from their stat data, and those seen.
    found: &'s mut Found<'a>,
    /// Tracked directories found, for a worker to sweep (opened once, without following).
    subdirs: &'s mut Vec<Dir>,
    /// The index file's modification time: entries not older are racily clean.
    stamp: (i64, i64),
}

/// The files of the directory open at DIR, REL in the worktree: each tracked one judged by its
/// stat data, anything untracked removed, tracked subdirectories handed back for a worker.
/// False when it cannot be judged (something cannot be read or removed, or was swapped
/// meanwhile).
fn sweep_dir(dir: &std::os::fd::OwnedFd, rel: &[u8], seen: &mut Seen<'_, '_>) -> bool {
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
                seen.subdirs.push((name.as_os_str().to_os_string(), child));
            } else if untrusted::remove_at(dir, name).is_err() {
                return false;
            }
            continue;
        }
        match seen.tracked.get_key_value(&child) {
            Some((key, e)) => {
                seen.found.seen.push(key.as_slice());
                if !unchanged(e, &stat, seen.stamp) {
                    seen.found.dirty.push(child);
                }
            }
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
pub(super) fn is_attributes(path: &[u8]) -> bool {
    path == b".gitattributes" || path.ends_with(b"/.gitattributes")
}

/// The most files [`reset_in_place`] writes; more are left to a full checkout.
pub(super) const RESET_IN_PLACE_MAX: usize = 64;

/// Resets the slot's worktree to TREE without a full checkout: removes what the index does
/// not list, then writes only the files that differ (those the index's tree and TREE name
/// differently, and tracked files changed or missing on disk), and stages them in INDEX
/// after it has read TREE. False, with nothing promised about the worktree, when a full
/// checkout must do it (see [`sweep`]; also a file becoming a directory or the reverse, a
/// submodule or attributes file among the changes). INDEX is the slot's as just read from
/// disk, after mvk's copy was put back.
pub(super) fn reset_in_place(
    slot: &Repository,
    common: &Path,
    path: &Path,
    tree: &git2::Tree<'_>,
    index: &mut git2::Index,
) -> Result<bool, WorktreeError> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;

    let Some(dirty) = sweep(slot, common, path, index)? else {
        return Ok(false);
    };
    let mut changed: BTreeSet<Vec<u8>> = dirty.into_iter().collect();
    // The index's own tree (its tree cache makes that cheap: mvk wrote this index, and wrote
    // its tree) compared with TREE by subtree ids: only the directories that differ are read.
    let current = index
        .write_tree()
        .and_then(|id| slot.find_tree(id))
        .map_err(git_err("compare the index with the tree", path))?;
    let differ = crate::run::git::treediff::changed_paths(slot, &current, tree)
        .map_err(git_err("compare the index with the tree", path))?;
    changed.extend(differ);
    // Many files to write (a new slot, a base far ahead): libgit2's checkout does it in one
    // pass, where staging each file written here would cost more than its walk.
    if changed.len() > RESET_IN_PLACE_MAX {
        return Ok(false);
    }
    let mut written = Vec::new();
    let mut removed = Vec::new();
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
            Err(e) if e.code() == ErrorCode::NotFound => {
                remove_empty_parents(path, &full);
                removed.push(rel);
            }
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
        written.push((rel, full, id));
    }
    // Only the changed entries are rewritten: every other entry already names what TREE
    // names (the comparison above said so), with the stat data of its file. Reading TREE
    // whole would inflate every subtree of the repository to learn the same.
    for rel in removed {
        index
            .remove_path(Path::new(std::ffi::OsStr::from_bytes(&rel)))
            .map_err(git_err("reset index", path))?;
    }
    for (rel, full, id) in written {
        let Ok(stat) = rustix::fs::lstat(&full) else {
            return Ok(false);
        };
        index
            .add(&super::stage::entry(rel, id, &stat))
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
pub(super) fn same_stat(entry: &git2::IndexEntry, stat: &rustix::fs::Stat) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
