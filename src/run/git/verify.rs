//! The oracle check on its own: a compiled program, a repository and two revisions in (the head
//! may be the checkout itself, uncommitted work included); out, per task, whether the change
//! touched its sealed paths (`untouched`, `changed` with each breach, or `unknown` when the seal
//! cannot certify it), and the verdict over all of them. `mvk verify` and the MCP server's
//! `verify` tool both call [`verify`].

use std::path::Path;

use git2::{Oid, Repository, Status, StatusOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ir::Program;
use crate::run::git::seal::{self, Breach, BreachKind, Seal, SealError, SealVerdict};

/// The schema name of [`Verification`].
pub(crate) const SCHEMA: &str = "mvk.verify.v1";

/// Why the check itself could not be made (not a verdict).
#[derive(Debug, thiserror::Error)]
pub(crate) enum VerifyError {
    #[error("cannot open the repository `{}`", path.display())]
    Repository {
        path: std::path::PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("`{rev}` names no commit in this repository: {}", source.message())]
    Revision { rev: String, source: git2::Error },
    #[error("`{file}` has no task `{task}`; it has: {tasks}")]
    NoSuchTask {
        file: String,
        task: String,
        tasks: String,
    },
    #[error("cannot read the checkout's uncommitted changes")]
    Status(#[source] git2::Error),
    #[error("cannot write the base commit's ignore rules to `{}`", path.display())]
    Scratch {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Seal(#[from] SealError),
}

/// A verdict of the oracle check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// No sealed path was touched.
    Untouched,
    /// A sealed path was added, deleted, modified, renamed, changed mode or became a symlink.
    Changed,
    /// The seal cannot certify the change (it seals nothing, or history was rewritten):
    /// never a pass.
    Unknown,
}

impl Verdict {
    /// The contract's exit code of `mvk verify`: 0, 1, 2.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Verdict::Untouched => 0,
            Verdict::Changed => 1,
            Verdict::Unknown => 2,
        }
    }

    fn worst(self, other: Verdict) -> Verdict {
        // A definite breach outranks an uncertain one, as in the contract's order 1 > 2 > 0.
        let rank = |v: Verdict| match v {
            Verdict::Changed => 2,
            Verdict::Unknown => 1,
            Verdict::Untouched => 0,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// The oracle check of one task's seal.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct TaskVerification {
    pub(crate) task: String,
    /// The task's sealed path patterns.
    pub(crate) seal: Vec<String>,
    pub(crate) verdict: Verdict,
    /// Each way the change touched the seal (`changed`), or the breach that makes it `unknown`.
    pub(crate) breaches: Vec<Breach>,
    /// One line: why the verdict is what it is.
    pub(crate) reason: String,
}

/// The oracle check of a change against a program's seals.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Verification {
    /// `mvk.verify.v1`.
    pub(crate) schema: String,
    /// The worst verdict over the tasks: `changed`, then `unknown`, then `untouched`.
    pub(crate) verdict: Verdict,
    /// The base commit (full id).
    pub(crate) base: String,
    /// The head commit (full id).
    pub(crate) head: String,
    /// Whether the checkout's uncommitted work (modified, deleted and untracked files, not
    /// ignored ones) was checked too: when no head revision was given.
    pub(crate) working_tree: bool,
    pub(crate) tasks: Vec<TaskVerification>,
}

/// Checks the change from `base` to `head` (or to the checkout of `repo_root` with its
/// uncommitted work, when `head` is `None`) against the seal of each task of `program` (or of
/// `task` alone). `file` names the program in messages.
pub(crate) fn verify(
    repo_root: &Path,
    program: &Program,
    file: &str,
    task: Option<&str>,
    base: &str,
    head: Option<&str>,
) -> Result<Verification, VerifyError> {
    let repo = Repository::open(repo_root).map_err(|source| VerifyError::Repository {
        path: repo_root.to_path_buf(),
        source,
    })?;
    let base_id = commit(&repo, base)?;
    let head_id = commit(&repo, head.unwrap_or("HEAD"))?;
    let tasks: Vec<&crate::ir::Task> = match task {
        None => program.tasks.iter().collect(),
        Some(name) => {
            let found: Vec<_> = program.tasks.iter().filter(|t| t.name == name).collect();
            if found.is_empty() {
                return Err(VerifyError::NoSuchTask {
                    file: file.to_string(),
                    task: name.to_string(),
                    tasks: program
                        .tasks
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            found
        }
    };
    // As in an attempt: mvk's own directory is sealed in every loop. And the loop's own files:
    // the program was compiled from the checkout being judged, so an edit that loosened the
    // seal must itself be a breach, not the rule it is judged by.
    let own = own_sources(&repo, program);
    let seals = tasks
        .iter()
        .map(|t| {
            let mut patterns = t.seal.clone();
            patterns.push(".mvk".into());
            patterns.extend(own.iter().cloned());
            Seal::new(&patterns)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let dirty = if head.is_none() {
        let mut dirty = uncommitted(&repo)?;
        let is_sealed = |p: &str| seals.iter().any(|s| s.is_sealed(p));
        let mut hidden = hidden_edits(&repo, &is_sealed)?;
        hidden.extend(ignored_new(&repo, base_id, &is_sealed)?);
        dirty.extend(
            hidden
                .into_iter()
                .filter(|b| !dirty.contains(b))
                .collect::<Vec<_>>(),
        );
        dirty
    } else {
        Vec::new()
    };
    let mut verdict = Verdict::Untouched;
    let mut out = Vec::new();
    for (t, sealed) in tasks.into_iter().zip(seals) {
        let checked = if t.seal.is_empty() {
            TaskVerification {
                task: t.name.clone(),
                seal: Vec::new(),
                verdict: Verdict::Unknown,
                breaches: Vec::new(),
                reason: "the task seals no path, so nothing is its oracle".into(),
            }
        } else {
            let mut breaches = match seal::check(&repo, base_id, head_id, &sealed)? {
                SealVerdict::Untouched => Vec::new(),
                SealVerdict::Breached(b) => b,
            };
            breaches.extend(
                dirty
                    .iter()
                    .filter(|b| sealed.is_sealed(&b.path))
                    .filter(|b| !breaches.contains(b))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            let mut checked = judge(t.name.clone(), sealed.patterns().to_vec(), breaches);
            if checked.verdict == Verdict::Untouched
                && let Some(empty) = guards_nothing(&repo, base_id, t)?
            {
                checked.verdict = Verdict::Unknown;
                checked.reason = format!(
                    "the seal's `{empty}` matches no file at the base, so it guards nothing (is the path right?)"
                );
            }
            checked
        };
        verdict = verdict.worst(checked.verdict);
        out.push(checked);
    }
    Ok(Verification {
        schema: SCHEMA.into(),
        verdict,
        base: base_id.to_string(),
        head: head_id.to_string(),
        working_tree: head.is_none(),
        tasks: out,
    })
}

/// The first of `task`'s own seal patterns that covers no file of commit `base` (the pinned
/// lessons file aside: it may not exist yet).
fn guards_nothing(
    repo: &Repository,
    base: Oid,
    task: &crate::ir::Task,
) -> Result<Option<String>, VerifyError> {
    let tree = repo
        .find_commit(base)
        .and_then(|c| c.tree())
        .map_err(|source| VerifyError::Revision {
            rev: base.to_string(),
            source,
        })?;
    let mut files = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() != Some(git2::ObjectType::Tree) {
            files.push(format!(
                "{dir}{}",
                String::from_utf8_lossy(entry.name_bytes())
            ));
        }
        git2::TreeWalkResult::Ok
    })
    .map_err(|source| VerifyError::Revision {
        rev: base.to_string(),
        source,
    })?;
    for pattern in &task.seal {
        if task.lessons.as_deref() == Some(pattern.as_str()) {
            continue;
        }
        let set = Seal::new(std::slice::from_ref(pattern))?;
        if !files.iter().any(|f| set.is_sealed(f)) {
            return Ok(Some(pattern.clone()));
        }
    }
    Ok(None)
}

fn judge(task: String, seal: Vec<String>, breaches: Vec<Breach>) -> TaskVerification {
    let rewritten = breaches
        .iter()
        .any(|b| b.kind == BreachKind::HistoryRewritten);
    let touched = breaches
        .iter()
        .filter(|b| b.kind != BreachKind::HistoryRewritten)
        .count();
    let (verdict, reason) = if touched > 0 {
        let first = breaches
            .iter()
            .find(|b| b.kind != BreachKind::HistoryRewritten)
            .map(ToString::to_string)
            .unwrap_or_default();
        (
            Verdict::Changed,
            format!(
                "{touched} change{} to sealed paths; first: {first}",
                if touched == 1 { "" } else { "s" }
            ),
        )
    } else if rewritten {
        (
            Verdict::Unknown,
            "the head does not descend from the base, so what the change did to the seal cannot be told".into(),
        )
    } else {
        (Verdict::Untouched, "no sealed path was touched".into())
    };
    TaskVerification {
        task,
        seal,
        verdict,
        breaches,
        reason,
    }
}

fn commit(repo: &Repository, rev: &str) -> Result<Oid, VerifyError> {
    let revision = |source| VerifyError::Revision {
        rev: rev.to_string(),
        source,
    };
    let object = repo.revparse_single(rev).map_err(revision)?;
    let commit = object.peel_to_commit().map_err(revision)?;
    Ok(commit.id())
}

/// What the checkout holds beyond its HEAD commit, as breaches (without a commit) of the paths
/// it touches; which of them are sealed is decided per task.
fn uncommitted(repo: &Repository) -> Result<Vec<Breach>, VerifyError> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .renames_head_to_index(true)
        .renames_index_to_workdir(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(VerifyError::Status)?;
    let mut out = Vec::new();
    for entry in statuses.iter() {
        let status = entry.status();
        let renamed = entry
            .head_to_index()
            .filter(|_| status.contains(Status::INDEX_RENAMED))
            .or_else(|| {
                entry
                    .index_to_workdir()
                    .filter(|_| status.contains(Status::WT_RENAMED))
            });
        if let Some(delta) = renamed {
            let from = path_of(delta.old_file().path());
            let to = path_of(delta.new_file().path());
            for path in [&from, &to] {
                out.push(Breach {
                    path: path.clone(),
                    kind: BreachKind::Renamed {
                        from: from.clone(),
                        to: to.clone(),
                    },
                    commit: None,
                });
            }
            continue;
        }
        let Ok(path) = entry.path() else { continue };
        // A path left conflicted (index stages 1–3, no stage 0) carries no other flag, but its
        // content is no longer HEAD's: changed, never untouched.
        let kind = if status.contains(Status::CONFLICTED) {
            BreachKind::Modified
        } else if status.intersects(Status::WT_NEW | Status::INDEX_NEW) {
            BreachKind::Added
        } else if status.intersects(Status::WT_DELETED | Status::INDEX_DELETED) {
            BreachKind::Deleted
        } else if status.intersects(Status::WT_TYPECHANGE | Status::INDEX_TYPECHANGE) {
            BreachKind::SymlinkReplaced
        } else if status.contains(Status::WT_MODIFIED)
            && !status.contains(Status::INDEX_MODIFIED)
            && filtered(repo, path)
            && index_id(repo, path).is_some_and(|id| git_hash(repo, path) == Some(id))
        {
            // libgit2 hashed the file unfiltered; through its filter it is the index's blob.
            continue;
        } else if status.intersects(Status::WT_MODIFIED | Status::INDEX_MODIFIED) {
            BreachKind::Modified
        } else {
            continue;
        };
        out.push(Breach {
            path: path.to_string(),
            kind,
            commit: None,
        });
    }
    Ok(out)
}

/// Index entry flags that make git take a file in the checkout as unmodified without reading it:
/// `assume-unchanged` (in `flags`) and `skip-worktree` (in `flags_extended`).
const ASSUME_VALID: u16 = 0x8000;
const SKIP_WORKTREE: u16 = 0x4000;

/// Sealed files whose content in the checkout differs from the index, found by reading them.
/// `git update-index --assume-unchanged` or `--skip-worktree` make git's status (and libgit2's)
/// report a file unmodified whatever it holds, and a restored mtime and size fool the stat
/// cache, so for sealed paths neither is trusted: a copy of the index (never written back) with
/// those flags and the stat data cleared is compared with the checkout, which hashes each file.
fn hidden_edits(
    repo: &Repository,
    sealed: &dyn Fn(&str) -> bool,
) -> Result<Vec<Breach>, VerifyError> {
    let mut index = git2::Index::open(&repo.path().join("index")).map_err(VerifyError::Status)?;
    let entries: Vec<git2::IndexEntry> = index
        .iter()
        // Stage 0 only: a conflicted path is reported by the status already.
        .filter(|e| (e.flags >> 12) & 0x3 == 0)
        .filter(|e| sealed(&String::from_utf8_lossy(&e.path)))
        .collect();
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    for mut e in entries {
        e.flags &= !ASSUME_VALID;
        e.flags_extended &= !SKIP_WORKTREE;
        e.ctime = git2::IndexTime::new(0, 0);
        e.mtime = git2::IndexTime::new(0, 0);
        e.file_size = 0;
        index.add(&e).map_err(VerifyError::Status)?;
    }
    let mut opts = git2::DiffOptions::new();
    opts.include_typechange(true);
    let diff = repo
        .diff_index_to_workdir(Some(&index), Some(&mut opts))
        .map_err(VerifyError::Status)?;
    let mut out = Vec::new();
    for delta in diff.deltas() {
        let path = path_of(delta.old_file().path());
        if !sealed(&path) {
            continue;
        }
        let (old, new) = (delta.old_file(), delta.new_file());
        // libgit2 hashed the file as it is; git stores what a configured filter makes of it.
        let new_id = match delta.status() {
            git2::Delta::Modified if filtered(repo, &path) => {
                git_hash(repo, &path).unwrap_or_else(|| new.id())
            }
            _ => new.id(),
        };
        let kind = match delta.status() {
            git2::Delta::Deleted => BreachKind::Deleted,
            git2::Delta::Typechange => BreachKind::SymlinkReplaced,
            git2::Delta::Modified
                if u32::from(old.mode()) == u32::from(new.mode()) && new_id == old.id() =>
            {
                continue;
            }
            git2::Delta::Modified
                if u32::from(old.mode()) != u32::from(new.mode())
                    && (new_id == old.id() || new_id.is_zero()) =>
            {
                BreachKind::ModeChanged {
                    old: u32::from(old.mode()),
                    new: u32::from(new.mode()),
                }
            }
            git2::Delta::Modified => BreachKind::Modified,
            _ => continue,
        };
        out.push(Breach {
            path,
            kind,
            commit: None,
        });
    }
    Ok(out)
}

/// New files in sealed paths that git ignores although the base commit's own `.gitignore`
/// files do not: `.git/info/exclude`, a global excludes file or an edited `.gitignore` would
/// otherwise hide a file added to the oracle. (mvk's own `.mvk/`, excluded by mvk, is not
/// judged here.)
fn ignored_new(
    repo: &Repository,
    base: Oid,
    sealed: &dyn Fn(&str) -> bool,
) -> Result<Vec<Breach>, VerifyError> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(false)
        .include_ignored(true)
        .recurse_ignored_dirs(true);
    let statuses = repo
        .statuses(Some(&mut opts))
        .map_err(VerifyError::Status)?;
    let found: Vec<String> = statuses
        .iter()
        .filter(|e| e.status().contains(Status::IGNORED))
        .filter_map(|e| e.path().ok().map(str::to_string))
        .filter(|p| p != ".mvk" && !p.starts_with(".mvk/") && sealed(p))
        .collect();
    if found.is_empty() {
        return Ok(Vec::new());
    }
    let committed = committed_ignores(repo, base)?;
    let mut out = Vec::new();
    for path in found {
        if committed
            .is_path_ignored(&path)
            .map_err(VerifyError::Status)?
        {
            continue;
        }
        out.push(Breach {
            path,
            kind: BreachKind::Added,
            commit: None,
        });
    }
    Ok(out)
}

/// A scratch repository holding only the `.gitignore` files of commit BASE, with no excludes
/// file: what it ignores is what BASE's committed rules ignore.
fn committed_ignores(repo: &Repository, base: Oid) -> Result<Scratch, VerifyError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir =
        std::env::temp_dir().join(format!("mvk-verify-ignores-{}-{nanos}", std::process::id()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| VerifyError::Scratch { path, source }
    };
    std::fs::create_dir(&dir).map_err(io(&dir))?;
    // Removed when dropped, whatever happens next.
    let mut scratch = Scratch { repo: None, dir };
    let tree = repo
        .find_commit(base)
        .and_then(|c| c.tree())
        .map_err(VerifyError::Status)?;
    let mut files = Vec::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
        if entry.name().ok() == Some(".gitignore") && entry.kind() == Some(git2::ObjectType::Blob) {
            files.push((format!("{root}.gitignore"), entry.id()));
        }
        git2::TreeWalkResult::Ok
    })
    .map_err(VerifyError::Status)?;
    for (path, id) in files {
        let blob = repo.find_blob(id).map_err(VerifyError::Status)?;
        let to = scratch.dir.join(&path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&to, blob.content()).map_err(io(&to))?;
    }
    let r = Repository::init(&scratch.dir).map_err(VerifyError::Status)?;
    r.config()
        .and_then(|mut c| c.set_str("core.excludesfile", "/dev/null"))
        .map_err(VerifyError::Status)?;
    scratch.repo = Some(r);
    Ok(scratch)
}

/// A scratch repository and its directory, removed when dropped.
struct Scratch {
    repo: Option<Repository>,
    dir: std::path::PathBuf,
}

impl Scratch {
    fn is_path_ignored(&self, path: &str) -> Result<bool, git2::Error> {
        match &self.repo {
            Some(r) => r.is_path_ignored(path),
            None => Ok(false),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.repo = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The program's own files in the checkout (the loop or flow file, task loop files, local
/// imports), as literal seal patterns relative to the checkout's top.
fn own_sources(repo: &Repository, program: &Program) -> Vec<String> {
    let Some(top) = repo.workdir().and_then(|w| w.canonicalize().ok()) else {
        return Vec::new();
    };
    program
        .sources
        .iter()
        .filter_map(|(_, f)| match &f.origin {
            crate::source::Origin::Disk(p) => p.canonicalize().ok(),
            _ => None,
        })
        .filter_map(|p| {
            p.strip_prefix(&top)
                .ok()
                .map(|r| crate::glob::escape(&r.to_string_lossy()))
        })
        .collect()
}

/// Whether git would pass PATH through a filter before hashing it: a `filter` driver or a
/// `working-tree-encoding`, which libgit2 cannot apply (it applies `text`/`eol` and `ident`
/// itself).
fn filtered(repo: &Repository, path: &str) -> bool {
    ["filter", "working-tree-encoding"].iter().any(|attr| {
        let value = repo
            .get_attr(Path::new(path), attr, git2::AttrCheckFlags::FILE_THEN_INDEX)
            .ok()
            .flatten();
        matches!(
            git2::AttrValue::from_string(value),
            git2::AttrValue::String(_) | git2::AttrValue::True
        )
    })
}

/// The blob the index holds for PATH (stage 0).
fn index_id(repo: &Repository, path: &str) -> Option<Oid> {
    let index = repo.index().ok()?;
    index.get_path(Path::new(path), 0).map(|e| e.id)
}

/// The blob id git gives the checkout's PATH, filters applied (`git hash-object --path`), or
/// `None` when git cannot say (the file is then judged by libgit2's hash: changed).
fn git_hash(repo: &Repository, path: &str) -> Option<Oid> {
    let workdir = repo.workdir()?;
    let out = std::process::Command::new("git")
        .current_dir(workdir)
        .args(["hash-object", &format!("--path={path}"), "--", path])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    Oid::from_str(String::from_utf8_lossy(&out.stdout).trim()).ok()
}

fn path_of(p: Option<&Path>) -> String {
    p.map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::run::testing::git;

    /// A flow of three tasks: `api` seals `tests/**`, `docs` seals `docs/spec.md`, `free`
    /// seals nothing; committed on `main` in a fresh repository.
    fn repo() -> (tempfile::TempDir, Program) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        let flow = r#"
agent bot { run "sh" "agent.sh" "{{prompt_file}}"; }
flow f {
    task api {
        goal "g"
        agent bot
        seal "tests/**"
        gate t evidence=none { run "true"; }
    }
    task docs {
        goal "g"
        agent bot
        seal "docs/spec.md"
        gate t evidence=none { run "true"; }
    }
    task free {
        goal "g"
        agent bot
        gate t evidence=none { run "true"; }
    }
}
"#;
        for (path, text) in [
            ("f.kdl", flow),
            ("tests/a.sh", "exit 0\n"),
            ("docs/spec.md", "spec\n"),
            ("src/lib.sh", "x\n"),
        ] {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "init"]);
        let compiled = crate::resolve::compile(
            &root.join("f.kdl"),
            &crate::resolve::Options {
                repo_root: Some(root.to_path_buf()),
                lock: crate::resolve::lock::Mode::Verify,
                cache_dir: None,
                confine: None,
            },
        );
        let program = compiled.program.unwrap_or_else(|| {
            panic!(
                "{}",
                crate::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources)
            )
        });
        (dir, program)
    }

    fn verdicts(v: &Verification) -> Vec<(&str, Verdict)> {
        v.tasks
            .iter()
            .map(|t| (t.task.as_str(), t.verdict))
            .collect()
    }

    #[test]
    fn each_task_is_judged_by_its_own_seal_and_a_task_that_seals_nothing_is_unknown() {
        let (dir, program) = repo();
        let root = dir.path();
        std::fs::write(root.join("docs/spec.md"), "changed\n").unwrap();
        git(root, &["commit", "-q", "-am", "edit the spec"]);
        let v = verify(root, &program, "f.kdl", None, "HEAD~1", Some("HEAD")).unwrap();
        assert_eq!(
            verdicts(&v),
            [
                ("api", Verdict::Untouched),
                ("docs", Verdict::Changed),
                ("free", Verdict::Unknown)
            ]
        );
        // A definite breach outranks an uncertain verdict.
        assert_eq!(v.verdict, Verdict::Changed);
        let only = verify(root, &program, "f.kdl", Some("api"), "HEAD~1", Some("HEAD")).unwrap();
        assert_eq!(only.verdict, Verdict::Untouched);
        let free = verify(
            root,
            &program,
            "f.kdl",
            Some("free"),
            "HEAD~1",
            Some("HEAD"),
        )
        .unwrap();
        assert_eq!(free.verdict, Verdict::Unknown);
        assert!(free.tasks[0].reason.contains("seals no path"));
        let e = verify(root, &program, "f.kdl", Some("nope"), "HEAD", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "`f.kdl` has no task `nope`; it has: api, docs, free"
        );
    }

    #[test]
    fn without_a_head_the_checkouts_uncommitted_work_counts() {
        let (dir, program) = repo();
        let root = dir.path();
        let clean = verify(root, &program, "f.kdl", Some("api"), "main", None).unwrap();
        assert_eq!(clean.verdict, Verdict::Untouched);
        assert!(clean.working_tree);
        // Staged, so git sees the rename; the sealed side is reported.
        git(root, &["mv", "tests/a.sh", "src/a.sh"]);
        let moved = verify(root, &program, "f.kdl", Some("api"), "main", None).unwrap();
        assert_eq!(moved.verdict, Verdict::Changed);
        assert_eq!(
            moved.tasks[0].breaches[0].kind,
            BreachKind::Renamed {
                from: "tests/a.sh".into(),
                to: "src/a.sh".into()
            }
        );
        // An explicit head looks at commits only.
        let committed = verify(root, &program, "f.kdl", Some("api"), "main", Some("HEAD")).unwrap();
        assert_eq!(committed.verdict, Verdict::Untouched);
    }

    /// Regression: a sealed path left conflicted by a merge (index stages 1–3) was skipped, so
    /// the seal read as untouched.
    #[test]
    fn a_sealed_path_left_conflicted_is_changed() {
        let (dir, program) = repo();
        let root = dir.path();
        git(root, &["checkout", "-q", "-b", "other"]);
        std::fs::write(root.join("tests/a.sh"), "exit 1\n").unwrap();
        git(root, &["commit", "-q", "-am", "other"]);
        git(root, &["checkout", "-q", "main"]);
        std::fs::write(root.join("tests/a.sh"), "exit 2\n").unwrap();
        git(root, &["commit", "-q", "-am", "ours"]);
        let merge = std::process::Command::new("git")
            .args(["merge", "-q", "other"])
            .current_dir(root)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&merge.stdout);
        assert!(said.contains("CONFLICT"), "{said}");
        let conflicted = verify(root, &program, "f.kdl", Some("api"), "HEAD", None).unwrap();
        assert_eq!(conflicted.verdict, Verdict::Changed, "{conflicted:?}");
        assert_eq!(conflicted.tasks[0].breaches[0].path, "tests/a.sh");
        assert_eq!(conflicted.tasks[0].breaches[0].kind, BreachKind::Modified);
        // Even with HEAD's text back in the file, the index still holds the conflict.
        git(root, &["checkout", "--ours", "tests/a.sh"]);
        let restored = verify(root, &program, "f.kdl", Some("api"), "HEAD", None).unwrap();
        assert_eq!(restored.verdict, Verdict::Changed, "{restored:?}");
        // Another task's seal is not concerned.
        let docs = verify(root, &program, "f.kdl", Some("docs"), "HEAD", None).unwrap();
        assert_eq!(docs.verdict, Verdict::Untouched);
    }
}
