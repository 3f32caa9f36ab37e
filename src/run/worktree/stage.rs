//! A worktree and mvk's own copy of its index in; out, that index with every change the agent
//! made staged (what `git add -A` stages), and the worktree rid of what the index does not
//! list (ignored files, special files, directories left empty): in one walk, what `add_all`
//! and the gates' clean-in-place sweep did in two. `false` whenever only those can do it.
//!
//! Change is told by stat data, as git tells it: size, inode, change and modification times,
//! type and executable bit, with the racily clean rule (see [`super::sweep`]). An agent that
//! edits a file and puts its modification time back still changes its change time; one that
//! only flips the executable bit changes the mode; a file replaced by a symlink changes type.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use git2::{Index, IndexEntry, ObjectType, Odb, Oid, Repository};
use rustc_hash::{FxHashMap, FxHashSet};
use rustix::fs::{AtFlags, FileType, Mode, Stat};

use crate::run::exec::untrusted;

use super::sweep::{Dir, Judged, is_attributes, judged, unchanged, walk_parallel, walkers};
use super::{WorktreeError, git_err};

/// Stages in INDEX (the slot's, as mvk last wrote it) what the worktree at PATH holds, and
/// removes from the worktree what is not to be staged. True when the index now lists exactly
/// the worktree's files, with their stat data; false when the caller must stage with
/// libgit2's `add_all` and sweep the worktree on its own (a configuration that changes what
/// a file's blob or mode is, a nested repository, a special file at a tracked path, anything
/// that cannot be read or removed). Whatever was staged or removed before that is right as
/// far as it went.
pub(super) fn stage_in_place(
    repo: &Repository,
    common: &Path,
    path: &Path,
    index: &mut Index,
) -> Result<bool, WorktreeError> {
    let config = repo
        .config()
        .and_then(|mut c| c.snapshot())
        .map_err(git_err("read configuration", path))?;
    // Settings under which git stages a file otherwise than its bytes and mode say.
    if config.get_bool("core.filemode").ok() == Some(false)
        || config.get_bool("core.ignorecase").ok() == Some(true)
    {
        return Ok(false);
    }
    let Some(Judged {
        tracked,
        dirs,
        stamp,
    }) = judged(repo, common, path, index)?
    else {
        return Ok(false);
    };
    let Ok(Some(top)) = untrusted::open_dir_at(rustix::fs::CWD, path) else {
        return Ok(false);
    };
    let ctx = Walk {
        dirs: &dirs,
        tracked: &tracked,
        stamp,
    };
    let error: Mutex<Option<git2::Error>> = Mutex::new(None);
    let keep = |e: git2::Error| {
        if let Ok(mut slot) = error.lock() {
            slot.get_or_insert(e);
        }
        false
    };
    // Each thread its own repository: libgit2's are not shared between threads.
    let states = walk_parallel(
        top,
        walkers(tracked.len()),
        || {
            Repository::open(path).ok().map(|repo| Worker {
                repo,
                staged: Vec::new(),
                seen: Vec::new(),
                remove: Vec::new(),
            })
        },
        |worker, dir, rel, subdirs| match ctx.dir(worker, dir, rel, Some(subdirs), 0) {
            Ok(Some(_)) => true,
            Ok(None) => false,
            Err(e) => keep(e),
        },
    );
    if let Some(e) = error.lock().ok().and_then(|mut slot| slot.take()) {
        return Err(git_err("stage the agent's work", path)(e));
    }
    let Some(states) = states else {
        return Ok(false);
    };
    let mut seen: Vec<&[u8]> = Vec::with_capacity(tracked.len());
    let mut staged = Vec::new();
    let mut remove = Vec::new();
    for w in states {
        seen.extend(w.seen);
        staged.extend(w.staged);
        remove.extend(w.remove);
    }
    // Every file judged: what is not to be staged goes now.
    if !remove_all(path, remove) {
        return Ok(false);
    }
    if seen.len() != tracked.len() {
        let seen: FxHashSet<&[u8]> = seen.into_iter().collect();
        let gone: Vec<&Vec<u8>> = tracked
            .keys()
            .filter(|k| !seen.contains(k.as_slice()))
            .collect();
        // Tracked files never seen are gone; removed before anything is added, so that a file
        // that became a directory (or the reverse) never meets its old self in the index.
        for g in &gone {
            index
                .remove_path(Path::new(std::ffi::OsStr::from_bytes(g)))
                .map_err(git_err("stage a removal", path))?;
        }
        // A directory whose tracked files are all gone, holding nothing else now, is not in a
        // checkout of the commit either.
        if !remove_emptied(path, &gone) {
            return Ok(false);
        }
    }
    for entry in staged {
        // A path libgit2 refuses (one git would not check out): left to `add_all`, which
        // skips or refuses it as it always has.
        if index.add(&entry).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes, deepest first, each directory above the GONE paths that is empty now, through
/// descriptors (never a link). False when the worktree cannot be opened.
fn remove_emptied(path: &Path, gone: &[&Vec<u8>]) -> bool {
    let mut above: Vec<&[u8]> = Vec::new();
    for g in gone {
        let mut end = g.len();
        while let Some(up) = g[..end].iter().rposition(|&b| b == b'/') {
            above.push(&g[..up]);
            end = up;
        }
    }
    // Deepest first, each once: a parent may be empty only once its children are gone.
    above.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    above.dedup();
    let Ok(Some(top)) = untrusted::open_dir_at(rustix::fs::CWD, path) else {
        return false;
    };
    for dir in above {
        let (parent, name) = match dir.iter().rposition(|&b| b == b'/') {
            Some(i) => (&dir[..i], &dir[i + 1..]),
            None => (&dir[..0], dir),
        };
        // A parent gone (or swapped for a link) leaves nothing to remove under it.
        if let Some(at) = open_below(&top, parent) {
            let from: &OwnedFd = at.as_ref().unwrap_or(&top);
            // Not empty (or not there): left as it is.
            let _ = rustix::fs::unlinkat(
                from,
                Path::new(std::ffi::OsStr::from_bytes(name)),
                AtFlags::REMOVEDIR,
            );
        }
    }
    true
}

/// What every thread of one walk knows of the index.
struct Walk<'a> {
    /// The directories that hold tracked files.
    dirs: &'a FxHashSet<Vec<u8>>,
    /// Every tracked file.
    tracked: &'a FxHashMap<Vec<u8>, IndexEntry>,
    /// The index file's modification time: entries not older are racily clean.
    stamp: (i64, i64),
}

/// One thread's repository, what it staged and the tracked files it saw.
struct Worker<'a> {
    repo: Repository,
    /// New entries for files added or changed, their blobs written.
    staged: Vec<IndexEntry>,
    /// The tracked paths seen (the index's own keys).
    seen: Vec<&'a [u8]>,
    /// What the walk found to remove: ignored files and directories, special files,
    /// directories of which nothing stays, `.git` in another case.
    remove: Vec<Vec<u8>>,
}

/// How deep an untracked directory is walked (it is walked by recursion, to know whether
/// anything of it stays); a deeper one is left to libgit2, whose walk keeps its stack on the
/// heap, and to the sweep's removal, which goes any depth.
const UNTRACKED_DEPTH: usize = 128;

impl<'a> Walk<'a> {
    /// The directory open at DIR, REL in the worktree: `None` when the walk cannot go on;
    /// `Some(kept)`, whether anything stays in it. Tracked subdirectories go to SUBDIRS, for
    /// any thread to walk; an untracked one is walked here, DEPTH levels under a tracked one
    /// (to remove it whole when nothing of it stays), and has no tracked directory under it.
    /// Nothing is removed during the walk, only noted: a `.gitignore` that ignores itself
    /// (`*`, as pytest's and mypy's caches write) must still be there when its siblings are
    /// judged, here or on another thread.
    fn dir(
        &self,
        w: &mut Worker<'a>,
        dir: &OwnedFd,
        rel: &[u8],
        mut subdirs: Option<&mut Vec<Dir>>,
        depth: usize,
    ) -> Result<Option<bool>, git2::Error> {
        if depth > UNTRACKED_DEPTH {
            return Ok(None);
        }
        let Ok(listing) = untrusted::list(dir) else {
            return Ok(None);
        };
        let names: Vec<std::ffi::OsString> = listing.map(|(name, _)| name).collect();
        let mut kept = false;
        for name in names {
            let mut child = rel.to_vec();
            if !child.is_empty() {
                child.push(b'/');
            }
            child.extend_from_slice(name.as_bytes());
            if name.as_bytes().eq_ignore_ascii_case(b".git") {
                if name != ".git" {
                    // libgit2 never stages a `.GIT` (its walk skips `.git` in any case), and
                    // a checkout of the commit has none.
                    w.remove.push(child);
                    continue;
                }
                if rel.is_empty() {
                    continue;
                }
                // A repository inside the worktree: `add_all` records it as a submodule.
                return Ok(None);
            }
            let name = Path::new(&name);
            let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                return Ok(None);
            };
            let kind = FileType::from_raw_mode(stat.st_mode);
            if kind == FileType::Directory {
                let known = self.dirs.contains(&child);
                if !known && ignored(&w.repo, &child, true)? {
                    w.remove.push(child);
                    continue;
                }
                if known && let Some(queue) = subdirs.as_deref_mut() {
                    queue.push((name.as_os_str().to_os_string(), child));
                    kept = true;
                    continue;
                }
                // Opened once, without following: one swapped for a symlink since is refused.
                let Ok(Some(sub)) = untrusted::open_dir_at(dir, name) else {
                    return Ok(None);
                };
                match self.dir(w, &sub, &child, None, depth + 1)? {
                    None => return Ok(None),
                    Some(true) => kept = true,
                    // Nothing of it stays (it was empty, or held only what is removed): a
                    // checkout of the commit would not have it.
                    Some(false) => w.remove.push(child),
                }
                continue;
            }
            let is_file = matches!(kind, FileType::RegularFile | FileType::Symlink);
            match self.tracked.get_key_value(&child) {
                Some((key, e)) => {
                    w.seen.push(key.as_slice());
                    if unchanged(e, &stat, self.stamp) {
                        kept = true;
                    } else if is_file {
                        if !stage(w, dir, name, child)? {
                            return Ok(None);
                        }
                        kept = true;
                    } else {
                        // A FIFO, socket or device where a tracked file was: left to `add_all`.
                        return Ok(None);
                    }
                }
                // A FIFO, socket or device: never staged, and not in a checkout.
                None if !is_file => w.remove.push(child),
                // A new attributes file changes how every file below it is staged, which only
                // libgit2 reckons with.
                None if is_attributes(&child) => return Ok(None),
                None => {
                    if ignored(&w.repo, &child, false)? {
                        w.remove.push(child);
                        continue;
                    }
                    if !stage(w, dir, name, child)? {
                        return Ok(None);
                    }
                    kept = true;
                }
            }
        }
        Ok(Some(kept))
    }
}

/// Removes the PATHS of the worktree at PATH (each whole, through descriptors; one under a path
/// removed already is gone with it). False when one cannot be removed.
fn remove_all(path: &Path, mut paths: Vec<Vec<u8>>) -> bool {
    if paths.is_empty() {
        return true;
    }
    paths.sort();
    let Ok(Some(top)) = untrusted::open_dir_at(rustix::fs::CWD, path) else {
        return false;
    };
    let mut last: Option<Vec<u8>> = None;
    for p in paths {
        if let Some(l) = &last
            && p.starts_with(l)
            && p.get(l.len()) == Some(&b'/')
        {
            continue;
        }
        let (parent, name) = match p.iter().rposition(|&b| b == b'/') {
            Some(i) => (&p[..i], &p[i + 1..]),
            None => (&p[..0], &p[..]),
        };
        let Some(at) = open_below(&top, parent) else {
            return false;
        };
        let from: &OwnedFd = at.as_ref().unwrap_or(&top);
        match untrusted::remove_at(from, Path::new(std::ffi::OsStr::from_bytes(name))) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => return false,
        }
        last = Some(p);
    }
    true
}

/// The directory REL under TOP, opened one component at a time without following a link:
/// `Some(None)` for TOP itself, `None` when it cannot be opened.
fn open_below(top: &OwnedFd, rel: &[u8]) -> Option<Option<OwnedFd>> {
    let mut at: Option<OwnedFd> = None;
    for part in rel.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        let from: &OwnedFd = at.as_ref().unwrap_or(top);
        match untrusted::open_dir_at(from, Path::new(std::ffi::OsStr::from_bytes(part))) {
            Ok(Some(fd)) => at = Some(fd),
            _ => return None,
        }
    }
    Some(at)
}

/// Whether git's ignore rules (every `.gitignore`, `info/exclude`, `core.excludesFile`)
/// ignore the untracked PATH.
fn ignored(repo: &Repository, path: &[u8], dir: bool) -> Result<bool, git2::Error> {
    let mut p = path.to_vec();
    // libgit2 tells a directory by the trailing slash (a pattern `build/` matches only one).
    if dir {
        p.push(b'/');
    }
    repo.is_path_ignored(Path::new(std::ffi::OsStr::from_bytes(&p)))
}

/// Writes the blob of NAME in DIR (a regular file, read through a descriptor; or a symlink,
/// its target) and queues its entry at PATH with the stat data of what was read. False
/// when it is neither any more, or it changed while it was read.
fn stage(
    w: &mut Worker<'_>,
    dir: &OwnedFd,
    name: &Path,
    path: Vec<u8>,
) -> Result<bool, git2::Error> {
    let odb = w.repo.odb()?;
    let (id, stat) = match untrusted::open_at(dir, name) {
        Ok(untrusted::Found::Regular(file, _)) => {
            let Ok(stat) = rustix::fs::fstat(&file) else {
                return Ok(false);
            };
            let size = u64::try_from(stat.st_size).unwrap_or(0);
            let Some(id) = write_blob(&odb, file, size)? else {
                return Ok(false);
            };
            (id, stat)
        }
        Ok(untrusted::Found::Symlink(target)) => {
            let id = odb.write(ObjectType::Blob, target.as_os_str().as_bytes())?;
            let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
                return Ok(false);
            };
            if FileType::from_raw_mode(stat.st_mode) != FileType::Symlink {
                return Ok(false);
            }
            (id, stat)
        }
        _ => return Ok(false),
    };
    w.staged.push(entry(path, id, &stat));
    Ok(true)
}

/// The blob of the SIZE bytes FILE holds, streamed into the object database (a file of
/// gigabytes is never held in memory); `None` when it does not hold SIZE bytes.
fn write_blob(odb: &Odb<'_>, file: std::fs::File, size: u64) -> Result<Option<Oid>, git2::Error> {
    let Ok(len) = usize::try_from(size) else {
        return Ok(None);
    };
    let mut writer = odb.writer(len, ObjectType::Blob)?;
    let mut read = file.take(size);
    let copied = io::copy(&mut read, &mut writer);
    if copied.ok() != Some(size) || read.into_inner().read(&mut [0u8; 1]).ok() != Some(0) {
        return Ok(None);
    }
    writer
        .flush()
        .map_err(|e| git2::Error::from_str(&e.to_string()))?;
    writer.finalize().map(Some)
}

/// The index entry of the file statted as STAT at PATH, holding blob ID.
pub(super) fn entry(path: Vec<u8>, id: Oid, stat: &Stat) -> IndexEntry {
    // Git keeps 32 bits of each: the low ones, as `same_stat` compares them.
    let low = |v: u64| (v & 0xffff_ffff) as u32;
    let time = |s: i64, n: u32| git2::IndexTime::new(s as i32, n);
    let mode = if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
        0o120000
    } else if Mode::from_raw_mode(stat.st_mode).contains(Mode::XUSR) {
        0o100755
    } else {
        0o100644
    };
    IndexEntry {
        ctime: time(
            stat.st_ctime,
            u32::try_from(stat.st_ctime_nsec).unwrap_or(0),
        ),
        mtime: time(
            stat.st_mtime,
            u32::try_from(stat.st_mtime_nsec).unwrap_or(0),
        ),
        dev: low(stat.st_dev),
        ino: low(stat.st_ino),
        mode,
        uid: stat.st_uid,
        gid: stat.st_gid,
        file_size: low(stat.st_size as u64),
        id,
        flags: 0,
        flags_extended: 0,
        path,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::worktree::sweep::same_stat;

    #[test]
    fn an_entry_carries_the_stat_data_same_stat_compares() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").expect("write");
        let stat = rustix::fs::stat(&file).expect("stat");
        let e = entry(b"f".to_vec(), Oid::ZERO_SHA1, &stat);
        assert!(same_stat(&e, &stat));
        assert_eq!(e.mode, 0o100644);
    }
}
