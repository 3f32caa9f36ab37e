//! An agent's object directory in (what it committed in its sandbox); out, those objects in the
//! repository's shared store, each read, re-hashed and written by mvk, sizes checked against
//! limits before anything is inflated, and the directory gone.

use std::io;
use std::path::{Path, PathBuf};

use super::confine::path_text;

/// The most mvk reads from an agent's object directory: one object (GitHub refuses files over
/// 100 MB too), all of them together, how many there are (each costs a read and a write), and
/// what reading them inflates. An object compresses a thousandfold or more (a zip bomb), so
/// sizes are read from the headers before anything is inflated.
pub(crate) const OBJECT_LIMITS: Limits = Limits {
    object: 100 << 20,
    total: 1 << 30,
    count: 100_000,
    // Reading a delta inflates its chain of bases again (libgit2 caches only bases under
    // 1 MiB, and not reliably): 200 versions of a 300 KB file in git's chains of 50 inflate
    // about 1.5 GB; 32 GiB is minutes of work at most.
    work: 32 << 30,
};

/// Bytes of inflated objects: per object, and all an attempt's together (each object once);
/// objects listed; bytes inflated to read them all (a delta's bases once per read).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) object: usize,
    pub(crate) total: usize,
    pub(crate) count: usize,
    pub(crate) work: u64,
}

/// Why an agent's objects were not added to the repository.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AbsorbError {
    /// The agent's fault: its attempt fails, the run goes on.
    #[error(
        "object {id} holds {size} bytes, more than the {limit} bytes mvk accepts from an agent"
    )]
    ObjectTooLarge {
        id: git2::Oid,
        size: usize,
        limit: usize,
    },
    #[error("the agent's objects hold more than the {limit} bytes mvk accepts from one attempt")]
    TooMuch { limit: usize },
    #[error("the agent wrote more than the {limit} objects mvk accepts from one attempt")]
    TooMany { limit: usize },
    #[error(
        "reading the agent's objects would inflate more than the {limit} bytes mvk inflates \
         for one attempt (a delta's bases count again at each read)"
    )]
    TooMuchWork { limit: u64 },
    /// A pack whose reading mvk cannot bound: its deltas' bases are counted too.
    #[error("the agent's pack {pack} {why}")]
    Pack { pack: String, why: String },
    /// The repository's (or mvk's) fault.
    #[error(transparent)]
    Git(#[from] git2::Error),
    /// mvk's fault: its copy of the agent's objects could not be written.
    #[error("cannot {action} `{path}`: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Copies what a sandboxed agent committed into the shared object store of the repository at
/// `repo`, from the attempt's own `objects` directory (loose objects and packs), then removes
/// that directory. Each object is read, hashed and written by mvk: one whose content does not
/// match its name is left out, and nothing already in the store is rewritten. Out comes how
/// many objects were added; nothing when there is no such directory. Sizes are checked against
/// [`OBJECT_LIMITS`] before any object is read whole; over them, nothing is added.
pub(crate) fn absorb_objects(repo: &Path, objects: &Path) -> Result<usize, AbsorbError> {
    absorb_objects_within(repo, objects, OBJECT_LIMITS)
}

/// [`absorb_objects`] with the given limits.
pub(crate) fn absorb_objects_within(
    repo: &Path,
    objects: &Path,
    limits: Limits,
) -> Result<usize, AbsorbError> {
    // The directory is mvk's (its parent is out of the agent's reach), but never follow one
    // that is not a directory itself.
    if !std::fs::symlink_metadata(objects).is_ok_and(|m| m.is_dir()) {
        return Ok(0);
    }
    // What mvk reads is a copy out of the agent's reach (its parent is mvk's): no file the
    // agent could not be stopped from keeping (an `alternates`, a multi-pack index) is seen,
    // no FIFO opened, and nothing the agent left running rewrites a pack after its check.
    let mut name = objects.file_name().unwrap_or_default().to_os_string();
    name.push(".checked");
    let checked = objects.with_file_name(name);
    let added = fresh_dir(&checked)
        .and_then(|()| super::agent_pack::copy_checked(objects, &checked, limits))
        .and_then(|()| absorb_checked(repo, &checked, limits));
    // Best effort: the directories are the attempt's own, and a leftover is only space (a
    // file the agent made immutable stays).
    let _ = std::fs::remove_dir_all(objects);
    let _ = std::fs::remove_dir_all(&checked);
    added
}

/// An empty directory at `dir`, only mvk's user's: a leftover of a crash is removed first.
fn fresh_dir(dir: &Path) -> Result<(), AbsorbError> {
    use std::os::unix::fs::DirBuilderExt;
    let failed = |action| {
        move |source| AbsorbError::Io {
            action,
            path: dir.to_path_buf(),
            source,
        }
    };
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(failed("remove")(e)),
        _ => {}
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(failed("create"))
}

fn absorb_checked(repo: &Path, objects: &Path, limits: Limits) -> Result<usize, AbsorbError> {
    let main = git2::Repository::open(repo)?;
    let shared = main.odb()?;
    let theirs = git2::Odb::new()?;
    theirs.add_disk_alternate(&path_text(objects))?;
    // A pack the agent made may hold deltas against objects of the shared store: read through
    // both (alternates are never written to).
    let again = git2::Repository::open(repo)?;
    let both = again.odb()?;
    both.add_disk_alternate(&path_text(objects))?;
    // A delta's header gives only what it makes, not the bases its read inflates.
    super::agent_pack::check(&objects.join("pack"), &shared, limits)?;
    let mut ids = Vec::new();
    // Stop listing past the limit: the list itself is mvk's memory.
    let listed = theirs.foreach(|id| {
        ids.push(*id);
        ids.len() <= limits.count
    });
    if ids.len() > limits.count {
        return Err(AbsorbError::TooMany {
            limit: limits.count,
        });
    }
    listed?;
    // Every size first, from the headers: nothing is inflated when the whole is too big.
    let mut new = Vec::new();
    let mut total = 0usize;
    for id in ids {
        if shared.exists(id) {
            continue;
        }
        let Ok((size, _)) = both.read_header(id) else {
            continue;
        };
        if size > limits.object {
            return Err(AbsorbError::ObjectTooLarge {
                id,
                size,
                limit: limits.object,
            });
        }
        total = total.saturating_add(size);
        if total > limits.total {
            return Err(AbsorbError::TooMuch {
                limit: limits.total,
            });
        }
        new.push(id);
    }
    let mut added = 0;
    for id in new {
        let Ok(object) = both.read(id) else {
            continue;
        };
        // The header may lie (a loose object's size field): what was inflated counts.
        if object.len() > limits.object {
            return Err(AbsorbError::ObjectTooLarge {
                id,
                size: object.len(),
                limit: limits.object,
            });
        }
        if git2::Oid::hash_object(object.kind(), object.data())? != id {
            continue;
        }
        shared.write(object.kind(), object.data())?;
        added += 1;
    }
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with one commit, and blobs of LENS bytes written by git into an object
    /// directory of their own, as a sandboxed agent's would be. Out: (tempdir, repo, objects).
    fn agent_objects(lens: &[usize]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        use crate::run::testing::git;
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        std::fs::write(repo.join("a"), "a").unwrap();
        git(&repo, &["add", "a"]);
        git(
            &repo,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "a",
            ],
        );
        let objects = tmp.path().join("agent.objects");
        std::fs::create_dir_all(objects.join("info")).unwrap();
        for (n, len) in lens.iter().enumerate() {
            let file = tmp.path().join(format!("blob{n}"));
            std::fs::write(&file, vec![b'0' + n as u8; *len]).unwrap();
            let out = std::process::Command::new("git")
                .args(["hash-object", "-w"])
                .arg(&file)
                .current_dir(&repo)
                .env("GIT_OBJECT_DIRECTORY", &objects)
                .env(
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    repo.join(".git/objects"),
                )
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        (tmp, repo, objects)
    }

    #[test]
    fn objects_over_the_limits_are_refused_before_they_are_inflated() {
        let limits = Limits {
            object: 1000,
            total: 1500,
            count: 10,
            work: 1 << 40,
        };
        let (_tmp, repo, objects) = agent_objects(&[1001]);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(
            matches!(err, AbsorbError::ObjectTooLarge { size: 1001, .. }),
            "{err:?}"
        );
        assert!(!objects.exists(), "the directory is removed all the same");
        let (_tmp, repo, objects) = agent_objects(&[800, 800]);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMuch { .. }), "{err:?}");
        let count = crate::run::testing::git(&repo, &["count-objects", "-v"]);
        assert!(count.contains("count: 3\n"), "nothing added: {count}");
        let (_tmp, repo, objects) = agent_objects(&[700, 700]);
        assert_eq!(absorb_objects_within(&repo, &objects, limits).unwrap(), 2);
    }

    /// Packs the agent's loose objects in `objects` (deltas where git finds them), and drops
    /// the loose copies.
    fn pack_agent_objects(repo: &Path, objects: &Path) {
        let git = |args: &[&str], input: Option<&str>| {
            use std::io::Write;
            let mut child = std::process::Command::new("git")
                .args(args)
                .current_dir(repo)
                .env("GIT_OBJECT_DIRECTORY", objects)
                .env(
                    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                    repo.join(".git/objects"),
                )
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input.unwrap_or("").as_bytes()).unwrap();
            drop(stdin);
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap()
        };
        let mut ids = String::new();
        for dir in std::fs::read_dir(objects).unwrap().flatten() {
            let name = dir.file_name().to_string_lossy().into_owned();
            if name.len() != 2 {
                continue;
            }
            for file in std::fs::read_dir(dir.path()).unwrap().flatten() {
                ids += &format!("{name}{}\n", file.file_name().to_string_lossy());
            }
        }
        let pack = objects.join("pack/pack");
        git(&["pack-objects", "-q", &path_text(&pack)], Some(&ids));
        git(&["prune-packed"], None);
    }

    #[test]
    fn a_packed_delta_counts_the_bases_its_read_inflates() {
        // Three blobs of 1000 bytes that differ in their last byte: packed, two are deltas,
        // each of whose reads inflates a base of 1000 bytes as well.
        let limits = Limits {
            object: 2000,
            total: 3000,
            count: 10,
            work: 3000,
        };
        let (tmp, repo, objects) = agent_objects(&[]);
        for n in 0..3u8 {
            let mut blob = vec![b'x'; 1000];
            blob[999] = b'0' + n;
            let file = tmp.path().join(format!("similar{n}"));
            std::fs::write(&file, blob).unwrap();
            let out = std::process::Command::new("git")
                .args(["hash-object", "-w"])
                .arg(&file)
                .current_dir(&repo)
                .env("GIT_OBJECT_DIRECTORY", &objects)
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        pack_agent_objects(&repo, &objects);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMuchWork { .. }), "{err:?}");
    }

    #[test]
    fn more_objects_than_the_count_limit_are_refused() {
        let limits = Limits {
            object: 1000,
            total: 100_000,
            count: 3,
            work: 1 << 40,
        };
        let (_tmp, repo, objects) = agent_objects(&[1, 2, 3, 4]);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMany { limit: 3 }), "{err:?}");
        let count = crate::run::testing::git(&repo, &["count-objects", "-v"]);
        assert!(count.contains("count: 3\n"), "nothing added: {count}");
        // Packed, the index's list is refused before any entry is walked.
        let (_tmp, repo, objects) = agent_objects(&[1, 2, 3, 4]);
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        pack_agent_objects(&repo, &objects);
        let err = absorb_objects_within(&repo, &objects, limits).unwrap_err();
        assert!(matches!(err, AbsorbError::TooMany { limit: 3 }), "{err:?}");
        let (_tmp, repo, objects) = agent_objects(&[1, 2, 3]);
        assert_eq!(absorb_objects_within(&repo, &objects, limits).unwrap(), 3);
    }

    #[test]
    fn nothing_is_deleted_through_a_symlinked_info_directory() {
        let (tmp, repo, objects) = agent_objects(&[10]);
        let victim = tmp.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(victim.join("alternates"), "keep").unwrap();
        std::fs::remove_dir(objects.join("info")).unwrap();
        std::os::unix::fs::symlink(&victim, objects.join("info")).unwrap();
        assert_eq!(absorb_objects(&repo, &objects).unwrap(), 1);
        assert_eq!(
            std::fs::read_to_string(victim.join("alternates")).unwrap(),
            "keep"
        );
        assert!(!objects.exists());
    }

    /// Whether `chattr +i` works here (root, and a filesystem that has the flag); says so
    /// when it does not, for a test that then cannot make its attack.
    fn pin(path: &Path) -> bool {
        let done = std::process::Command::new("chattr")
            .arg("+i")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        if !done {
            eprintln!("skipped: `chattr +i` is not available here (needs root)");
        }
        done
    }

    fn unpin(path: &Path) {
        let _ = std::process::Command::new("chattr")
            .args(["-R", "-f", "-i"])
            .arg(path)
            .status();
    }

    #[test]
    fn objects_elsewhere_stay_unread_when_an_alternates_file_cannot_be_deleted() {
        // Regression: `info` was deleted best effort; an alternates file mvk could not delete
        // (immutable, or in a directory mvk may not write) made libgit2 read another directory.
        let (tmp, repo, objects) = agent_objects(&[10]);
        let evil = tmp.path().join("evil");
        std::fs::create_dir_all(&evil).unwrap();
        let out = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin"])
            .current_dir(&repo)
            .env("GIT_OBJECT_DIRECTORY", &evil)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(b"smuggled")?;
                c.wait_with_output()
            })
            .unwrap();
        let smuggled = git2::Oid::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        let alternates = objects.join("info/alternates");
        std::fs::write(&alternates, format!("{}\n", evil.display())).unwrap();
        if !pin(&alternates) {
            return;
        }
        let added = absorb_objects(&repo, &objects);
        unpin(tmp.path());
        assert_eq!(added.unwrap(), 1);
        let main = git2::Repository::open(&repo).unwrap();
        assert!(!main.odb().unwrap().exists(smuggled));
    }

    #[test]
    fn an_honest_history_packed_by_git_gc_is_not_refused() {
        // Regression: each delta was charged its whole chain, so 200 versions of a 300 KB file
        // in chains of 50 (what `git gc` makes) cost 1.5 GB of the 1 GiB limit, for 60 MB of
        // content.
        let (tmp, repo, objects) = agent_objects(&[]);
        let mut lines: Vec<String> = (0..6000)
            .map(|i| format!("line {i} of a generated file, {:040}", i * 7919))
            .collect();
        let mut paths = String::new();
        for v in 0..200 {
            lines[(v * 29) % 6000] = format!("version {v} changed this line");
            let file = tmp.path().join(format!("v{v}"));
            std::fs::write(&file, lines.join("\n")).unwrap();
            paths += &format!("{}\n", file.display());
        }
        let mut child = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin-paths"])
            .current_dir(&repo)
            .env("GIT_OBJECT_DIRECTORY", &objects)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(paths.as_bytes())
                .unwrap();
        }
        assert!(child.wait().unwrap().success());
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        pack_agent_objects(&repo, &objects);
        assert_eq!(absorb_objects(&repo, &objects).unwrap(), 200);
    }
}
