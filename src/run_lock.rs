//! A program's name and the repository's `.mvk/` in; an exclusive lock out, held while a run of
//! that program goes on, so a second `mvk apply` or `mvk resume` of it refuses at once, naming
//! the holder (or waits for it with `--wait`).
//!
//! The lock is an advisory file lock (`flock`) on `.mvk/locks/<program>.lock`: the kernel drops
//! it when its holder dies however it dies, so a lock is never left stale. The file's text says
//! who holds it (run, pid, host, since, command) for the refusal message and for `mvk status`.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How long `acquire` keeps trying before it reports the holder: long enough to ride out a
/// reader that probes the lock for a moment (`mvk status`).
const SETTLE: Duration = Duration::from_millis(500);
const POLL: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    #[error("cannot {action} the run lock `{}`", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is already being run by {holder}", what)]
    Held {
        what: String,
        holder: Box<Holder>,
        path: PathBuf,
    },
}

/// Who holds a lock, as its file says.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) run: String,
    pub(crate) pid: u32,
    pub(crate) host: String,
    /// RFC 3339.
    pub(crate) since: String,
    /// `apply` or `resume`.
    pub(crate) command: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.run.is_empty() {
            return f.write_str("another mvk process (it has not said which)");
        }
        write!(
            f,
            "run `{}` (`mvk {}`, process {} on {}, since {})",
            self.run, self.command, self.pid, self.host, self.since
        )
    }
}

/// A held lock; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct RunLock {
    file: File,
}

/// The lock file of `program` under `mvk_dir`.
pub(crate) fn path(mvk_dir: &Path, program: &str) -> PathBuf {
    mvk_dir
        .join("locks")
        .join(format!("{}.lock", crate::slug::slug(program)))
}

fn open(path: &Path) -> Result<File, LockError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| LockError::Io {
            action: "create the directory of",
            path: path.to_path_buf(),
            source,
        })?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|source| LockError::Io {
            action: "open",
            path: path.to_path_buf(),
            source,
        })
}

/// Reads who holds the lock at `path` (empty when the file says nothing readable).
pub(crate) fn holder(path: &Path) -> Holder {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Whether someone holds the lock at `path` right now. Probes with a shared lock, which an
/// exclusive holder refuses, and lets go at once.
pub(crate) fn is_held(path: &Path) -> Result<bool, LockError> {
    if !path.exists() {
        return Ok(false);
    }
    let file = open(path)?;
    match file.try_lock_shared() {
        Ok(()) => Ok(false),
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(source)) => Err(LockError::Io {
            action: "probe",
            path: path.to_path_buf(),
            source,
        }),
    }
}

impl RunLock {
    /// Takes the lock of `program` for `me`. Someone else holding it is [`LockError::Held`]
    /// (after a short grace, see [`SETTLE`]), unless `wait`, which waits as long as it takes.
    pub(crate) fn acquire(
        mvk_dir: &Path,
        program: &str,
        me: &Holder,
        wait: bool,
        mut waiting: impl FnMut(&Holder),
    ) -> Result<RunLock, LockError> {
        let path = path(mvk_dir, program);
        let mut file = open(&path)?;
        let started = Instant::now();
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let holder = holder(&path);
                    if wait {
                        if !told {
                            waiting(&holder);
                            told = true;
                        }
                    } else if started.elapsed() >= SETTLE {
                        return Err(LockError::Held {
                            what: format!("`{program}`"),
                            holder: Box::new(holder),
                            path,
                        });
                    }
                    std::thread::sleep(POLL);
                }
                Err(TryLockError::Error(source)) => {
                    return Err(LockError::Io {
                        action: "take",
                        path,
                        source,
                    });
                }
            }
        }
        let text = serde_json::to_string(me).unwrap_or_default();
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(text.as_bytes()))
            .and_then(|()| file.flush())
            .map_err(|source| LockError::Io {
                action: "write",
                path: path.clone(),
                source,
            })?;
        Ok(RunLock { file })
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Leave the file (another process may have it open to wait on); say no one holds it.
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me(run: &str) -> Holder {
        Holder {
            run: run.into(),
            pid: std::process::id(),
            host: "here".into(),
            since: "2026-12-03T00:00:00Z".into(),
            command: "apply".into(),
        }
    }

    #[test]
    fn a_second_taker_is_refused_with_the_holder_named_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::acquire(dir.path(), "fix", &me("r1"), false, |_| {}).unwrap();
        let lock_file = path(dir.path(), "fix");
        assert!(is_held(&lock_file).unwrap());
        let err = RunLock::acquire(dir.path(), "fix", &me("r2"), false, |_| {}).unwrap_err();
        match err {
            LockError::Held { holder, .. } => assert_eq!(*holder, me("r1")),
            other => panic!("expected Held, got {other:?}"),
        }
        // Another program's lock is independent.
        let _other = RunLock::acquire(dir.path(), "docs", &me("r3"), false, |_| {}).unwrap();
        drop(first);
        assert!(!is_held(&lock_file).unwrap());
        let _again = RunLock::acquire(dir.path(), "fix", &me("r2"), false, |_| {}).unwrap();
        assert_eq!(holder(&lock_file), me("r2"));
    }
}
