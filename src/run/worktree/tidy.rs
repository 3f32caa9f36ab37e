//! A path an agent could have tampered with in; out, that path put right without following
//! anything planted there: a file replaced, directories made writable, a worktree emptied, a slot
//! removed or, when something in it cannot be, set aside.

use std::fs::{self, OpenOptions};
use std::io;
use std::path::Path;

use crate::run::exec::untrusted::{self, unguessable};

use super::{WorktreeError, io_err};

/// Puts `bytes` at `file` without following whatever is there (a symlink, a directory): the
/// new content is written beside it, under a name no one can guess, and renamed over it. The
/// directory is made writable first: an agent may have taken its own git directory's write
/// permission away.
pub(super) fn replace_file(file: &Path, bytes: &[u8]) -> Result<(), WorktreeError> {
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
pub(super) fn clear_slot_dir(path: &Path) -> Result<(), WorktreeError> {
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
pub(super) fn make_dirs_writable(dir: &Path) {
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

/// Removes everything in the worktree at `path` but its `.git` link, through descriptors
/// (nothing is followed), its directories made writable first.
pub(super) fn empty_but_git(path: &Path) -> Result<(), WorktreeError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

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
