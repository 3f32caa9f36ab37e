//! An accepted attempt in (its base, its head, the target branch and the strategy); out comes the
//! commit that lands it on the target — [`prepare`]d without touching any ref or file — and then
//! [`publish`]ed: the main checkout updated (when it has the target checked out) and the branch
//! moved with a compare-and-swap, so a target that moved meanwhile is never overwritten.
//!
//! Preparing first lets the caller gate the merged result and record its intent in the ledger
//! before anything a person can see changes.

use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{CheckoutNotificationType, ErrorCode, MergeOptions, Oid, Repository};

use crate::ir::Strategy;

#[derive(Debug, thiserror::Error)]
pub enum LandError {
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
    /// Another git process holds the main checkout's index, or one died holding it.
    #[error("the main checkout's index is locked (`{}` exists): another git process is running, or one crashed", lock.display())]
    IndexLocked { lock: PathBuf },
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
pub fn current_branch(repo_root: &Path) -> Result<String, LandError> {
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
pub fn branch_tip(repo_root: &Path, branch: &str) -> Result<Oid, LandError> {
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
pub enum Prepared {
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
pub fn prepare(
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
            let mut paths: Vec<String> = index
                .conflicts()
                .map_err(git_err("list merge conflicts", repo_root))?
                .flatten()
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .collect();
            paths.sort();
            paths.dedup();
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
        Strategy::Squash | Strategy::Ff => vec![&tip_commit],
    };
    let commit = repo
        .commit(None, &sig, &sig, message, &tree, &parents)
        .map_err(git_err("write the landing commit", repo_root))?;
    Ok(Prepared::Commit { tip, commit, moved })
}

/// Moves `branch` from `tip` to `commit`. When the main checkout has `branch` checked out, its
/// files and index are brought to `commit` first with a safe checkout: a local change that
/// would be overwritten refuses the landing ([`LandError::Dirty`]) and nothing moves.
pub fn publish(
    repo_root: &Path,
    branch: &str,
    tip: Oid,
    commit: Oid,
    reflog: &str,
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
    let checked_out = !repo.is_bare()
        && repo
            .find_reference("HEAD")
            .ok()
            .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
            .is_some_and(|t| t == full);
    if checked_out {
        let target = repo
            .find_commit(commit)
            .map_err(git_err(format!("read commit `{commit}`"), repo_root))?;
        let mut conflicts = Vec::new();
        let result = {
            let mut opts = CheckoutBuilder::new();
            // Safe: only files that still match HEAD are rewritten; the baseline is HEAD's tree.
            opts.safe();
            // An ignored file (a user's `.env`, mvk's `.mvk/`) is never overwritten by a landing.
            opts.overwrite_ignored(false);
            opts.notify_on(CheckoutNotificationType::CONFLICT);
            opts.notify(|_, path, _, _, _| {
                if let Some(p) = path {
                    conflicts.push(p.display().to_string());
                }
                true
            });
            repo.checkout_tree(target.as_object(), Some(&mut opts))
        };
        match result {
            Ok(()) => {}
            Err(e) if e.code() == ErrorCode::Conflict || !conflicts.is_empty() => {
                conflicts.sort();
                conflicts.dedup();
                return Err(LandError::Dirty { paths: conflicts });
            }
            Err(e) if e.code() == ErrorCode::Locked => {
                return Err(LandError::IndexLocked {
                    lock: repo.path().join("index.lock"),
                });
            }
            Err(e) => return Err(git_err("update the main checkout", repo_root)(e)),
        }
    }
    crate::run::failpoint("merge-checkout");
    match repo.reference_matching(&full, commit, true, tip, reflog) {
        Ok(_) => Ok(()),
        Err(e) if e.code() == ErrorCode::Modified || e.code() == ErrorCode::Locked => {
            Err(LandError::Moved {
                branch: branch.to_string(),
            })
        }
        Err(e) => Err(git_err(format!("move branch `{branch}`"), repo_root)(e)),
    }
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
        publish(dir.path(), "main", tip, commit, "land").unwrap();
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
        publish(dir.path(), "main", other, commit, "land").unwrap();
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
        let err = publish(dir.path(), "main", tip, commit, "land").unwrap_err();
        assert!(matches!(&err, LandError::Dirty { paths } if paths == &["a.txt".to_string()]));
        assert_eq!(head(dir.path()), base);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
            "mine\n"
        );
        let err = publish(dir.path(), "main", change, commit, "land").unwrap_err();
        assert!(matches!(err, LandError::Moved { .. }));
    }
}
