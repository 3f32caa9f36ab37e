//! A lease in; out, the commit that records everything its agent left in the worktree
//! ([`capture`]), on the lease's branch, or the commit its HEAD points at ([`head_of`]); and the
//! signature mvk commits under.

use git2::{ErrorCode, IndexAddOption, Oid, Repository, Signature};

use super::lease::Lease;
use super::stage::stage_in_place;
use super::{WorktreeError, git_err};

/// Name and email used for capture commits when the repository configuration has no user.
const FALLBACK_NAME: &str = "mvk";
const FALLBACK_EMAIL: &str = "mvk@localhost";

/// Commit id the lease's worktree HEAD points at now.
#[cfg(test)]
pub(crate) fn head_of(lease: &Lease) -> Result<Oid, WorktreeError> {
    let repo = lease.open()?;
    let head = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(git_err("read HEAD", &lease.path))?;
    Ok(head.id())
}

/// Records the worktree's whole state as one commit on the lease's branch and returns it.
///
/// Commits the agent made stay as history (the capture commit's parent is whatever HEAD
/// points at, on any branch or detached). Modified, deleted and untracked files are included;
/// ignored files are not (build output such as `target/`). When nothing is uncommitted no
/// commit is made and HEAD's commit is returned. Either way the lease's branch is forced to
/// the result and checked out.
pub(crate) fn capture(lease: &Lease, message: &str) -> Result<Oid, WorktreeError> {
    let path = &lease.path;
    let repo = lease.open()?;
    let head = match repo.head() {
        Ok(head) => Some(head.peel_to_commit().map_err(git_err("read HEAD", path))?),
        Err(e) if e.code() == ErrorCode::UnbornBranch => None,
        Err(e) => return Err(git_err("read HEAD", path)(e)),
    };
    // Staged from mvk's own copy of the index (see `Trusted`), never the agent's; without
    // one, from nothing, every file hashed.
    let restored = lease.trusted.restore(repo.path())?;
    lease.trusted.forget()?;
    // The index the reset wrote, held in memory by the reset's own repository (the copy just
    // put back holds the same), or, from a repository just opened, read from disk after the
    // restore by this first call.
    let mut index = repo.index().map_err(git_err("open index", path))?;
    if !restored {
        index.clear().map_err(git_err("clear index", path))?;
    }
    // Staged by stat data against mvk's own index, the worktree swept in the same walk; or,
    // where that cannot judge it, by libgit2.
    let swept = restored && stage_in_place(&repo, &lease.common, path, &mut index)?;
    if !swept {
        index
            .add_all(["*"], IndexAddOption::DEFAULT, None)
            .map_err(git_err("stage changes", path))?;
        // `add_all` walks the index against the worktree once and applies every difference:
        // a file deleted from the worktree leaves the index too (libgit2 >= 1.0), so no second
        // walk with `update_all` (a unit test holds this).
    }
    index.write().map_err(git_err("write index", path))?;
    lease.trusted.keep(repo.path())?;
    let tree_id = index.write_tree().map_err(git_err("write tree", path))?;
    missing_from_base(&repo, lease, tree_id)?;
    let final_id = match &head {
        Some(commit) if commit.tree_id() == tree_id => commit.id(),
        _ => {
            let tree = repo
                .find_tree(tree_id)
                .map_err(git_err("read written tree", path))?;
            let sig = signature(&repo).map_err(git_err("make commit signature", path))?;
            let parents: Vec<&git2::Commit<'_>> = head.iter().collect();
            repo.commit(None, &sig, &sig, message, &tree, &parents)
                .map_err(git_err("commit changes", path))?
        }
    };
    let branch_ref = format!("refs/heads/{}", lease.branch);
    // Detached first: libgit2 refuses to check out a branch another worktree's HEAD names
    // when HEAD is on a branch, and a neighbour's agent may have written its HEAD so.
    repo.set_head_detached(final_id)
        .map_err(git_err("detach HEAD", path))?;
    repo.reference(&branch_ref, final_id, true, "mvk: capture attempt")
        .map_err(git_err(format!("move branch `{}`", lease.branch), path))?;
    repo.set_head(&branch_ref).map_err(git_err(
        format!("check out branch `{}`", lease.branch),
        path,
    ))?;
    if swept && let Ok(mut at) = lease.swept.lock() {
        *at = Some(final_id);
    }
    Ok(final_id)
}

/// Refuses a tree written from the index that names an object the repository lacks, among the
/// files that differ from the lease's base (mvk's own commit, whole), before any commit is made
/// of it. Trees are written without libgit2's per-entry check (see the CLI), and the index is
/// the agent's: an entry it forged with `git update-index --cacheinfo` for a file whose bytes
/// hash the same is kept by `add_all` without its blob ever being written, and the gates'
/// checkout, finding the file in place, would never read it either. A tree refused here is
/// left unreferenced, for git's garbage collection.
fn missing_from_base(repo: &Repository, lease: &Lease, tree: Oid) -> Result<(), WorktreeError> {
    let path = &lease.path;
    let odb = repo.odb().map_err(git_err("open object database", path))?;
    let base = repo
        .find_commit(lease.base)
        .and_then(|c| c.tree())
        .map_err(git_err(format!("read base `{}`", lease.base), path))?;
    let tree = repo
        .find_tree(tree)
        .map_err(git_err("read written tree", path))?;
    let changed = crate::run::git::treediff::changed(repo, &base, &tree)
        .map_err(git_err("compare the index with the base", path))?;
    for c in changed {
        // A submodule's commit lives in another repository.
        let Some((id, mode)) = c.new else { continue };
        if mode == 0o160000 {
            continue;
        }
        if !odb.exists(id) {
            return Err(WorktreeError::MissingObject {
                path: path.clone(),
                file: String::from_utf8_lossy(&c.path).into_owned(),
                what: "blob",
                id,
            });
        }
    }
    Ok(())
}

/// The configured user if the repository configuration (any level) has one, else mvk's own.
pub(crate) fn signature(repo: &Repository) -> Result<Signature<'static>, git2::Error> {
    match repo
        .config()
        .ok()
        .and_then(|config| signature_from(&config))
    {
        Some(sig) => Ok(sig),
        None => Signature::now(FALLBACK_NAME, FALLBACK_EMAIL),
    }
}

fn signature_from(config: &git2::Config) -> Option<Signature<'static>> {
    let name = config.get_string("user.name").ok()?;
    let email = config.get_string("user.email").ok()?;
    Signature::now(&name, &email).ok()
}
