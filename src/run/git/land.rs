//! An accepted attempt in (its base, its head, the target branch and the strategy); out comes the
//! commit that lands it on the target — [`prepare`]d without touching any ref or file — and then
//! [`publish`]ed: the main checkout updated (when it has the target checked out) and the branch
//! moved with a compare-and-swap, so a target that moved meanwhile is never overwritten.
//!
//! Preparing first lets the caller gate the merged result and record its intent in the ledger
//! before anything a person can see changes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{CheckoutNotificationType, ErrorCode, Index, MergeOptions, Oid, Repository};

use crate::ir::Strategy;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LandError {
    #[error("cannot {action} in `{}`", repo.display())]
    Git {
        action: String,
        repo: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("branch `{branch}` does not exist")]
    NoSuchBranch { branch: String },
    #[error("HEAD is detached, so there is no current branch to merge into")]
    Detached,
    /// The change does not merge cleanly onto the target's tip.
    #[error("the change conflicts with `{branch}` at {}", paths.join(", "))]
    Conflict { branch: String, paths: Vec<String> },
    /// `strategy=ff` and the target has moved past the base.
    #[error("`{branch}` moved from the attempt's base, so a fast-forward is impossible")]
    NotFastForward { branch: String },
    /// The target moved between [`prepare`] and [`publish`].
    #[error("`{branch}` moved while the change was being landed")]
    Moved { branch: String },
    /// The target is checked out in a linked worktree, whose files would go stale.
    #[error("`{branch}` is checked out in the worktree `{}`; landing there is left to a person", path.display())]
    CheckedOutElsewhere { branch: String, path: PathBuf },
    /// Local changes in the main checkout would be overwritten.
    #[error("the main checkout has local changes that landing would overwrite: {}", paths.join(", "))]
    Dirty { paths: Vec<String> },
    /// Another git process holds the main checkout's index, or one died holding it; `owner`
    /// names mvk's own file when the lock is one a landing of mvk's took.
    #[error("the main checkout's index is locked (`{}` exists): {}", lock.display(), match owner {
        Some(own) => format!("a landing of mvk's holds it (its file `{own}`)"),
        None => "another git process is running, or one crashed".to_string(),
    })]
    IndexLocked {
        lock: PathBuf,
        owner: Option<String>,
    },
    /// libgit2, which lands the change, cannot read the main checkout's index (a git feature it
    /// lacks, `advice` says which and how to turn it off): refused before any file is written.
    #[error("libgit2, which mvk lands changes with, cannot read the main checkout's index `{}`: {advice}", path.display())]
    UnreadableIndex {
        path: PathBuf,
        advice: &'static str,
        #[source]
        source: git2::Error,
    },
    #[error("cannot {action} `{}`", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A landing failed half-way and the main checkout could not be put back: the lock stays
    /// held, and the ledger's intent says how to finish or undo it (`mvk resume`).
    #[error("the landing stopped half-way and the main checkout could not be put back; `{}` stays, for `mvk resume` to finish or undo the landing", lock.display())]
    Knotted {
        lock: PathBuf,
        #[source]
        source: Box<LandError>,
    },
}

fn git_err(action: impl Into<String>, repo: &Path) -> impl FnOnce(git2::Error) -> LandError {
    let action = action.into();
    let repo = repo.to_path_buf();
    move |source| LandError::Git {
        action,
        repo,
        source,
    }
}

/// The branch checked out in the repository's main worktree.
pub(crate) fn current_branch(repo_root: &Path) -> Result<String, LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    let head = repo
        .find_reference("HEAD")
        .map_err(git_err("read HEAD", repo_root))?;
    match head.symbolic_target().ok().flatten() {
        Some(target) => Ok(target
            .strip_prefix("refs/heads/")
            .unwrap_or(target)
            .to_string()),
        None => Err(LandError::Detached),
    }
}

/// The commit `branch` points at.
pub(crate) fn branch_tip(repo_root: &Path, branch: &str) -> Result<Oid, LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    tip_of(&repo, branch, repo_root)
}

fn tip_of(repo: &Repository, branch: &str, root: &Path) -> Result<Oid, LandError> {
    match repo.find_reference(&format!("refs/heads/{branch}")) {
        Ok(r) => r
            .peel_to_commit()
            .map(|c| c.id())
            .map_err(git_err(format!("read branch `{branch}`"), root)),
        Err(e) if e.code() == ErrorCode::NotFound => Err(LandError::NoSuchBranch {
            branch: branch.to_string(),
        }),
        Err(e) => Err(git_err(format!("read branch `{branch}`"), root)(e)),
    }
}

/// What landing would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prepared {
    /// The change is empty: the target already holds it.
    Nothing { tip: Oid },
    /// Move the target from `tip` to `commit`; `moved` says the target is no longer at the
    /// attempt's base, so the result is not what the gates saw.
    Commit { tip: Oid, commit: Oid, moved: bool },
}

/// Builds the commit that lands `head` (made from `base`) on `tip`, `branch`'s tip or a commit
/// that is to become it (the change landing before it in the same batch), without moving any
/// ref.
#[allow(clippy::too_many_arguments)]
pub(crate) fn prepare(
    repo_root: &Path,
    branch: &str,
    tip: Oid,
    strategy: Strategy,
    base: Oid,
    head: Oid,
    message: &str,
) -> Result<Prepared, LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    let find = |id: Oid| {
        repo.find_commit(id)
            .map_err(git_err(format!("read commit `{id}`"), repo_root))
    };
    let head_commit = find(head)?;
    let base_commit = find(base)?;
    let tip_commit = find(tip)?;
    if head_commit.tree_id() == base_commit.tree_id() {
        return Ok(Prepared::Nothing { tip });
    }
    let moved = tip != base;
    if strategy == Strategy::Ff {
        if moved
            && !repo
                .graph_descendant_of(head, tip)
                .map_err(git_err("compare histories", repo_root))?
        {
            return Err(LandError::NotFastForward {
                branch: branch.to_string(),
            });
        }
        return Ok(Prepared::Commit {
            tip,
            commit: head,
            moved: false,
        });
    }
    let tree_id = if moved {
        let ancestor = base_commit
            .tree()
            .map_err(git_err("read the base tree", repo_root))?;
        let ours = tip_commit
            .tree()
            .map_err(git_err("read the target tree", repo_root))?;
        let theirs = head_commit
            .tree()
            .map_err(git_err("read the change's tree", repo_root))?;
        let mut index = repo
            .merge_trees(&ancestor, &ours, &theirs, Some(&MergeOptions::new()))
            .map_err(git_err("merge the change onto the target", repo_root))?;
        if index.has_conflicts() {
            let paths = conflict_paths(&index, repo_root)?;
            return Err(LandError::Conflict {
                branch: branch.to_string(),
                paths,
            });
        }
        index
            .write_tree_to(&repo)
            .map_err(git_err("write the merged tree", repo_root))?
    } else {
        head_commit.tree_id()
    };
    let tree = repo
        .find_tree(tree_id)
        .map_err(git_err("read the merged tree", repo_root))?;
    let sig = crate::run::worktree::signature(&repo)
        .map_err(git_err("make a commit signature", repo_root))?;
    let parents = match strategy {
        Strategy::Merge => vec![&tip_commit, &head_commit],
        Strategy::Squash | Strategy::Ff | Strategy::Pr => vec![&tip_commit],
    };
    let commit = repo
        .commit(None, &sig, &sig, message, &tree, &parents)
        .map_err(git_err("write the landing commit", repo_root))?;
    Ok(Prepared::Commit { tip, commit, moved })
}

/// The paths a merge left in conflict, sorted, each once.
fn conflict_paths(index: &Index, repo_root: &Path) -> Result<Vec<String>, LandError> {
    let mut paths: Vec<String> = index
        .conflicts()
        .map_err(git_err("list merge conflicts", repo_root))?
        .flatten()
        .filter_map(|c| c.our.or(c.their).or(c.ancestor))
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Points the branch `name` at `commit`, made or moved (a branch of mvk's own: a pull request's).
pub(crate) fn set_branch(
    repo_root: &Path,
    name: &str,
    commit: Oid,
    reflog: &str,
) -> Result<(), LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    repo.reference(&format!("refs/heads/{name}"), commit, true, reflog)
        .map_err(git_err(
            format!("point branch `{name}` at {commit}"),
            repo_root,
        ))?;
    Ok(())
}

/// The commit a reference (a full name) points at.
pub(crate) fn resolve_ref(repo_root: &Path, name: &str) -> Result<Oid, LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    repo.refname_to_id(name)
        .map_err(git_err(format!("read `{name}`"), repo_root))
}

/// One commit holding every commit of `commits`: the only one, or their merge (made without
/// moving any ref), for a task that builds on the unmerged changes of several.
pub(crate) fn join(repo_root: &Path, commits: &[Oid]) -> Result<Oid, LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    let Some((&first, rest)) = commits.split_first() else {
        return Err(LandError::Conflict {
            branch: "(nothing to build on)".into(),
            paths: Vec::new(),
        });
    };
    let mut at = first;
    for &next in rest {
        if repo.graph_descendant_of(at, next).unwrap_or(false) || at == next {
            continue;
        }
        if repo.graph_descendant_of(next, at).unwrap_or(false) {
            at = next;
            continue;
        }
        let (ours, theirs) = (
            repo.find_commit(at)
                .map_err(git_err(format!("read commit `{at}`"), repo_root))?,
            repo.find_commit(next)
                .map_err(git_err(format!("read commit `{next}`"), repo_root))?,
        );
        let mut index = repo
            .merge_commits(&ours, &theirs, Some(&MergeOptions::new()))
            .map_err(git_err("merge the changes a task builds on", repo_root))?;
        if index.has_conflicts() {
            let paths = conflict_paths(&index, repo_root)?;
            return Err(LandError::Conflict {
                branch: format!("the changes of {at} and {next}"),
                paths,
            });
        }
        let tree_id = index
            .write_tree_to(&repo)
            .map_err(git_err("write the merged tree", repo_root))?;
        let tree = repo
            .find_tree(tree_id)
            .map_err(git_err("read the merged tree", repo_root))?;
        let sig = crate::run::worktree::signature(&repo)
            .map_err(git_err("make a commit signature", repo_root))?;
        at = repo
            .commit(
                None,
                &sig,
                &sig,
                "mvk: the changes a task builds on, merged",
                &tree,
                &[&ours, &theirs],
            )
            .map_err(git_err(
                "write the merge of the changes a task builds on",
                repo_root,
            ))?;
    }
    Ok(at)
}

/// A fresh name for the file through which one landing takes the main checkout's index lock,
/// to be recorded in the ledger's intents before [`publish`] takes it.
pub(crate) fn lock_name(run: &str) -> String {
    let run: String = run
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!(
        "{LOCK_PREFIX}{run}-{:016x}",
        crate::run::exec::untrusted::unguessable()
    )
}

/// How the names of mvk's lock files begin, in the main checkout's git directory.
const LOCK_PREFIX: &str = "mvk-index-";

/// Moves `branch` from `tip` to `commit`. When the main checkout has `branch` checked out, its
/// files and index are brought to `commit` first, under the main checkout's `index.lock`, which
/// the landing takes as git does, through a file of its own named `lock` (recorded in the
/// ledger first, so that a resume can tell the lock is mvk's and finish or undo the landing):
/// a lock someone else holds refuses the landing before any file is written
/// ([`LandError::IndexLocked`]), and so does a local change that would be overwritten
/// ([`LandError::Dirty`]). The order — files, then the index (written aside and renamed over),
/// then the branch, then the lock given back — means the branch holds `commit` only once the
/// checkout does, and a landing cut short anywhere holds the lock.
pub(crate) fn publish(
    repo_root: &Path,
    branch: &str,
    tip: Oid,
    commit: Oid,
    reflog: &str,
    lock: &str,
) -> Result<(), LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    let full = format!("refs/heads/{branch}");
    if tip_of(&repo, branch, repo_root)? != tip {
        return Err(LandError::Moved {
            branch: branch.to_string(),
        });
    }
    if let Some(path) = checked_out_elsewhere(&repo, &full) {
        return Err(LandError::CheckedOutElsewhere {
            branch: branch.to_string(),
            path,
        });
    }
    if !checked_out(&repo, &full) {
        return move_branch(&repo, repo_root, branch, (tip, commit), reflog);
    }
    let held = Lock::take(repo.path(), lock)?;
    crate::run::failpoint("merge-locked");
    // Checked again under the lock, which keeps git from moving HEAD: the checkout's baseline
    // is HEAD's tree, and must be the old tip the landing's paths are reckoned from.
    match tip_of(&repo, branch, repo_root) {
        Ok(now) if now == tip && checked_out(&repo, &full) => {}
        Ok(_) => {
            held.release()?;
            return Err(LandError::Moved {
                branch: branch.to_string(),
            });
        }
        Err(e) => {
            held.release()?;
            return Err(e);
        }
    }
    let landed = Landed {
        repo: &repo,
        root: repo_root,
        held: &held,
    };
    match landed.land(branch, tip, commit, reflog) {
        Ok(()) => held.release(),
        Err(Stop::Clean(e)) => {
            held.release()?;
            Err(e)
        }
        Err(Stop::Held(e)) => Err(LandError::Knotted {
            lock: held.lock.clone(),
            source: Box::new(e),
        }),
    }
}

/// How a landing that holds the lock and cannot go on leaves the main checkout.
enum Stop {
    /// As it found it (nothing written, or what was written put back): the lock is given back.
    Clean(LandError),
    /// Half-landed and not put back: the lock stays, for a resume to recover from the intent.
    Held(LandError),
}

/// A landing under the main checkout's lock.
struct Landed<'r> {
    repo: &'r Repository,
    root: &'r Path,
    held: &'r Lock,
}

impl Landed<'_> {
    fn land(&self, branch: &str, tip: Oid, commit: Oid, reflog: &str) -> Result<(), Stop> {
        let old = self.tree(tip).map_err(Stop::Clean)?;
        let new = self.tree(commit).map_err(Stop::Clean)?;
        let paths = changed_paths(self.repo, self.root, &old, &new).map_err(Stop::Clean)?;
        // The index is read before any file is written: one libgit2 cannot read (a split or
        // sparse index) would otherwise fail the checkout, and then its undoing, half-way.
        let mut index = read_index(self.repo, self.held).map_err(Stop::Clean)?;
        // A change a person staged at a landing's path (whatever the file holds) would be lost
        // when the index is rebuilt from the new tree: git's own checkout refuses it too.
        let staged = staged_changes(&index, &old, &paths);
        if !staged.is_empty() {
            return Err(Stop::Clean(LandError::Dirty { paths: staged }));
        }
        self.held.begin_writing().map_err(Stop::Clean)?;
        // Whether the checkout began to write (its progress reports the start before the
        // first write): a checkout that fails before that left every file as it was.
        let mut started = false;
        // Safe: only files that still match HEAD (the old tip, which HEAD names, and which git
        // cannot move while the lock is held) are written, and libgit2 finds every conflict
        // before it writes the first file. The index is left alone: it is written below, from
        // the lock's own file.
        let mut conflicts = Vec::new();
        // The checkout compares the files with this index, read once: as the repository's
        // own, it is not read again (a 20,000-file index costs milliseconds per read).
        self.repo
            .set_index(&mut index)
            .map_err(|e| Stop::Clean(git_err("use the main checkout's index", self.root)(e)))?;
        let written = if paths.is_empty() {
            Ok(())
        } else {
            let mut opts = CheckoutBuilder::new();
            opts.safe();
            // Only the paths the landing changes: the others are the same in both trees, and a
            // checkout of the whole tree would stat every file of the checkout to learn that.
            opts.disable_pathspec_match(true);
            for p in &paths {
                opts.path(p.clone());
            }
            opts.update_index(false);
            // An ignored file (a user's `.env`, mvk's `.mvk/`) is never overwritten by a landing.
            opts.overwrite_ignored(false);
            opts.notify_on(CheckoutNotificationType::CONFLICT);
            opts.notify(|_, path, _, _, _| {
                if let Some(p) = path {
                    conflicts.push(p.display().to_string());
                }
                true
            });
            opts.progress(|path, done, _| {
                started = true;
                if path.is_some() && done == 1 {
                    crate::run::failpoint("merge-files-half");
                }
            });
            self.repo.checkout_tree(new.as_object(), Some(&mut opts))
        };
        match written {
            Ok(()) => {}
            Err(e) if e.code() == ErrorCode::Conflict || !conflicts.is_empty() => {
                conflicts.sort();
                conflicts.dedup();
                return Err(Stop::Clean(LandError::Dirty { paths: conflicts }));
            }
            Err(e) if !started => {
                return Err(Stop::Clean(git_err("update the main checkout", self.root)(
                    e,
                )));
            }
            Err(e) => {
                return Err(self.undo(
                    &old,
                    &paths,
                    git_err("update the main checkout", self.root)(e),
                ));
            }
        }
        if let Err(e) = stage(self.repo, self.root, self.held, &new, &paths, Some(index)) {
            return Err(self.undo(&old, &paths, e));
        }
        crate::run::failpoint("merge-checkout");
        match move_branch(self.repo, self.root, branch, (tip, commit), reflog) {
            Ok(()) => {
                crate::run::failpoint("merge-ref-moved");
                Ok(())
            }
            Err(e) => Err(self.undo(&old, &paths, e)),
        }
    }

    /// Puts `paths` back as `old` has them (files and index) after the landing failed with
    /// `cause`: clean when that worked.
    fn undo(&self, old: &git2::Tree<'_>, paths: &[Vec<u8>], cause: LandError) -> Stop {
        match put(self.repo, self.root, self.held, old, paths, paths) {
            Ok(()) => Stop::Clean(cause),
            Err(e) => {
                tracing::warn!(error = %e, "cannot put the main checkout back after a failed landing");
                Stop::Held(cause)
            }
        }
    }

    fn tree(&self, commit: Oid) -> Result<git2::Tree<'_>, LandError> {
        tree_of(self.repo, self.root, commit)
    }
}

fn tree_of<'r>(
    repo: &'r Repository,
    root: &Path,
    commit: Oid,
) -> Result<git2::Tree<'r>, LandError> {
    repo.find_commit(commit)
        .and_then(|c| c.tree())
        .map_err(git_err(format!("read the tree of commit `{commit}`"), root))
}

/// Whether the main checkout (not a bare repository) has `full_ref` checked out.
fn checked_out(repo: &Repository, full_ref: &str) -> bool {
    !repo.is_bare()
        && repo
            .find_reference("HEAD")
            .ok()
            .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
            .is_some_and(|t| t == full_ref)
}

/// Moves `branch` from `tip` to `commit` with a compare-and-swap.
fn move_branch(
    repo: &Repository,
    root: &Path,
    branch: &str,
    (tip, commit): (Oid, Oid),
    reflog: &str,
) -> Result<(), LandError> {
    let full = format!("refs/heads/{branch}");
    match repo.reference_matching(&full, commit, true, tip, reflog) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == ErrorCode::Modified || e.code() == ErrorCode::Locked => {
            Err(LandError::Moved {
                branch: branch.to_string(),
            })
        }
        Err(e) => Err(git_err(format!("move branch `{branch}`"), root)(e)),
    }
}

/// The paths whose entries differ between `old` and `new` (no rename detection: a rename is a
/// path removed and one added).
fn changed_paths(
    repo: &Repository,
    root: &Path,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
) -> Result<Vec<Vec<u8>>, LandError> {
    super::treediff::changed_paths(repo, old, new)
        .map_err(git_err("compare the landing's trees", root))
}

/// Writes `files` (of `paths`, which `tree` and the checkout's current state differ at) as
/// `tree` has them, whatever the checkout holds there, then the index's entries of `paths`.
fn put(
    repo: &Repository,
    root: &Path,
    held: &Lock,
    tree: &git2::Tree<'_>,
    paths: &[Vec<u8>],
    files: &[Vec<u8>],
) -> Result<(), LandError> {
    if !files.is_empty() {
        let mut opts = CheckoutBuilder::new();
        opts.force();
        opts.update_index(false);
        // Only the landing's own paths, where a file the tree lacks is mvk's to remove.
        opts.remove_untracked(true);
        opts.remove_ignored(true);
        opts.disable_pathspec_match(true);
        for p in files {
            opts.path(p.clone());
        }
        repo.checkout_tree(tree.as_object(), Some(&mut opts))
            .map_err(git_err(
                "write the landing's files in the main checkout",
                root,
            ))?;
    }
    stage(repo, root, held, tree, paths, None)
}

/// Replaces the main checkout's index by one whose entries at `paths` are `tree`'s (with the
/// stat data of the files as they now are), the others kept: written to the lock's own
/// `.index` file through a bare index (so libgit2 takes no lock of its own on `.git/index`),
/// then renamed over `.git/index`. READ is that index when the caller read it under the lock
/// already (nothing wrote `.git/index` since).
fn stage(
    repo: &Repository,
    root: &Path,
    held: &Lock,
    tree: &git2::Tree<'_>,
    paths: &[Vec<u8>],
    read: Option<Index>,
) -> Result<(), LandError> {
    use std::os::unix::ffi::OsStrExt;
    let index_path = repo.path().join("index");
    let workdir = repo.workdir().unwrap_or(root);
    let mut index = match read {
        Some(index) => index,
        None => read_index(repo, held)?,
    };
    for p in paths {
        let path = Path::new(std::ffi::OsStr::from_bytes(p));
        for stage in 0..=3 {
            match index.remove(path, stage) {
                Ok(()) => {}
                Err(e) if e.code() == ErrorCode::NotFound => {}
                Err(e) => return Err(git_err("build the main checkout's new index", root)(e)),
            }
        }
    }
    for p in paths {
        let path = Path::new(std::ffi::OsStr::from_bytes(p));
        let Ok(entry) = tree.get_path(path) else {
            continue; // not in the tree: removed above
        };
        let mode = u32::try_from(entry.filemode()).unwrap_or(0);
        let meta = if entry.kind() == Some(git2::ObjectType::Commit) {
            None // a submodule: no file of its own here
        } else {
            std::fs::symlink_metadata(workdir.join(path)).ok()
        };
        index
            .add(&index_entry(p, entry.id(), mode, meta.as_ref()))
            .map_err(git_err("build the main checkout's new index", root))?;
    }
    index
        .write()
        .map_err(git_err("write the main checkout's new index", root))?;
    std::fs::rename(&held.staged, &index_path).map_err(|source| LandError::Io {
        action: "put the new index in place",
        path: index_path,
        source,
    })
}

/// The main checkout's index, copied to the lock's `staged` file and opened there (a bare
/// index: libgit2 takes no lock of its own on `.git/index`).
fn read_index(repo: &Repository, held: &Lock) -> Result<Index, LandError> {
    let index_path = repo.path().join("index");
    remove_if_there(&held.staged)?;
    // libgit2 writes the staged index through `STAGED.lock`; one a kill left would fail this
    // landing's write as `Locked`. Both are this landing's alone (named after its own file).
    let mut staged_lock = held.staged.clone().into_os_string();
    staged_lock.push(".lock");
    remove_if_there(Path::new(&staged_lock))?;
    match std::fs::copy(&index_path, &held.staged) {
        Ok(_) => {}
        // A repository whose index was never written: the new one starts empty.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(LandError::Io {
                action: "copy the main checkout's index",
                path: index_path,
                source,
            });
        }
    }
    Index::open(&held.staged).map_err(|source| {
        // libgit2 names the extension it refuses: "unsupported mandatory extension: 'link'".
        let advice = if source.message().contains("'link'") {
            "it is a split index (`git update-index --split-index`, `core.splitIndex`), which libgit2 does not support; `git update-index --no-split-index` (and `git config core.splitIndex false`) makes it one it reads"
        } else if source.message().contains("'sdir'") {
            "it is a sparse index (`git sparse-checkout init --sparse-index`, `index.sparse`), which libgit2 does not support; `git sparse-checkout init --no-sparse-index` (or `git config index.sparse false`) makes it one it reads"
        } else if source.class() == git2::ErrorClass::Index {
            "it uses an index feature libgit2 does not support; `git update-index --no-split-index` and `git sparse-checkout init --no-sparse-index` turn off the usual ones"
        } else {
            "see the cause below"
        };
        LandError::UnreadableIndex {
            path: index_path.clone(),
            advice,
            source,
        }
    })
}

/// An index entry for `path` at blob (or commit) `id`, with the stat data of `meta` (none: git
/// reads the file to compare it).
fn index_entry(
    path: &[u8],
    id: Oid,
    mode: u32,
    meta: Option<&std::fs::Metadata>,
) -> git2::IndexEntry {
    use std::os::unix::fs::MetadataExt;
    // Git keeps 32 bits of each: the low ones.
    let low = |v: u64| u32::try_from(v & 0xffff_ffff).unwrap_or(0);
    let secs = |v: i64| i32::try_from(v).unwrap_or(0);
    let nanos = |v: i64| u32::try_from(v).unwrap_or(0);
    let time = |s: i64, n: i64| git2::IndexTime::new(secs(s), nanos(n));
    git2::IndexEntry {
        ctime: meta.map_or(time(0, 0), |m| time(m.ctime(), m.ctime_nsec())),
        mtime: meta.map_or(time(0, 0), |m| time(m.mtime(), m.mtime_nsec())),
        dev: meta.map_or(0, |m| low(m.dev())),
        ino: meta.map_or(0, |m| low(m.ino())),
        mode,
        uid: meta.map_or(0, |m| m.uid()),
        gid: meta.map_or(0, |m| m.gid()),
        file_size: meta.map_or(0, |m| low(m.size())),
        id,
        flags: 0,
        flags_extended: 0,
        path: path.to_vec(),
    }
}

fn remove_if_there(path: &Path) -> Result<(), LandError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LandError::Io {
            action: "remove a file of mvk's landing",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The main checkout's `index.lock` as a landing holds it: a hard link to a file of its own
/// (`own`, named in the ledger), so whoever finds the lock can tell it is mvk's, and whose.
struct Lock {
    own: PathBuf,
    lock: PathBuf,
    /// Where the new index is written before it is renamed over `.git/index`.
    staged: PathBuf,
    /// There from just before the landing's first write in the checkout until just before the
    /// lock is given back: without it, the checkout holds nothing of mvk's, so a resume that
    /// finds the lock gone (a person's, or never taken) must not take it again.
    writing: PathBuf,
}

impl Lock {
    fn at(git_dir: &Path, name: &str) -> Lock {
        Lock {
            own: git_dir.join(name),
            lock: git_dir.join("index.lock"),
            staged: git_dir.join(format!("{name}.index")),
            writing: git_dir.join(format!("{name}.writing")),
        }
    }

    /// Takes the lock: the own file made, then linked to `index.lock`, which fails when the
    /// lock exists, as git's own `O_EXCL` creation does; then nothing has been written.
    fn take(git_dir: &Path, name: &str) -> Result<Lock, LandError> {
        use std::io::Write as _;
        let held = Lock::at(git_dir, name);
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&held.own)
            .and_then(|mut f| {
                f.write_all(
                    format!(
                        "the main checkout's index lock, taken by mvk (process {}) for a landing\n",
                        std::process::id()
                    )
                    .as_bytes(),
                )
            });
        if let Err(source) = made {
            let _ = std::fs::remove_file(&held.own);
            return Err(LandError::Io {
                action: "make the landing's lock file",
                path: held.own,
                source,
            });
        }
        match std::fs::hard_link(&held.own, &held.lock) {
            Ok(()) => Ok(held),
            Err(e) => {
                let _ = std::fs::remove_file(&held.own);
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    Err(LandError::IndexLocked {
                        owner: lock_owner(git_dir),
                        lock: held.lock,
                    })
                } else {
                    Err(LandError::Io {
                        action: "take the main checkout's index lock",
                        path: held.lock,
                        source: e,
                    })
                }
            }
        }
    }

    /// Takes the lock again through the own file: whether it now holds it (not when the own
    /// file is gone). Someone else holding the lock is an error, the own file kept: mvk's
    /// files may be in the checkout, and only a later resume, under the lock, can tell them
    /// from a person's.
    fn retake(&self) -> Result<bool, LandError> {
        if std::fs::symlink_metadata(&self.own).is_err() {
            return Ok(false);
        }
        match std::fs::hard_link(&self.own, &self.lock) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(LandError::IndexLocked {
                    owner: self.lock.parent().and_then(lock_owner),
                    lock: self.lock.clone(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(LandError::Io {
                action: "take the main checkout's index lock again",
                path: self.lock.clone(),
                source,
            }),
        }
    }

    /// Removes `index.lock`, found to be the own file: renamed aside first and checked there,
    /// so that a lock git took between the check and the removal (ours gone meanwhile) is put
    /// back rather than removed.
    fn unlock(&self) -> Result<(), LandError> {
        let mut aside = self.own.clone().into_os_string();
        aside.push(".unlocking");
        let aside = PathBuf::from(aside);
        match std::fs::rename(&self.lock, &aside) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(LandError::Io {
                    action: "give back the main checkout's index lock",
                    path: self.lock.clone(),
                    source,
                });
            }
        }
        if same_file(&self.own, &aside) {
            return remove_if_there(&aside);
        }
        // Someone else's: back in place, unless yet another took the lock in between, when it
        // stays aside (named after this landing) rather than be lost.
        match std::fs::hard_link(&aside, &self.lock) {
            Ok(()) => remove_if_there(&aside),
            Err(e) => {
                tracing::warn!(error = %e, aside = %aside.display(), "cannot put back an index lock that is not mvk's");
                Ok(())
            }
        }
    }

    /// Whether `index.lock` is this landing's own file.
    fn held(&self) -> bool {
        same_file(&self.own, &self.lock)
    }

    /// Marks that the landing (or its recovery) is about to write in the checkout.
    fn begin_writing(&self) -> Result<(), LandError> {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.writing)
            .map(drop)
            .map_err(|source| LandError::Io {
                action: "mark the landing as writing in the main checkout",
                path: self.writing.clone(),
                source,
            })
    }

    /// Whether the landing may have written in the checkout (see [`Lock::writing`]).
    fn wrote(&self) -> bool {
        std::fs::symlink_metadata(&self.writing).is_ok()
    }

    /// Gives the lock back (`index.lock` only while it is still the own file), then removes
    /// the landing's own files. The writing mark goes first: once the lock is gone, the own
    /// file alone must not make a resume take the lock again.
    fn release(&self) -> Result<(), LandError> {
        remove_if_there(&self.writing)?;
        if self.held() {
            self.unlock()?;
        }
        // A kill inside `unlock` may have left the lock set aside: mvk's own is removed below
        // with the own file; another's is put back where git looks for it.
        let mut aside = self.own.clone().into_os_string();
        aside.push(".unlocking");
        let aside = PathBuf::from(aside);
        if std::fs::symlink_metadata(&aside).is_ok() && !same_file(&self.own, &aside) {
            match std::fs::hard_link(&aside, &self.lock) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    tracing::warn!(aside = %aside.display(), "an index lock set aside stays aside: another holds the lock");
                }
                Err(source) => {
                    return Err(LandError::Io {
                        action: "put back an index lock that is not mvk's",
                        path: self.lock.clone(),
                        source,
                    });
                }
            }
            if same_file(&aside, &self.lock) {
                remove_if_there(&aside)?;
            }
        } else {
            remove_if_there(&aside)?;
        }
        crate::run::failpoint("merge-unlocked");
        remove_if_there(&self.own)?;
        remove_if_there(&self.staged)?;
        let mut staged_lock = self.staged.clone().into_os_string();
        staged_lock.push(".lock");
        remove_if_there(Path::new(&staged_lock))
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// The name of the file of mvk's that the main checkout's `index.lock` (in `git_dir`) is, when
/// it is one: a landing's, named in the ledger's intent.
pub(crate) fn lock_owner(git_dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let lock = std::fs::symlink_metadata(git_dir.join("index.lock")).ok()?;
    if lock.nlink() < 2 {
        return None;
    }
    std::fs::read_dir(git_dir)
        .ok()?
        .flatten()
        .find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let meta = std::fs::symlink_metadata(entry.path()).ok()?;
            (name.starts_with(LOCK_PREFIX) && meta.dev() == lock.dev() && meta.ino() == lock.ino())
                .then_some(name)
        })
}

/// Whether the main checkout of `repo_root` has no `index.lock` (a repository that cannot be
/// opened says no): what a landing stopped on someone else's lock waits for.
pub(crate) fn index_unlocked(repo_root: &Path) -> bool {
    Repository::open(repo_root).is_ok_and(|repo| !repo.path().join("index.lock").exists())
}

/// What [`recover`] did with a landing cut short.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recovery {
    /// The landing did not hold the main checkout's lock (never took it, or gave it back, or
    /// did not need it): nothing of it is left in the checkout.
    NotHeld,
    /// The branch already held the landing's commit, and so did the checkout: the lock was
    /// given back.
    Released,
    /// The landing held the lock but nothing of it reached the checkout (files as the old tip
    /// has them, no index entry the new tip's; a person's staged ones kept): the lock was given
    /// back.
    Untouched,
    /// The landing was carried out: files, index, the branch moved, the lock given back.
    Finished,
    /// The landing was undone: its paths hold the old tip's content again, except `foreign`
    /// ones, whose content is neither mvk's nor the old tip's (a person's), left as they are;
    /// the lock was given back.
    Undone { foreign: Vec<String> },
}

/// Finishes or undoes a landing of `commit` (a descendant of `old_tip`, landing on `branch`)
/// that was cut short while it may have held the main checkout's lock through its file `lock`
/// (as the ledger's intent recorded): whatever instant it stopped at, the main checkout ends
/// as it would have after the landing, or as before it, never between. Finished when the
/// branch is still at `old_tip` and every path of the landing holds the old content, the new,
/// or a part of the new (a file cut short as it was written): those are mvk's own, never a
/// person's change. Undone when the branch moved elsewhere, or a path holds something else.
pub(crate) fn recover(
    repo_root: &Path,
    branch: &str,
    (old_tip, commit): (Oid, Oid),
    lock: &str,
    reflog: &str,
) -> Result<Recovery, LandError> {
    let repo = Repository::open(repo_root).map_err(git_err("open repository", repo_root))?;
    let held = Lock::at(repo.path(), lock);
    // A person may have removed the lock after the crash (as git's own message says to):
    // while the landing's writing mark is there, its files may be in the checkout, so it
    // takes the lock again and finishes or undoes as if it had held it all along. Without
    // the mark (killed before linking its file, or after a refusal gave the lock back) mvk
    // wrote nothing, and what the paths hold now is a person's.
    if !held.held() && (!held.wrote() || !held.retake()?) {
        held.release()?;
        return Ok(Recovery::NotHeld);
    }
    let tip = tip_of(&repo, branch, repo_root)?;
    let holds = tip == commit
        || repo
            .graph_descendant_of(tip, commit)
            .map_err(git_err("compare histories", repo_root))?;
    let full = format!("refs/heads/{branch}");
    if holds || !checked_out(&repo, &full) {
        // The branch moves only after the files and the index are written: nothing is left
        // to do but to give the lock back. (HEAD changed under the lock: not mvk's to judge.)
        held.release()?;
        return Ok(Recovery::Released);
    }
    // A kill inside the branch's move leaves libgit2's `refs/heads/BRANCH.lock` holding (a
    // beginning of) the commit this landing moves the branch to: that is mvk's own, and would
    // fail the move as `Locked`. A lock holding anything else is another's and stays.
    if held.wrote() {
        let ref_lock = repo.commondir().join(format!("refs/heads/{branch}.lock"));
        if std::fs::symlink_metadata(&ref_lock).is_ok_and(|m| m.is_file())
            && let Ok(bytes) = std::fs::read(&ref_lock)
            && format!("{commit}\n").as_bytes().starts_with(&bytes)
        {
            remove_if_there(&ref_lock)?;
        }
    }
    // Held, but no writing mark: killed before the first write, or after an undo finished.
    // Nothing of mvk's is in the checkout, so what the paths hold now (a person may edit
    // files while the lock stands) is theirs, never guessed to be mvk's half-written work.
    if !held.wrote() {
        held.release()?;
        return Ok(Recovery::Untouched);
    }
    let old = tree_of(&repo, repo_root, old_tip)?;
    let new = tree_of(&repo, repo_root, commit)?;
    let paths = changed_paths(&repo, repo_root, &old, &new)?;
    // The index first: a landing reads it before its first write, so one libgit2 cannot read
    // means mvk never wrote here, whatever the files hold (a person's edits); and finishing or
    // undoing would fail on it while holding the lock, on every resume.
    let index = match read_index(&repo, &held) {
        Ok(index) => index,
        // Files may have been written (the mark is there) and the index became unreadable
        // since (a person removed the lock, then git wrote a split or sparse index): only
        // the lock is given back, so that they can turn the feature off, and the landing's
        // record stays for the next resume to take the lock again and finish or undo.
        Err(e @ LandError::UnreadableIndex { .. }) => {
            held.unlock()?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    // An entry that is neither the old tree's nor the new one's was staged by a person (mvk
    // stages only those): kept, and its path left alone.
    let staged: BTreeSet<Vec<u8>> = paths
        .iter()
        .filter(|p| !entry_is(&index, &old, p) && !entry_is(&index, &new, p))
        .cloned()
        .collect();
    if untouched(&repo, repo_root, &index, (&old, &new), &paths)? {
        // Cut short before its first write: nothing to finish or undo, and the change is
        // landed again.
        held.release()?;
        return Ok(Recovery::Untouched);
    }
    let mut foreign = foreign_paths(&repo, repo_root, &old, &new, &paths)?;
    foreign.extend(staged.iter().cloned());
    // Marked before writing, so that a resume killed in turn can still take the lock again.
    held.begin_writing()?;
    if tip == old_tip && foreign.is_empty() {
        put(&repo, repo_root, &held, &new, &paths, &paths)?;
        match move_branch(&repo, repo_root, branch, (old_tip, commit), reflog) {
            Ok(()) => {
                held.release()?;
                return Ok(Recovery::Finished);
            }
            Err(LandError::Moved { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let own: Vec<Vec<u8>> = paths
        .iter()
        .filter(|p| !foreign.contains(*p))
        .cloned()
        .collect();
    let restage: Vec<Vec<u8>> = paths
        .iter()
        .filter(|p| !staged.contains(*p))
        .cloned()
        .collect();
    put(&repo, repo_root, &held, &old, &restage, &own)?;
    held.release()?;
    let mut foreign: Vec<String> = foreign
        .iter()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    foreign.sort();
    Ok(Recovery::Undone { foreign })
}

/// The paths of a landing (`old` → `new`) whose file in the main checkout is neither `old`'s
/// nor `new`'s content nor a beginning of `new`'s (a file cut short as it was written).
fn foreign_paths(
    repo: &Repository,
    root: &Path,
    old: &git2::Tree<'_>,
    new: &git2::Tree<'_>,
    paths: &[Vec<u8>],
) -> Result<BTreeSet<Vec<u8>>, LandError> {
    use std::os::unix::ffi::OsStrExt;
    let workdir = repo.workdir().unwrap_or(root);
    let mut foreign = BTreeSet::new();
    for p in paths {
        let path = Path::new(std::ffi::OsStr::from_bytes(p));
        let file = workdir.join(path);
        let Ok(meta) = std::fs::symlink_metadata(&file) else {
            continue; // absent: removed, or not written yet
        };
        let id_in = |tree: &git2::Tree<'_>| tree.get_path(path).ok().map(|e| e.id());
        let (was, will) = (id_in(old), id_in(new));
        if meta.is_dir() {
            // A directory where the landing has a file: one of the landing's own trees (the
            // new one being written, or the old one being removed) holds paths under it.
            continue;
        }
        let bytes = file_bytes(&file, &meta)?;
        if holds(repo, root, &file, &meta, &bytes, was)?
            || holds(repo, root, &file, &meta, &bytes, will)?
        {
            continue;
        }
        // A file cut short as it was written: the landing's, or its undoing's — as the blob is,
        // or with its line endings made CRLF, as checkout writes a text file under
        // `core.autocrlf=true` or `eol=crlf`. (git2 has no safe way to run the repository's
        // filters towards the checkout; other filters — `ident`, an encoding, an external
        // smudge driver such as Git LFS — are not recognised here, and such a file cut short
        // is taken for a person's.)
        let begins = |id: Option<Oid>| {
            id.and_then(|w| repo.find_blob(w).ok()).is_some_and(|b| {
                b.content().starts_with(&bytes) || crlf(b.content()).starts_with(&bytes)
            })
        };
        if begins(will) || begins(was) {
            continue;
        }
        foreign.insert(p.clone());
    }
    Ok(foreign)
}

/// `text` with each LF not already after a CR made CRLF.
fn crlf(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 16);
    let mut prev = 0u8;
    for &b in text {
        if b == b'\n' && prev != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        prev = b;
    }
    out
}

/// The bytes of `file` in the main checkout (a link's target for a link).
fn file_bytes(file: &Path, meta: &std::fs::Metadata) -> Result<Vec<u8>, LandError> {
    use std::os::unix::ffi::OsStringExt;
    if meta.file_type().is_symlink() {
        std::fs::read_link(file)
            .map(|t| t.into_os_string().into_vec())
            .map_err(|source| LandError::Io {
                action: "read a link in the main checkout",
                path: file.to_path_buf(),
                source,
            })
    } else {
        std::fs::read(file).map_err(|source| LandError::Io {
            action: "read a file in the main checkout",
            path: file.to_path_buf(),
            source,
        })
    }
}

/// Whether `file` (`bytes`) holds blob `id`: the same bytes, or the same once through the
/// repository's filters (line endings), as libgit2 wrote it.
fn holds(
    repo: &Repository,
    root: &Path,
    file: &Path,
    meta: &std::fs::Metadata,
    bytes: &[u8],
    id: Option<Oid>,
) -> Result<bool, LandError> {
    let Some(id) = id else {
        return Ok(false);
    };
    let raw = Oid::hash_object(git2::ObjectType::Blob, bytes)
        .map_err(git_err("hash a file of the main checkout", root))?;
    Ok(
        raw == id
            || (!meta.file_type().is_symlink() && repo.blob_path(file).is_ok_and(|f| f == id)),
    )
}

/// Whether nothing of a landing from `old` to `new` is in the main checkout: each of its
/// `paths` holds `old`'s content (absent where `old` lacks it), and none of `index`'s entries
/// there is `new`'s (each is `old`'s, or one a person staged).
fn untouched(
    repo: &Repository,
    root: &Path,
    index: &Index,
    (old, new): (&git2::Tree<'_>, &git2::Tree<'_>),
    paths: &[Vec<u8>],
) -> Result<bool, LandError> {
    use std::os::unix::ffi::OsStrExt;
    let workdir = repo.workdir().unwrap_or(root);
    for p in paths {
        let path = Path::new(std::ffi::OsStr::from_bytes(p));
        let file = workdir.join(path);
        let entry = old.get_path(path).ok();
        match (std::fs::symlink_metadata(&file).ok(), entry) {
            (None, None) => {}
            (Some(meta), Some(entry)) if meta.is_dir() => {
                // A submodule's directory: not the landing's to write.
                if entry.kind() != Some(git2::ObjectType::Commit) {
                    return Ok(false);
                }
            }
            (Some(meta), Some(entry)) => {
                let bytes = file_bytes(&file, &meta)?;
                if !holds(repo, root, &file, &meta, &bytes, Some(entry.id()))? {
                    return Ok(false);
                }
            }
            _ => return Ok(false),
        }
    }
    Ok(!paths.iter().any(|p| entry_is(index, new, p)))
}

/// The `paths` whose entry in `index` is not `tree`'s (blob and mode; present or absent; any
/// conflict stage): a change a person staged there.
fn staged_changes(index: &Index, tree: &git2::Tree<'_>, paths: &[Vec<u8>]) -> Vec<String> {
    paths
        .iter()
        .filter(|p| !entry_is(index, tree, p))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}

/// Whether `index`'s entry at `path` is `tree`'s (blob and mode, or absent from both) and
/// there is no conflict stage there.
fn entry_is(index: &Index, tree: &git2::Tree<'_>, path: &[u8]) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    let want = tree
        .get_path(path)
        .ok()
        .map(|e| (e.id(), u32::try_from(e.filemode()).unwrap_or(0)));
    let have = index.get_path(path, 0).map(|e| (e.id, e.mode));
    have == want && !(1..=3).any(|stage| index.get_path(path, stage).is_some())
}

/// A linked worktree (not one of mvk's pool slots, which never hold a target) that has
/// `full_ref` checked out.
fn checked_out_elsewhere(repo: &Repository, full_ref: &str) -> Option<PathBuf> {
    let names = repo.worktrees().ok()?;
    for name in names.iter().flatten().flatten() {
        let Ok(wt) = repo.find_worktree(name) else {
            continue;
        };
        let Ok(linked) = Repository::open_from_worktree(&wt) else {
            continue;
        };
        let head = linked
            .find_reference("HEAD")
            .ok()
            .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string));
        if head.as_deref() == Some(full_ref) {
            return Some(wt.path().to_path_buf());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::testing::git;

    fn repo_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        git(dir.path(), &["init", "-q", "-b", "main"]);
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        git(dir.path(), &["add", "-A"]);
        git(dir.path(), &["commit", "-qm", "base"]);
        dir
    }

    fn commit_on(dir: &Path, branch: &str, from: &str, file: &str, text: &str) -> Oid {
        git(dir, &["branch", "-f", branch, from]);
        // Named after the repository's own temporary directory: a fixed name in the shared
        // temporary directory collided with the same test run by another process.
        let own = dir.file_name().unwrap().to_string_lossy().into_owned();
        let wt = dir.join(format!("../{own}-{}-wt", branch.replace('/', "-")));
        let _ = std::fs::remove_dir_all(&wt);
        git(
            dir,
            &["worktree", "add", "-q", wt.to_str().unwrap(), branch],
        );
        std::fs::write(wt.join(file), text).unwrap();
        git(&wt, &["commit", "-qam", "change"]);
        let id = git(&wt, &["rev-parse", "HEAD"]);
        git(
            dir,
            &["worktree", "remove", "--force", wt.to_str().unwrap()],
        );
        Oid::from_str(id.trim()).unwrap()
    }

    fn head(dir: &Path) -> Oid {
        Oid::from_str(git(dir, &["rev-parse", "main"]).trim()).unwrap()
    }

    #[test]
    fn squash_onto_an_unmoved_target_updates_the_checkout() {
        let dir = repo_with(&[("a.txt", "one\n"), ("b.txt", "two\n")]);
        let base = head(dir.path());
        let change = commit_on(dir.path(), "work", "main", "a.txt", "ONE\n");
        let prepared = prepare(
            dir.path(),
            "main",
            head(dir.path()),
            Strategy::Squash,
            base,
            change,
            "m",
        )
        .unwrap();
        let Prepared::Commit { tip, commit, moved } = prepared else {
            panic!("{prepared:?}")
        };
        assert!(!moved);
        assert_eq!(tip, base);
        // Nothing visible changed yet.
        assert_eq!(head(dir.path()), base);
        publish(dir.path(), "main", tip, commit, "land", &lock_name("r")).unwrap();
        assert_eq!(head(dir.path()), commit);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "ONE\n"
        );
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        let parents = git(dir.path(), &["log", "-1", "--format=%P", "main"]);
        assert_eq!(parents.trim(), base.to_string());
    }

    #[test]
    fn a_moved_target_merges_cleanly_or_reports_the_conflict() {
        let dir = repo_with(&[("a.txt", "one\n"), ("b.txt", "two\n")]);
        let base = head(dir.path());
        let change = commit_on(dir.path(), "work", "main", "a.txt", "ONE\n");
        // Someone else changes another file on main meanwhile.
        std::fs::write(dir.path().join("b.txt"), "TWO\n").unwrap();
        git(dir.path(), &["commit", "-qam", "other"]);
        let other = head(dir.path());
        let p = prepare(
            dir.path(),
            "main",
            head(dir.path()),
            Strategy::Merge,
            base,
            change,
            "m",
        )
        .unwrap();
        let Prepared::Commit { commit, moved, .. } = p else {
            panic!("{p:?}")
        };
        assert!(moved);
        publish(dir.path(), "main", other, commit, "land", &lock_name("r")).unwrap();
        let parents = git(dir.path(), &["log", "-1", "--format=%P", "main"]);
        assert_eq!(parents.trim(), format!("{other} {change}"));
        assert_eq!(git(dir.path(), &["show", "main:b.txt"]), "TWO\n");
        assert_eq!(git(dir.path(), &["show", "main:a.txt"]), "ONE\n");

        // A second change to the same line now conflicts.
        let clash = commit_on(dir.path(), "work2", &base.to_string(), "a.txt", "uno\n");
        let err = prepare(
            dir.path(),
            "main",
            head(dir.path()),
            Strategy::Squash,
            base,
            clash,
            "m",
        )
        .unwrap_err();
        assert!(
            matches!(&err, LandError::Conflict { paths, .. } if paths == &["a.txt".to_string()]),
            "{err:?}"
        );
        let err = prepare(
            dir.path(),
            "main",
            head(dir.path()),
            Strategy::Ff,
            base,
            clash,
            "m",
        )
        .unwrap_err();
        assert!(matches!(err, LandError::NotFastForward { .. }), "{err:?}");
    }

    #[test]
    fn local_edits_and_a_moved_tip_stop_the_landing() {
        let dir = repo_with(&[("a.txt", "one\n")]);
        let base = head(dir.path());
        let change = commit_on(dir.path(), "work", "main", "a.txt", "ONE\n");
        let Prepared::Commit { tip, commit, .. } = prepare(
            dir.path(),
            "main",
            head(dir.path()),
            Strategy::Ff,
            base,
            change,
            "m",
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(commit, change);
        std::fs::write(dir.path().join("a.txt"), "mine\n").unwrap();
        let err = publish(dir.path(), "main", tip, commit, "land", &lock_name("r")).unwrap_err();
        assert!(matches!(&err, LandError::Dirty { paths } if paths == &["a.txt".to_string()]));
        assert_eq!(head(dir.path()), base);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "mine\n"
        );
        let err = publish(dir.path(), "main", change, commit, "land", &lock_name("r")).unwrap_err();
        assert!(matches!(err, LandError::Moved { .. }));
    }

    /// What mvk's landing left in the git directory: `index.lock` and its own files.
    fn leftovers(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.join(".git"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n == "index.lock" || n.starts_with(LOCK_PREFIX))
            .collect();
        names.sort();
        names
    }

    /// A landing of `main` that changes `a.txt`, removes `b.txt` and adds `c/d.txt`, prepared.
    fn three_paths() -> (tempfile::TempDir, Oid, Oid) {
        let dir = repo_with(&[("a.txt", "one\n"), ("b.txt", "two\n")]);
        let base = head(dir.path());
        let change = commit_on(dir.path(), "work", "main", "a.txt", "ONE ONE ONE\n");
        let own = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let wt = dir.path().join(format!("../{own}-three"));
        let _ = std::fs::remove_dir_all(&wt);
        git(
            dir.path(),
            &["worktree", "add", "-q", wt.to_str().unwrap(), "work"],
        );
        std::fs::create_dir_all(wt.join("c")).unwrap();
        std::fs::write(wt.join("c/d.txt"), "new file\n").unwrap();
        git(&wt, &["rm", "-q", "b.txt"]);
        git(&wt, &["add", "c/d.txt"]);
        git(&wt, &["commit", "-qm", "more"]);
        let change2 = Oid::from_str(git(&wt, &["rev-parse", "HEAD"]).trim()).unwrap();
        git(
            dir.path(),
            &["worktree", "remove", "--force", wt.to_str().unwrap()],
        );
        let _ = change;
        let Prepared::Commit { commit, .. } = prepare(
            dir.path(),
            "main",
            base,
            Strategy::Squash,
            base,
            change2,
            "m",
        )
        .unwrap() else {
            panic!()
        };
        (dir, base, commit)
    }

    #[test]
    fn a_landing_takes_and_gives_back_the_index_lock_and_leaves_a_clean_checkout() {
        let (dir, base, commit) = three_paths();
        publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap();
        assert_eq!(head(dir.path()), commit);
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        assert!(!dir.path().join("b.txt").exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c/d.txt")).unwrap(),
            "new file\n"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_lock_of_unknown_owner_refuses_the_landing_before_any_file_is_written() {
        let (dir, base, commit) = three_paths();
        std::fs::write(dir.path().join(".git/index.lock"), "").unwrap();
        let err = publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap_err();
        assert!(
            matches!(&err, LandError::IndexLocked { owner: None, lock } if lock.ends_with("index.lock")),
            "{err:?}"
        );
        assert_eq!(head(dir.path()), base);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(dir.path().join("b.txt").exists());
        assert!(!dir.path().join("c").exists(), "nothing written");
        assert_eq!(
            leftovers(dir.path()),
            ["index.lock"],
            "the lock is not mvk's to remove"
        );
        std::fs::remove_file(dir.path().join(".git/index.lock")).unwrap();
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn a_lock_another_landing_of_mvks_holds_is_named_as_its() {
        let (dir, base, commit) = three_paths();
        let other = lock_name("other-run");
        let _held = Lock::take(&dir.path().join(".git"), &other).unwrap();
        let err = publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap_err();
        assert!(
            matches!(&err, LandError::IndexLocked { owner: Some(o), .. } if *o == other),
            "{err:?}"
        );
        assert!(!dir.path().join("c").exists(), "nothing written");
        assert_eq!(leftovers(dir.path()), ["index.lock".to_string(), other]);
    }

    #[test]
    fn a_local_change_refuses_the_landing_and_gives_the_lock_back() {
        let (dir, base, commit) = three_paths();
        std::fs::write(dir.path().join("b.txt"), "mine\n").unwrap();
        let err = publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap_err();
        assert!(
            matches!(&err, LandError::Dirty { paths } if paths == &["b.txt".to_string()]),
            "{err:?}"
        );
        assert!(!dir.path().join("c").exists(), "nothing written");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\n"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    /// The landing of `commit` is whole: the branch at it, the checkout clean, nothing of the
    /// lock left in `.git`.
    fn assert_landed_clean(dir: &Path, commit: Oid) {
        assert_eq!(head(dir), commit);
        assert_eq!(git(dir, &["status", "--porcelain"]), "");
        assert_eq!(leftovers(dir), Vec::<String>::new());
    }

    /// A landing cut short under its lock with `a.txt` written whole and `c/d.txt` cut short
    /// (its first bytes), `b.txt` not yet removed: the index and the branch as before.
    fn cut_short(dir: &Path, name: &str) {
        Lock::take(&dir.join(".git"), name)
            .unwrap()
            .begin_writing()
            .unwrap();
        std::fs::write(dir.join("a.txt"), "ONE ONE ONE\n").unwrap();
        std::fs::create_dir_all(dir.join("c")).unwrap();
        std::fs::write(dir.join("c/d.txt"), "new f").unwrap();
    }

    #[test]
    fn recovery_finishes_a_landing_cut_short_under_its_lock() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_eq!(head(dir.path()), commit);
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c/d.txt")).unwrap(),
            "new file\n"
        );
        assert!(!dir.path().join("b.txt").exists());
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        // Done once: asked again, there is nothing of it left to recover.
        let again = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(again, Recovery::NotHeld);
        assert_eq!(head(dir.path()), commit);
    }

    #[test]
    fn recovery_undoes_a_landing_whose_paths_hold_a_persons_change_and_keeps_it() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        std::fs::write(dir.path().join("b.txt"), "a person's\n").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(
            done,
            Recovery::Undone {
                foreign: vec!["b.txt".into()]
            }
        );
        assert_eq!(head(dir.path()), base);
        assert_eq!(
            git(dir.path(), &["status", "--porcelain"]),
            " M b.txt\n",
            "only the person's change is left"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "a person's\n"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn recovery_undoes_a_landing_whose_branch_moved_elsewhere() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        // The index written too, then someone moves `main` (a push: no index lock needed).
        let repo = Repository::open(dir.path()).unwrap();
        let held = Lock::at(repo.path(), &name);
        let new = tree_of(&repo, dir.path(), commit).unwrap();
        let old = tree_of(&repo, dir.path(), base).unwrap();
        let paths = changed_paths(&repo, dir.path(), &old, &new).unwrap();
        put(&repo, dir.path(), &held, &new, &paths, &paths).unwrap();
        let other = commit_on(dir.path(), "other", "main", "b.txt", "TWO\n");
        git(
            dir.path(),
            &["update-ref", "refs/heads/main", &other.to_string()],
        );
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Undone { foreign: vec![] });
        assert_eq!(head(dir.path()), other, "not mvk's to move back");
        // The checkout is the old tip's again, so the person sees exactly what the push did.
        assert_eq!(
            git(dir.path(), &["diff", "--stat", "HEAD", "--", "a.txt", "c"]),
            ""
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "one\n"
        );
        assert!(!dir.path().join("c").exists());
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn recovery_gives_back_the_lock_of_a_landing_that_moved_its_branch() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        let repo = Repository::open(dir.path()).unwrap();
        let held = Lock::at(repo.path(), &name);
        let new = tree_of(&repo, dir.path(), commit).unwrap();
        let old = tree_of(&repo, dir.path(), base).unwrap();
        let paths = changed_paths(&repo, dir.path(), &old, &new).unwrap();
        put(&repo, dir.path(), &held, &new, &paths, &paths).unwrap();
        move_branch(&repo, dir.path(), "main", (base, commit), "land").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Released);
        assert_landed_clean(dir.path(), commit);
    }

    #[test]
    fn recovery_leaves_a_lock_that_is_not_the_landings_and_removes_its_own_file() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        // Killed between making its file and linking it; someone else's lock meanwhile.
        std::fs::write(dir.path().join(".git").join(&name), "").unwrap();
        std::fs::write(dir.path().join(".git/index.lock"), "").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::NotHeld);
        assert_eq!(leftovers(dir.path()), ["index.lock"]);
        assert_eq!(head(dir.path()), base);
    }

    #[test]
    fn recovery_does_not_take_the_lock_again_for_a_landing_that_never_wrote() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        // Refused cleanly and killed as it gave the lock back: its own file left, no lock.
        Lock::take(&dir.path().join(".git"), &name)
            .unwrap()
            .unlock()
            .unwrap();
        // The person's later work at the landing's paths: `a.txt` emptied, `c/d.txt` begun
        // empty: each one a beginning of mvk's content, and none of it mvk's.
        std::fs::write(dir.path().join("a.txt"), "").unwrap();
        std::fs::create_dir_all(dir.path().join("c")).unwrap();
        std::fs::write(dir.path().join("c/d.txt"), "").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::NotHeld);
        assert_eq!(head(dir.path()), base);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            ""
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c/d.txt")).unwrap(),
            ""
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "two\n"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn recovery_stops_while_someone_holds_the_lock_it_would_take_again_and_retries_later() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        // The person removes mvk's lock, and a git process takes it.
        std::fs::remove_file(dir.path().join(".git/index.lock")).unwrap();
        std::fs::write(dir.path().join(".git/index.lock"), "git's").unwrap();
        let err = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap_err();
        assert!(
            matches!(&err, LandError::IndexLocked { owner: None, .. }),
            "{err:?}"
        );
        assert_eq!(
            leftovers(dir.path()),
            [
                "index.lock".to_string(),
                name.clone(),
                format!("{name}.writing")
            ]
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".git/index.lock")).unwrap(),
            "git's"
        );
        // Once git is done, a later resume finishes the landing: mvk's files are still its own.
        std::fs::remove_file(dir.path().join(".git/index.lock")).unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_landed_clean(dir.path(), commit);
    }

    #[test]
    fn a_split_index_refuses_the_landing_before_any_file_is_written_and_gives_the_lock_back() {
        let (dir, base, commit) = three_paths();
        git(dir.path(), &["update-index", "--split-index"]);
        let err = publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap_err();
        assert!(
            matches!(&err, LandError::UnreadableIndex { advice, .. } if advice.contains("--no-split-index")),
            "{err:?}"
        );
        assert_eq!(head(dir.path()), base);
        assert!(!dir.path().join("c").exists(), "nothing written");
        assert!(dir.path().join("b.txt").exists());
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        // As the error says: then it lands.
        git(dir.path(), &["update-index", "--no-split-index"]);
        publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap();
        assert_eq!(head(dir.path()), commit);
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn recovery_gives_back_a_lock_whose_landing_wrote_nothing_even_over_a_split_index() {
        let (dir, base, commit) = three_paths();
        git(dir.path(), &["update-index", "--split-index"]);
        // As an mvk that checked out before reading the index left it: the lock, no file.
        let name = lock_name("r");
        Lock::take(&dir.path().join(".git"), &name).unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Untouched);
        assert_eq!(head(dir.path()), base);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
    }

    #[test]
    fn recovery_gives_back_the_lock_over_a_split_index_whatever_a_person_changed() {
        let (dir, base, commit) = three_paths();
        git(dir.path(), &["update-index", "--split-index"]);
        let name = lock_name("r");
        Lock::take(&dir.path().join(".git"), &name).unwrap();
        // A person's edit at a landing's path: not mvk's (it never wrote over this index).
        std::fs::write(dir.path().join("b.txt"), "mine\n").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Untouched);
        assert_eq!(head(dir.path()), base);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
            "mine\n"
        );
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), " M b.txt\n");
        // The person can now turn the split index off.
        git(dir.path(), &["update-index", "--no-split-index"]);
    }

    /// A change a person staged at `b.txt` (the landing's to remove), the file kept as it was.
    fn stage_a_change_at_b(dir: &Path) {
        std::fs::write(dir.join("b.txt"), "staged\n").unwrap();
        git(dir, &["add", "b.txt"]);
        std::fs::write(dir.join("b.txt"), "two\n").unwrap();
    }

    #[test]
    fn recovery_keeps_a_change_a_person_staged_and_undoes_the_rest_of_the_landing() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        // The person removes the lock and stages a change at a landing's path.
        std::fs::remove_file(dir.path().join(".git/index.lock")).unwrap();
        stage_a_change_at_b(dir.path());
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(
            done,
            Recovery::Undone {
                foreign: vec!["b.txt".into()]
            }
        );
        assert_eq!(head(dir.path()), base);
        assert_eq!(git(dir.path(), &["show", ":b.txt"]), "staged\n", "kept");
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "MM b.txt\n");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn recovery_gives_back_the_lock_of_a_landing_that_wrote_nothing_over_a_staged_change() {
        let (dir, base, commit) = three_paths();
        stage_a_change_at_b(dir.path());
        // Killed with the lock taken, before the check that would have refused the landing.
        let name = lock_name("r");
        Lock::take(&dir.path().join(".git"), &name).unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Untouched);
        assert_eq!(head(dir.path()), base);
        assert_eq!(git(dir.path(), &["show", ":b.txt"]), "staged\n", "kept");
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "MM b.txt\n");
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn a_staged_change_at_a_landings_path_refuses_the_landing_before_any_file_is_written() {
        let (dir, base, commit) = three_paths();
        // Staged, then the file put back as HEAD has it: only the index holds the change.
        std::fs::write(dir.path().join("a.txt"), "staged\n").unwrap();
        git(dir.path(), &["add", "a.txt"]);
        std::fs::write(dir.path().join("a.txt"), "one\n").unwrap();
        // And a removal staged, the file kept.
        git(dir.path(), &["rm", "-q", "--cached", "b.txt"]);
        let err = publish(dir.path(), "main", base, commit, "land", &lock_name("r")).unwrap_err();
        assert!(
            matches!(&err, LandError::Dirty { paths } if paths == &["a.txt".to_string(), "b.txt".to_string()]),
            "{err:?}"
        );
        assert_eq!(head(dir.path()), base);
        assert!(!dir.path().join("c").exists(), "nothing written");
        assert_eq!(git(dir.path(), &["show", ":a.txt"]), "staged\n", "kept");
        assert_eq!(
            git(dir.path(), &["status", "--porcelain"]),
            "MM a.txt\nD  b.txt\n?? b.txt\n"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn recovery_takes_the_lock_again_when_a_person_removed_it_and_finishes_the_landing() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        // `git commit` says to remove the lock; the person does.
        std::fs::remove_file(dir.path().join(".git/index.lock")).unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_landed_clean(dir.path(), commit);
    }

    // Guards (review r10d, 1) against an index that became unreadable after a person removed
    // the lock of a landing that had written files: the record stays, so that once the
    // feature is off the next resume finishes the landing rather than leave mvk's files as if
    // they were the person's.
    #[test]
    fn a_retaken_lock_over_an_index_made_unreadable_keeps_the_landings_record() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        std::fs::remove_file(dir.path().join(".git/index.lock")).unwrap();
        git(dir.path(), &["update-index", "--split-index"]);
        let err = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap_err();
        assert!(matches!(err, LandError::UnreadableIndex { .. }), "{err}");
        assert!(
            !dir.path().join(".git/index.lock").exists(),
            "the lock is given back"
        );
        git(dir.path(), &["update-index", "--no-split-index"]);
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_landed_clean(dir.path(), commit);
    }

    // Guards against a kill inside the branch's move (crash campaign, seed 202218917, trial
    // 199): libgit2's `refs/heads/main.lock`, holding the commit the landing moves main to, is
    // mvk's and removed; one holding another commit stays, and the landing is not finished.
    #[test]
    fn recovery_removes_its_own_half_written_branch_lock_and_no_other() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        let ref_lock = dir.path().join(".git/refs/heads/main.lock");
        std::fs::write(&ref_lock, &commit.to_string()[..12]).unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_eq!(head(dir.path()), commit);
        assert!(!ref_lock.exists());
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());

        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        let ref_lock = dir.path().join(".git/refs/heads/main.lock");
        std::fs::write(&ref_lock, format!("{base}\n")).unwrap();
        let other = recover(dir.path(), "main", (base, commit), &name, "resume");
        assert!(!matches!(other, Ok(Recovery::Finished)), "{other:?}");
        assert!(ref_lock.exists(), "another's lock stays");
        assert_eq!(head(dir.path()), base);
    }

    // Guards against a kill while libgit2 wrote the staged index (crash campaign, seed
    // 202218917, trial 11): its `.lock` beside the landing's staged file failed the next write.
    #[test]
    fn recovery_is_not_stopped_by_the_lock_of_its_own_staged_index() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        std::fs::write(dir.path().join(format!(".git/{name}.index.lock")), "").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_eq!(head(dir.path()), commit);
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    // Guards (review r10d, 3) against a person's edit made while a landing killed before its
    // first write still held the lock being taken for mvk's half-written work.
    #[test]
    fn a_held_lock_without_the_writing_mark_leaves_a_persons_edit_alone() {
        let (dir, base, commit) = three_paths();
        let name = lock_name("r");
        Lock::take(&dir.path().join(".git"), &name).unwrap();
        // A prefix of the new content: it would pass for mvk's file cut short.
        std::fs::create_dir_all(dir.path().join("c")).unwrap();
        std::fs::write(dir.path().join("c/d.txt"), "new f").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Untouched);
        assert_eq!(head(dir.path()), base);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c/d.txt")).unwrap(),
            "new f"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn recovery_finishes_a_landing_cut_short_with_its_line_endings_converted() {
        let (dir, base, commit) = three_paths();
        git(dir.path(), &["config", "core.autocrlf", "true"]);
        let name = lock_name("r");
        cut_short(dir.path(), &name);
        // As checkout writes them under `core.autocrlf`: CRLF, `c/d.txt` cut short mid-line-end.
        std::fs::write(dir.path().join("a.txt"), "ONE ONE ONE\r\n").unwrap();
        std::fs::write(dir.path().join("c/d.txt"), "new file\r").unwrap();
        let done = recover(dir.path(), "main", (base, commit), &name, "resume").unwrap();
        assert_eq!(done, Recovery::Finished);
        assert_eq!(head(dir.path()), commit);
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("c/d.txt")).unwrap(),
            "new file\r\n"
        );
        assert_eq!(leftovers(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn giving_the_lock_back_leaves_a_lock_git_took_after_the_check() {
        let (dir, _, _) = three_paths();
        let name = lock_name("r");
        let held = Lock::take(&dir.path().join(".git"), &name).unwrap();
        assert!(held.held());
        // Between the check and the removal, ours goes and git takes the lock.
        std::fs::remove_file(&held.lock).unwrap();
        std::fs::write(&held.lock, "git's").unwrap();
        held.unlock().unwrap();
        assert_eq!(std::fs::read_to_string(&held.lock).unwrap(), "git's");
        held.release().unwrap();
        assert_eq!(leftovers(dir.path()), ["index.lock"]);
    }
}
