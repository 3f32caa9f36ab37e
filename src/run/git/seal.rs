//! The oracle check: in go sealed path patterns, a repository, an attempt's base commit and its
//! final commit; out comes whether the attempt touched any sealed path, and if so which path,
//! how, and in which commit.
//!
//! The patterns follow [`crate::glob`]'s rules (repository-relative, anchored at the root, `*`
//! within a directory and `**` across); a path is sealed when it, or any directory containing
//! it, matches one.
//!
//! An attempt breaches the seal when its net change (base tree against final tree) or any
//! single commit it made (each commit reachable from the final commit but not from the base,
//! diffed against each of its parents) adds, deletes, modifies, renames, changes the mode of,
//! or turns into a symlink any sealed path. Walking the commits catches a sealed file edited
//! and then restored. Merge commits are diffed against every parent, so merging in outside
//! work that touched sealed paths is reported too (the safe direction for an oracle).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use git2::{Delta, DiffFindOptions, DiffOptions, FileMode, Oid, Repository, Sort, Tree};
use serde::{Deserialize, Serialize};

use crate::glob::{PathSet, PatternError};

/// Failures of the seal check itself (not breaches: those are a [`SealVerdict`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SealError {
    #[error("invalid seal pattern `{pattern}`: {reason}")]
    InvalidPattern { pattern: String, reason: String },
    #[error("commit `{id}` is not in the repository")]
    CommitNotFound {
        id: Oid,
        #[source]
        source: git2::Error,
    },
    #[error("cannot {action}")]
    Git {
        action: String,
        #[source]
        source: git2::Error,
    },
}

impl From<PatternError> for SealError {
    fn from(e: PatternError) -> SealError {
        SealError::InvalidPattern {
            pattern: e.pattern,
            reason: e.reason,
        }
    }
}

fn git_err(action: impl Into<String>) -> impl FnOnce(git2::Error) -> SealError {
    let action = action.into();
    move |source| SealError::Git { action, source }
}

/// A compiled set of sealed path patterns.
#[derive(Debug, Clone)]
pub(crate) struct Seal {
    paths: PathSet,
}

impl Seal {
    /// Compiles `patterns` (see [`crate::glob`] for the rules).
    pub(crate) fn new(patterns: &[String]) -> Result<Seal, SealError> {
        Ok(Seal {
            paths: PathSet::new(patterns)?,
        })
    }

    /// Whether the repository-relative `path` (`/`-separated) is sealed: it or one of the
    /// directories containing it matches a pattern.
    pub(crate) fn is_sealed(&self, path: &str) -> bool {
        self.paths.covers(path)
    }

    /// The directories (or files) every sealed path lies under: each pattern's leading
    /// components up to the first one with a wildcard. `None` when a pattern starts with one
    /// (`**/*.snap`), so that the whole tree must be looked at.
    pub(crate) fn roots(&self) -> Option<BTreeSet<String>> {
        self.paths.roots()
    }

    /// Whether no path is sealed at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The patterns as compiled (after dropping `./`, leading and trailing `/`).
    pub(crate) fn patterns(&self) -> &[String] {
        self.paths.patterns()
    }
}

/// How a sealed path was touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BreachKind {
    Added,
    Deleted,
    Modified,
    /// A rename where either side is sealed; `path` is the sealed side.
    Renamed {
        from: String,
        to: String,
    },
    /// Git file modes, e.g. `0o100644` → `0o100755`.
    ModeChanged {
        old: u32,
        new: u32,
    },
    /// A sealed file or directory became a symlink.
    SymlinkReplaced,
    /// The final commit does not descend from the base, so what the attempt changed cannot be
    /// told apart from rewritten history. `path` is empty.
    HistoryRewritten,
}

/// One way an attempt touched the seal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Breach {
    pub path: String,
    pub kind: BreachKind,
    /// The commit (full hex id) that made the change, when found by walking the attempt's
    /// commits; `None` for the net change from base to final commit.
    pub commit: Option<String>,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = &self.path;
        match &self.kind {
            BreachKind::Added => write!(f, "sealed path `{path}` added")?,
            BreachKind::Deleted => write!(f, "sealed path `{path}` deleted")?,
            BreachKind::Modified => write!(f, "sealed path `{path}` modified")?,
            BreachKind::Renamed { from, to } => {
                write!(f, "sealed path `{path}` renamed from `{from}` to `{to}`")?;
            }
            BreachKind::ModeChanged { old, new } => {
                write!(
                    f,
                    "sealed path `{path}` changed mode from `{old:o}` to `{new:o}`"
                )?;
            }
            BreachKind::SymlinkReplaced => {
                write!(f, "sealed path `{path}` replaced by a symlink")?;
            }
            BreachKind::HistoryRewritten => write!(
                f,
                "history rewritten: the attempt's head does not descend from its base, so the seal cannot be verified"
            )?,
        }
        match &self.commit {
            Some(commit) => write!(f, " in commit `{commit}`"),
            None => Ok(()),
        }
    }
}

/// The outcome of [`check`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "breaches", rename_all = "snake_case")]
pub(crate) enum SealVerdict {
    Untouched,
    Breached(Vec<Breach>),
}

impl SealVerdict {
    #[cfg(test)]
    pub(crate) fn is_untouched(&self) -> bool {
        matches!(self, SealVerdict::Untouched)
    }
}

/// Checks everything the attempt from `base` to `head` changed against `seal`.
///
/// Breaches come in this order: `HistoryRewritten` (if `head` does not descend from `base`),
/// then per-commit breaches oldest commit first, then net-change breaches not already reported
/// with the same path and kind by a commit.
pub(crate) fn check(
    repo: &Repository,
    base: Oid,
    head: Oid,
    seal: &Seal,
) -> Result<SealVerdict, SealError> {
    let base_tree = commit_tree(repo, base)?;
    let head_tree = commit_tree(repo, head)?;
    if seal.is_empty() || base == head {
        return Ok(SealVerdict::Untouched);
    }
    let mut breaches = Vec::new();
    let descends = repo
        .graph_descendant_of(head, base)
        .map_err(git_err(format!(
            "tell whether `{head}` descends from `{base}`"
        )))?;
    if !descends {
        breaches.push(Breach {
            path: String::new(),
            kind: BreachKind::HistoryRewritten,
            commit: Some(head.to_string()),
        });
    }

    let walk_err = || git_err(format!("walk commits from `{base}` to `{head}`"));
    let mut walk = repo.revwalk().map_err(walk_err())?;
    walk.set_sorting(Sort::TOPOLOGICAL | Sort::REVERSE)
        .map_err(walk_err())?;
    walk.push(head).map_err(walk_err())?;
    walk.hide(base).map_err(walk_err())?;
    for id in walk {
        let id = id.map_err(walk_err())?;
        let commit = repo
            .find_commit(id)
            .map_err(|source| SealError::CommitNotFound { id, source })?;
        let tree = commit
            .tree()
            .map_err(git_err(format!("read tree of `{id}`")))?;
        let label = Some(id.to_string());
        if commit.parent_count() == 0 {
            breaches.extend(tree_breaches(repo, None, &tree, seal, &label)?);
        }
        for parent in commit.parents() {
            let parent_tree = parent
                .tree()
                .map_err(git_err(format!("read tree of `{}`", parent.id())))?;
            breaches.extend(tree_breaches(
                repo,
                Some(&parent_tree),
                &tree,
                seal,
                &label,
            )?);
        }
    }

    for breach in tree_breaches(repo, Some(&base_tree), &head_tree, seal, &None)? {
        let seen = breaches
            .iter()
            .any(|b| b.path == breach.path && b.kind == breach.kind);
        if !seen {
            breaches.push(breach);
        }
    }
    // A merge diffed against two parents can report the same change twice.
    let mut unique: Vec<Breach> = Vec::with_capacity(breaches.len());
    for breach in breaches {
        if !unique.contains(&breach) {
            unique.push(breach);
        }
    }
    if unique.is_empty() {
        Ok(SealVerdict::Untouched)
    } else {
        Ok(SealVerdict::Breached(unique))
    }
}

/// Paths the net change from `base` to `head` touched (both sides of a rename), sorted.
#[cfg(test)]
pub(crate) fn changed_paths(
    repo: &Repository,
    base: Oid,
    head: Oid,
) -> Result<Vec<String>, SealError> {
    let base_tree = commit_tree(repo, base)?;
    let head_tree = commit_tree(repo, head)?;
    let mut paths = BTreeSet::new();
    for change in diff_trees(repo, Some(&base_tree), &head_tree)? {
        if change.status != Delta::Added {
            paths.insert(change.old_path);
        }
        if change.status != Delta::Deleted {
            paths.insert(change.new_path);
        }
    }
    Ok(paths.into_iter().collect())
}

/// The sealed files of a commit: path → (git file mode, blob id), sorted by path. What the
/// oracle is at that commit; a resume compares it with the base it goes on from.
pub(crate) fn sealed_files(
    repo: &Repository,
    commit: Oid,
    seal: &Seal,
) -> Result<std::collections::BTreeMap<String, (u32, String)>, SealError> {
    let tree = commit_tree(repo, commit)?;
    let mut files = std::collections::BTreeMap::new();
    if seal.is_empty() {
        return Ok(files);
    }
    let mut visit = |dir: &str, entry: &git2::TreeEntry<'_>| {
        if entry.kind() == Some(git2::ObjectType::Tree) {
            return;
        }
        let path = format!("{dir}{}", String::from_utf8_lossy(entry.name_bytes()));
        if seal.is_sealed(&path) {
            let mode = u32::try_from(entry.filemode()).unwrap_or(0);
            files.insert(path, (mode, entry.id().to_string()));
        }
    };
    let walk_err = || git_err(format!("list the sealed files of `{commit}`"));
    let walk =
        |tree: &Tree<'_>, prefix: &str, visit: &mut dyn FnMut(&str, &git2::TreeEntry<'_>)| {
            tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
                visit(&format!("{prefix}{dir}"), entry);
                git2::TreeWalkResult::Ok
            })
        };
    // Only the subtrees sealed paths can lie under are walked: a seal of `tests/**` reads the
    // `tests` tree, not the whole repository.
    match seal.roots() {
        None => walk(&tree, "", &mut visit).map_err(walk_err())?,
        Some(roots) => {
            for root in roots {
                let Ok(entry) = tree.get_path(Path::new(&root)) else {
                    continue; // not in this commit
                };
                if entry.kind() == Some(git2::ObjectType::Tree) {
                    let sub = repo
                        .find_tree(entry.id())
                        .map_err(git_err(format!("read tree `{root}` of `{commit}`")))?;
                    walk(&sub, &format!("{root}/"), &mut visit).map_err(walk_err())?;
                } else {
                    let dir = root.rfind('/').map_or("", |i| &root[..=i]);
                    visit(dir, &entry);
                }
            }
        }
    }
    Ok(files)
}

/// A digest of [`sealed_files`]: equal when and only when every sealed file's content and mode
/// are the same.
pub(crate) fn sealed_digest(files: &std::collections::BTreeMap<String, (u32, String)>) -> String {
    let mut hasher = blake3::Hasher::new_derive_key("mvk 2026-12 sealed files");
    for (path, (mode, blob)) in files {
        for part in [path.as_bytes(), &mode.to_le_bytes(), blob.as_bytes()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    hasher.finalize().to_hex().to_string()
}

fn commit_tree(repo: &Repository, id: Oid) -> Result<Tree<'_>, SealError> {
    let commit = repo
        .find_commit(id)
        .map_err(|source| SealError::CommitNotFound { id, source })?;
    commit
        .tree()
        .map_err(git_err(format!("read tree of `{id}`")))
}

/// One file-level change between two trees, with owned paths.
struct Change {
    status: Delta,
    old_path: String,
    new_path: String,
    old_mode: FileMode,
    new_mode: FileMode,
    old_id: Oid,
    new_id: Oid,
}

fn diff_trees(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: &Tree<'_>,
) -> Result<Vec<Change>, SealError> {
    let mut opts = DiffOptions::new();
    // Without this a file turned symlink shows up as a delete plus an add.
    opts.include_typechange(true);
    if let Some(old) = old {
        // libgit2 would walk both trees whole; the paths that differ are found first by
        // comparing subtree ids, and its diff (for rename detection) sees only those.
        let paths =
            super::treediff::changed_paths(repo, old, new).map_err(git_err("diff trees"))?;
        if paths.is_empty() {
            return Ok(Vec::new());
        }
        opts.disable_pathspec_match(true);
        for p in paths {
            opts.pathspec(p);
        }
    }
    let mut diff = repo
        .diff_tree_to_tree(old, Some(new), Some(&mut opts))
        .map_err(git_err("diff trees"))?;
    let mut find = DiffFindOptions::new();
    find.renames(true);
    diff.find_similar(Some(&mut find))
        .map_err(git_err("detect renames"))?;
    let path_of = |file: git2::DiffFile<'_>| {
        file.path_bytes()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default()
    };
    Ok(diff
        .deltas()
        .map(|delta| Change {
            status: delta.status(),
            old_path: path_of(delta.old_file()),
            new_path: path_of(delta.new_file()),
            old_mode: delta.old_file().mode(),
            new_mode: delta.new_file().mode(),
            old_id: delta.old_file().id(),
            new_id: delta.new_file().id(),
        })
        .collect())
}

fn tree_breaches(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: &Tree<'_>,
    seal: &Seal,
    commit: &Option<String>,
) -> Result<Vec<Breach>, SealError> {
    let mut out = Vec::new();
    let mut push = |path: &str, kind: BreachKind| {
        out.push(Breach {
            path: path.to_string(),
            kind,
            commit: commit.clone(),
        });
    };
    for c in diff_trees(repo, old, new)? {
        match c.status {
            Delta::Added | Delta::Copied if seal.is_sealed(&c.new_path) => {
                // A symlink where a sealed directory used to be: its files show up as
                // deleted, this entry says what replaced them.
                let was_dir = old
                    .and_then(|t| t.get_path(std::path::Path::new(&c.new_path)).ok())
                    .is_some_and(|e| e.kind() == Some(git2::ObjectType::Tree));
                if c.new_mode == FileMode::Link && was_dir {
                    push(&c.new_path, BreachKind::SymlinkReplaced);
                } else {
                    push(&c.new_path, BreachKind::Added);
                }
            }
            Delta::Deleted if seal.is_sealed(&c.old_path) => push(&c.old_path, BreachKind::Deleted),
            Delta::Renamed if seal.is_sealed(&c.old_path) || seal.is_sealed(&c.new_path) => {
                let path = if seal.is_sealed(&c.old_path) {
                    &c.old_path
                } else {
                    &c.new_path
                };
                push(
                    path,
                    BreachKind::Renamed {
                        from: c.old_path.clone(),
                        to: c.new_path.clone(),
                    },
                );
            }
            Delta::Typechange if seal.is_sealed(&c.new_path) => {
                if c.new_mode == FileMode::Link {
                    push(&c.new_path, BreachKind::SymlinkReplaced);
                } else {
                    push(
                        &c.new_path,
                        BreachKind::ModeChanged {
                            old: u32::from(c.old_mode),
                            new: u32::from(c.new_mode),
                        },
                    );
                }
            }
            Delta::Modified if seal.is_sealed(&c.new_path) => {
                if c.old_mode != c.new_mode {
                    push(
                        &c.new_path,
                        BreachKind::ModeChanged {
                            old: u32::from(c.old_mode),
                            new: u32::from(c.new_mode),
                        },
                    );
                }
                if c.old_id != c.new_id {
                    push(&c.new_path, BreachKind::Modified);
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::path::PathBuf;

    /// `mvk check` holds `scope` and `seal` to this (regression: it once let `.` through, which
    /// the generic gates' matcher then refused at every attempt).
    #[test]
    fn glob_check_refuses_what_the_seal_refuses() {
        for bad in [".", "./", "src/./x", "a//b", "", "src/[ab.rs", "src/.."] {
            assert!(crate::glob::check(bad).is_err(), "{bad:?} is refused");
            assert!(Seal::new(&[bad.to_string()]).is_err(), "{bad:?} is refused");
        }
        for good in ["src/**", "./src/**", "src/", "{a,b}/*.rs", "Cargo.lock"] {
            assert!(crate::glob::check(good).is_ok(), "{good:?} is accepted");
        }
    }

    use crate::run::testing::git;

    struct Fixture {
        _tmp: tempfile::TempDir,
        dir: PathBuf,
        repo: Repository,
        base: Oid,
    }

    impl Fixture {
        fn write(&self, path: &str, content: &str) {
            let p = self.dir.join(path);
            fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            fs::write(p, content).expect("write");
        }

        fn commit(&self, msg: &str) -> Oid {
            git(&self.dir, &["add", "-A"]);
            git(&self.dir, &["commit", "-q", "--allow-empty", "-m", msg]);
            Oid::from_str(git(&self.dir, &["rev-parse", "HEAD"]).trim()).expect("oid")
        }

        fn check(&self, head: Oid, patterns: &[&str]) -> SealVerdict {
            check(&self.repo, self.base, head, &seal(patterns)).expect("check")
        }
    }

    fn seal(patterns: &[&str]) -> Seal {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        Seal::new(&patterns).expect("seal")
    }

    #[test]
    fn sealed_files_walk_only_the_roots_and_find_what_a_whole_walk_finds() {
        let f = fixture();
        f.write("src/a_test.rs", "t\n");
        f.write("src/deep/b.snap", "s\n");
        let head = f.commit("more");
        let whole = |s: &Seal| {
            let mut all = std::collections::BTreeMap::new();
            let tree = commit_tree(&f.repo, head).expect("tree");
            tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
                let path = format!("{dir}{}", e.name().unwrap_or(""));
                if e.kind() != Some(git2::ObjectType::Tree) && s.is_sealed(&path) {
                    all.insert(
                        path,
                        (u32::try_from(e.filemode()).unwrap_or(0), e.id().to_string()),
                    );
                }
                git2::TreeWalkResult::Ok
            })
            .expect("walk");
            all
        };
        for patterns in [
            &["tests/**"][..],
            &["tests"],
            &["tests/pagination.rs", "README.md"],
            &["src/*_test.rs", "tests/fixtures"],
            &["**/*.snap"],
            &["no/such/dir/**"],
        ] {
            let s = seal(patterns);
            let found = sealed_files(&f.repo, head, &s).expect("sealed files");
            assert_eq!(found, whole(&s), "{patterns:?}");
        }
        assert_eq!(
            seal(&["tests/**", "tests/fixtures/*.json", "src/*_test.rs"]).roots(),
            Some(["src".to_string(), "tests".to_string()].into())
        );
        assert_eq!(seal(&["**/*.snap", "tests"]).roots(), None);
        // A change to a sealed file changes the digest; one elsewhere does not.
        let before = sealed_digest(&sealed_files(&f.repo, head, &seal(&["tests/**"])).expect("a"));
        f.write("src/lib.rs", "pub fn page() -> u32 { 2 }\n");
        let other = f.commit("elsewhere");
        let same = sealed_digest(&sealed_files(&f.repo, other, &seal(&["tests/**"])).expect("b"));
        assert_eq!(before, same);
        f.write("tests/fixtures/data.json", "{}\n");
        let changed = f.commit("the oracle");
        let after =
            sealed_digest(&sealed_files(&f.repo, changed, &seal(&["tests/**"])).expect("c"));
        assert_ne!(before, after);
    }

    const PAGINATION: &str = "use crate::page;\n\n#[test]\nfn first_page() {\n    assert_eq!(page(0, 10), 0..10);\n}\n\n#[test]\nfn second_page() {\n    assert_eq!(page(1, 10), 10..20);\n}\n";

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("repo");
        fs::create_dir(&dir).expect("mkdir");
        git(&dir, &["init", "-q", "-b", "main"]);
        let repo = Repository::open(&dir).expect("open");
        let f = Fixture {
            _tmp: tmp,
            dir,
            repo,
            base: Oid::ZERO_SHA1,
        };
        f.write("src/lib.rs", "pub fn page() {}\n");
        f.write("tests/pagination.rs", PAGINATION);
        f.write("tests/fixtures/data.json", "{\"items\": [1, 2, 3]}\n");
        f.write("tests/with space.rs", "// spaced\n");
        f.write("README.md", "readme\n");
        let base = f.commit("base");
        Fixture { base, ..f }
    }

    fn breaches(verdict: SealVerdict) -> Vec<Breach> {
        match verdict {
            SealVerdict::Breached(b) => b,
            SealVerdict::Untouched => panic!("expected a breach, got Untouched"),
        }
    }

    fn kinds(verdict: SealVerdict) -> Vec<(String, BreachKind, bool)> {
        breaches(verdict)
            .into_iter()
            .map(|b| (b.path, b.kind, b.commit.is_some()))
            .collect()
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in [
            "",
            "/",
            "./",
            "../outside",
            "tests/../src",
            "a//b",
            "tests/[unclosed",
        ] {
            let err = Seal::new(&[bad.to_string()]).expect_err(bad);
            assert!(
                matches!(err, SealError::InvalidPattern { .. }),
                "{bad}: {err:?}"
            );
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
    }

    #[test]
    fn unsealed_change_is_untouched() {
        let f = fixture();
        f.write("src/lib.rs", "pub fn page() -> u32 { 1 }\n");
        f.write("src/new.rs", "new\n");
        let head = f.commit("edit src");
        assert_eq!(f.check(head, &["tests/**"]), SealVerdict::Untouched);
        assert_eq!(f.check(f.base, &["tests/**"]), SealVerdict::Untouched);
    }

    #[test]
    fn empty_seal_is_always_untouched() {
        let f = fixture();
        fs::remove_file(f.dir.join("tests/pagination.rs")).expect("rm");
        let head = f.commit("delete test");
        assert_eq!(f.check(head, &[]), SealVerdict::Untouched);
    }

    #[test]
    fn added_deleted_modified() {
        let f = fixture();
        f.write("tests/new.rs", "// new\n");
        let added = f.commit("add");
        let v = kinds(f.check(added, &["tests/**"]));
        assert_eq!(v, [("tests/new.rs".into(), BreachKind::Added, true)]);

        fs::remove_file(f.dir.join("tests/fixtures/data.json")).expect("rm");
        let deleted = f.commit("delete");
        let v = breaches(f.check(deleted, &["tests/fixtures/**"]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].path, "tests/fixtures/data.json");
        assert_eq!(v[0].kind, BreachKind::Deleted);
        assert_eq!(v[0].commit.as_deref(), Some(deleted.to_string().as_str()));

        f.write("tests/pagination.rs", &PAGINATION.replace("10..20", "0..0"));
        let modified = f.commit("weaken test");
        let v = breaches(f.check(modified, &["tests/pagination.rs"]));
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].kind, BreachKind::Modified);
        assert_eq!(v[0].commit.as_deref(), Some(modified.to_string().as_str()));
        assert_eq!(
            v[0].to_string(),
            format!("sealed path `tests/pagination.rs` modified in commit `{modified}`")
        );
    }

    #[test]
    fn renames_out_of_and_into_the_seal() {
        let f = fixture();
        git(&f.dir, &["mv", "tests/pagination.rs", "src/pagination.rs"]);
        let out = f.commit("move test out");
        let v = kinds(f.check(out, &["tests"]));
        let renamed = BreachKind::Renamed {
            from: "tests/pagination.rs".into(),
            to: "src/pagination.rs".into(),
        };
        assert_eq!(v, [("tests/pagination.rs".into(), renamed, true)]);

        let f = fixture();
        git(&f.dir, &["mv", "src/lib.rs", "tests/lib.rs"]);
        let into = f.commit("move into tests");
        let v = kinds(f.check(into, &["tests"]));
        let renamed = BreachKind::Renamed {
            from: "src/lib.rs".into(),
            to: "tests/lib.rs".into(),
        };
        assert_eq!(v, [("tests/lib.rs".into(), renamed, true)]);
    }

    #[test]
    fn mode_change_and_symlinks() {
        let f = fixture();
        let path = f.dir.join("tests/pagination.rs");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
        let chmod = f.commit("chmod");
        let v = kinds(f.check(chmod, &["tests/**"]));
        let mode = BreachKind::ModeChanged {
            old: 0o100644,
            new: 0o100755,
        };
        assert_eq!(v, [("tests/pagination.rs".into(), mode, true)]);

        let f = fixture();
        fs::remove_file(f.dir.join("tests/pagination.rs")).expect("rm");
        symlink("../src/lib.rs", f.dir.join("tests/pagination.rs")).expect("symlink");
        let link = f.commit("symlink");
        let v = kinds(f.check(link, &["tests/**"]));
        assert_eq!(
            v,
            [(
                "tests/pagination.rs".into(),
                BreachKind::SymlinkReplaced,
                true
            )]
        );

        let f = fixture();
        fs::remove_dir_all(f.dir.join("tests/fixtures")).expect("rm dir");
        fs::create_dir(f.dir.join("elsewhere")).expect("mkdir");
        f.write("elsewhere/data.json", "{}\n");
        symlink("../elsewhere", f.dir.join("tests/fixtures")).expect("symlink");
        let dir_link = f.commit("dir symlink");
        let v = kinds(f.check(dir_link, &["tests"]));
        assert!(
            v.contains(&("tests/fixtures".into(), BreachKind::SymlinkReplaced, true)),
            "{v:?}"
        );
        assert!(
            v.iter().any(|(p, k, _)| p == "tests/fixtures/data.json"
                && matches!(k, BreachKind::Deleted | BreachKind::Renamed { .. })),
            "{v:?}"
        );
    }

    #[test]
    fn commit_then_revert_is_still_a_breach() {
        let f = fixture();
        f.write("tests/pagination.rs", "// gutted\n");
        let gut = f.commit("gut the test");
        f.write("tests/pagination.rs", PAGINATION);
        f.write("src/lib.rs", "pub fn page() { /* real work */ }\n");
        let restore = f.commit("restore it");
        assert!(
            changed_paths(&f.repo, f.base, restore)
                .expect("changed")
                .iter()
                .all(|p| !p.starts_with("tests/"))
        );
        let v = breaches(f.check(restore, &["tests/**"]));
        let commits: Vec<_> = v.iter().map(|b| b.commit.clone()).collect();
        assert_eq!(commits, [Some(gut.to_string()), Some(restore.to_string())]);
        assert!(
            v.iter()
                .all(|b| b.kind == BreachKind::Modified && b.path == "tests/pagination.rs")
        );
    }

    #[test]
    fn paths_with_spaces_and_globs() {
        let f = fixture();
        f.write("tests/with space.rs", "// changed\n");
        let head = f.commit("space");
        let v = kinds(f.check(head, &["tests/with space.rs"]));
        assert_eq!(
            v,
            [("tests/with space.rs".into(), BreachKind::Modified, true)]
        );
        assert_eq!(
            f.check(head, &["tests/pagination.rs"]),
            SealVerdict::Untouched
        );
        assert!(!f.check(head, &["tests/*.rs"]).is_untouched());
        assert!(!f.check(head, &["**/with*"]).is_untouched());

        let f = fixture();
        f.write("tests/fixtures/data.json", "{}\n");
        let head = f.commit("fixture");
        assert_eq!(f.check(head, &["tests/*.rs"]), SealVerdict::Untouched);
        assert!(!f.check(head, &["**/*.json"]).is_untouched());
        assert!(!f.check(head, &["tests/**"]).is_untouched());
        assert!(!f.check(head, &["tests/*"]).is_untouched());
    }

    #[test]
    fn non_descendant_head_is_never_clean() {
        let f = fixture();
        // Rewrite history: amend the base itself, touching nothing sealed.
        f.write("README.md", "amended\n");
        git(
            &f.dir,
            &["commit", "-q", "-a", "--amend", "-m", "rewritten"],
        );
        let amended = Oid::from_str(git(&f.dir, &["rev-parse", "HEAD"]).trim()).expect("oid");
        let v = breaches(f.check(amended, &["tests/**"]));
        assert_eq!(v[0].kind, BreachKind::HistoryRewritten);
        assert_eq!(v[0].path, "");
        assert!(v[0].to_string().contains("history rewritten"), "{}", v[0]);

        // A head behind its base does not descend from it either.
        let f = fixture();
        f.write("src/lib.rs", "later\n");
        let later = f.commit("later");
        let v = check(&f.repo, later, f.base, &seal(&["tests"])).expect("check");
        assert_eq!(breaches(v)[0].kind, BreachKind::HistoryRewritten);
    }

    #[test]
    fn merge_commits_are_walked() {
        let f = fixture();
        git(&f.dir, &["checkout", "-q", "-b", "side"]);
        f.write("src/side.rs", "side\n");
        f.commit("side work");
        git(&f.dir, &["checkout", "-q", "main"]);
        f.write("src/main_work.rs", "main\n");
        f.commit("main work");
        git(&f.dir, &["merge", "-q", "--no-ff", "--no-commit", "side"]);
        // An evil merge: the sealed change exists only in the merge commit.
        f.write("tests/pagination.rs", "// evil\n");
        let merge = f.commit("merge side");
        let v = breaches(f.check(merge, &["tests"]));
        assert!(
            v.iter()
                .all(|b| b.commit.as_deref() == Some(merge.to_string().as_str())
                    && b.kind == BreachKind::Modified),
            "{v:?}"
        );
        assert_eq!(
            v.len(),
            1,
            "same change against both parents is reported once"
        );
        let unsealed = seal(&["tests/fixtures"]);
        assert_eq!(
            check(&f.repo, f.base, merge, &unsealed).expect("check"),
            SealVerdict::Untouched
        );
    }

    #[test]
    fn changed_paths_lists_the_net_change() {
        let f = fixture();
        f.write("src/lib.rs", "changed\n");
        git(&f.dir, &["mv", "README.md", "README.txt"]);
        fs::remove_file(f.dir.join("tests/with space.rs")).expect("rm");
        f.write("new dir/x.rs", "x\n");
        let head = f.commit("net");
        assert_eq!(
            changed_paths(&f.repo, f.base, head).expect("changed"),
            [
                "README.md",
                "README.txt",
                "new dir/x.rs",
                "src/lib.rs",
                "tests/with space.rs"
            ]
        );
    }

    #[test]
    fn unknown_commit_is_an_error() {
        let f = fixture();
        let missing = Oid::from_str("1234567890123456789012345678901234567890").expect("oid");
        let err = check(&f.repo, f.base, missing, &seal(&["tests"])).expect_err("missing");
        assert!(matches!(err, SealError::CommitNotFound { .. }), "{err:?}");
    }

    #[test]
    fn breach_display_names_path_and_commit() {
        let breach = Breach {
            path: "tests/a.rs".into(),
            kind: BreachKind::Renamed {
                from: "tests/a.rs".into(),
                to: "src/a.rs".into(),
            },
            commit: None,
        };
        assert_eq!(
            breach.to_string(),
            "sealed path `tests/a.rs` renamed from `tests/a.rs` to `src/a.rs`"
        );
        let mode = Breach {
            path: "t".into(),
            kind: BreachKind::ModeChanged {
                old: 0o100644,
                new: 0o100755,
            },
            commit: Some("abc".into()),
        };
        assert_eq!(
            mode.to_string(),
            "sealed path `t` changed mode from `100644` to `100755` in commit `abc`"
        );
    }
}
