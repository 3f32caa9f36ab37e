//! The repository's worktree registry: a new slot's registration in, written by hand as
//! `git worktree add --no-checkout --detach` writes it; every registration out, `(name, path)`,
//! read without libgit2 (bounded, never blocking on what a neighbour's agent left there).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use git2::{Oid, Repository};

use crate::run::exec::untrusted;

use super::{LINK_MAX, WorktreeError, canonical, io_err};

/// Writes the registration of a linked worktree at `path` whose git directory is `admin`
/// (which must not exist yet) in the repository whose common git directory is `common`
/// (canonical), HEAD detached at `base`, no index, no files checked out.
pub(super) fn register(
    common: &Path,
    admin: &Path,
    path: &Path,
    base: Oid,
) -> Result<(), WorktreeError> {
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
pub(super) fn link_files(path: &Path, admin: &Path) -> [PathBuf; 3] {
    [
        path.join(".git"),
        admin.join("gitdir"),
        admin.join("commondir"),
    ]
}

/// `(name, path)` of every worktree registered with the repository.
pub(super) fn registrations(main: &Repository) -> Result<Vec<(String, PathBuf)>, WorktreeError> {
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
