//! mvk's own copy of a slot's index: the index mvk just wrote in (after a reset, a capture);
//! out, that same index put back in the worktree's git directory before mvk next trusts its stat
//! data, whatever the agent left in its place.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use crate::run::exec::untrusted::{self, unguessable};

use super::{WorktreeError, io_err};

/// Where mvk keeps its own copy of a slot's index (`slot-N.index` beside the slot, under the
/// pool's root, which no sandbox grants): written right after mvk wrote the index (a reset, a
/// capture), put back in place before mvk next trusts the index's stat data. An agent can
/// write its worktree's index, and an entry holding one blob's id with another file's stat
/// data would make the capture, the gates' clean-in-place check and the next reset take that
/// file for the blob. Stat data mvk recorded cannot be forged that way: a changed file's
/// ctime or inode changes with it.
#[derive(Debug, Clone)]
pub(super) struct Trusted(pub(super) PathBuf);

impl Trusted {
    /// Copies the index in ADMIN (a worktree's git directory) here, its modification time
    /// kept: libgit2 and [`sweep`] tell racily clean entries by comparing with it.
    pub(super) fn keep(&self, admin: &Path) -> Result<(), WorktreeError> {
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
    pub(super) fn restore(&self, admin: &Path) -> Result<bool, WorktreeError> {
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
    pub(super) fn forget(&self) -> Result<(), WorktreeError> {
        match fs::remove_file(&self.0) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", &self.0)(e)),
            _ => Ok(()),
        }
    }
}
