//! A git import's URL and rev in, a commit and the text of a file at that commit out: fetched
//! with git2 into a bare repository in mvk's cache, read from the commit's tree (no checkout).
//!
//! One cache per URL: `$MVK_CACHE_DIR/git/<blake3 of URL>` (default `$XDG_CACHE_HOME/mvk` or
//! `~/.cache/mvk` for `$MVK_CACHE_DIR`). Each URL is fetched at most once per compilation, and
//! never when the commit asked for is already in the cache (a locked commit, a commit id rev).

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use git2::{AutotagOption, Direction, FetchOptions, ObjectType, Oid, Repository};

/// What went wrong reading a git import; each becomes a diagnostic at the import.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GitError {
    #[error("cannot fetch `{url}`: {message}")]
    Fetch { url: String, message: String },
    #[error("`{url}` has no branch, tag or commit `{rev}`")]
    UnknownRev {
        url: String,
        rev: String,
        /// The branches and tags the repository has, for "did you mean".
        known: Vec<String>,
    },
    #[error("`{url}` has no commit `{commit}`")]
    MissingCommit { url: String, commit: String },
    #[error("`{url}` has no `{path}` at commit `{short}`")]
    MissingPath {
        url: String,
        path: String,
        short: String,
        /// The `.kdl` files at that commit, for "did you mean".
        files: Vec<String>,
    },
    #[error("`{path}` in `{url}` is not UTF-8 text")]
    NotText { url: String, path: String },
    #[error("cannot use the git cache `{dir}`: {message}")]
    Cache { dir: String, message: String },
}

/// The bare repositories of one compilation, one per URL.
pub(crate) struct GitCache {
    root: PathBuf,
    repos: HashMap<String, Repository>,
    fetched: HashSet<String>,
}

impl GitCache {
    /// A cache under `root` (see [`default_root`]).
    pub(crate) fn new(root: PathBuf) -> GitCache {
        GitCache {
            root,
            repos: HashMap::new(),
            fetched: HashSet::new(),
        }
    }

    /// The bare repository that mirrors `url`: `<root>/git/<blake3 of url>`.
    pub(crate) fn dir_for(&self, url: &str) -> PathBuf {
        self.root
            .join("git")
            .join(blake3::hash(url.as_bytes()).to_hex().as_str())
    }

    fn repo(&mut self, url: &str) -> Result<&Repository, GitError> {
        if !self.repos.contains_key(url) {
            let dir = self.dir_for(url);
            let cache_err = |e: &dyn std::fmt::Display| GitError::Cache {
                dir: dir.display().to_string(),
                message: e.to_string(),
            };
            let repo = if dir.join("HEAD").is_file() {
                Repository::open_bare(&dir).map_err(|e| cache_err(&e))?
            } else {
                std::fs::create_dir_all(&dir).map_err(|e| cache_err(&e))?;
                Repository::init_bare(&dir).map_err(|e| cache_err(&e))?
            };
            self.repos.insert(url.to_string(), repo);
        }
        self.repos.get(url).ok_or_else(|| GitError::Cache {
            dir: self.dir_for(url).display().to_string(),
            message: "the repository was not opened".into(),
        })
    }

    /// Fetches every branch and tag of `url` (once per compilation); returns the branch the
    /// remote's HEAD names, if it names one.
    fn fetch(&mut self, url: &str) -> Result<Option<String>, GitError> {
        let fetch_err = |e: git2::Error| GitError::Fetch {
            url: url.to_string(),
            message: e.message().to_string(),
        };
        let head = {
            let repo = self.repo(url)?;
            let mut remote = repo.remote_anonymous(url).map_err(fetch_err)?;
            remote.connect(Direction::Fetch).map_err(fetch_err)?;
            let head = remote
                .default_branch()
                .ok()
                .and_then(|b| b.as_str().ok().map(str::to_string));
            remote.disconnect().map_err(fetch_err)?;
            let mut options = FetchOptions::new();
            options.download_tags(AutotagOption::None);
            // Pruned: a tag or branch deleted upstream must not go on resolving from the cache
            // (nor shadow a branch of the same name created since).
            options.prune(git2::FetchPrune::On);
            // Forced: a moved tag or a rewritten branch replaces what the cache had.
            remote
                .fetch(
                    &["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"],
                    Some(&mut options),
                    None,
                )
                .map_err(fetch_err)?;
            if let Some(head) = &head {
                // Kept so that a later `rev`-less import can be read from the cache alone.
                let _ = repo.reference_symbolic("refs/mvk/remote-head", head, true, "mvk fetch");
            }
            head
        };
        self.fetched.insert(url.to_string());
        Ok(head)
    }

    /// Whether `commit` is already in the cache of `url` (nothing is fetched).
    pub(crate) fn has_commit(&mut self, url: &str, commit: Oid) -> bool {
        self.repo(url).is_ok_and(|r| r.find_commit(commit).is_ok())
    }

    /// The commit `rev` names at `url` now (`None`: the remote's HEAD), fetching first unless
    /// `rev` is a full commit id already in the cache.
    pub(crate) fn resolve(&mut self, url: &str, rev: Option<&str>) -> Result<Oid, GitError> {
        if let Some(oid) = rev.and_then(full_commit_id)
            && self.has_commit(url, oid)
        {
            return Ok(oid);
        }
        let head = if self.fetched.contains(url) {
            let repo = self.repo(url)?;
            repo.find_reference("refs/mvk/remote-head")
                .ok()
                .and_then(|r| r.symbolic_target().ok().flatten().map(str::to_string))
        } else {
            self.fetch(url)?
        };
        let repo = self.repo(url)?;
        let unknown = || GitError::UnknownRev {
            url: url.to_string(),
            rev: rev.unwrap_or("HEAD").to_string(),
            known: ref_names(repo),
        };
        let candidates: Vec<String> = match rev {
            None => head.into_iter().collect(),
            Some(rev) => vec![
                format!("refs/tags/{rev}"),
                format!("refs/heads/{rev}"),
                rev.to_string(),
            ],
        };
        for name in candidates {
            let found = if name.starts_with("refs/") {
                repo.find_reference(&name)
                    .and_then(|r| r.peel_to_commit())
                    .ok()
            } else if name.len() == 40 && name.chars().all(|c| c.is_ascii_hexdigit()) {
                // A full commit id only: an abbreviation could match any object the cache ever
                // fetched, a commit force-pushed away included.
                repo.revparse_single(&name)
                    .and_then(|o| o.peel_to_commit())
                    .ok()
            } else {
                None
            };
            if let Some(commit) = found {
                return Ok(commit.id());
            }
        }
        Err(unknown())
    }

    /// Makes sure `commit` is in the cache, fetching `url` only when it is not.
    pub(crate) fn ensure(&mut self, url: &str, commit: Oid) -> Result<(), GitError> {
        if self.has_commit(url, commit) {
            return Ok(());
        }
        if !self.fetched.contains(url) {
            self.fetch(url)?;
        }
        if self.has_commit(url, commit) {
            Ok(())
        } else {
            Err(GitError::MissingCommit {
                url: url.to_string(),
                commit: commit.to_string(),
            })
        }
    }

    /// The text of `path` in the tree of `commit` (which must be in the cache).
    pub(crate) fn read(&mut self, url: &str, commit: Oid, path: &str) -> Result<String, GitError> {
        let repo = self.repo(url)?;
        let missing = |files| GitError::MissingPath {
            url: url.to_string(),
            path: path.to_string(),
            short: short(commit),
            files,
        };
        let tree = repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(|_| GitError::MissingCommit {
                url: url.to_string(),
                commit: commit.to_string(),
            })?;
        let Ok(entry) = tree.get_path(Path::new(path)) else {
            return Err(missing(kdl_files(&tree)));
        };
        if entry.kind() != Some(ObjectType::Blob) {
            return Err(missing(kdl_files(&tree)));
        }
        let blob = entry
            .to_object(repo)
            .and_then(|o| o.peel_to_blob())
            .map_err(|_| missing(Vec::new()))?;
        String::from_utf8(blob.content().to_vec()).map_err(|_| GitError::NotText {
            url: url.to_string(),
            path: path.to_string(),
        })
    }
}

/// The cache root when `$MVK_CACHE_DIR` is not set: `$XDG_CACHE_HOME/mvk`, else `~/.cache/mvk`.
pub(crate) fn default_root() -> PathBuf {
    root_from(
        std::env::var_os(crate::env::MVK_CACHE_DIR),
        std::env::var_os(crate::env::XDG_CACHE_HOME),
        std::env::var_os(crate::env::HOME),
    )
}

fn root_from(mvk: Option<OsString>, xdg: Option<OsString>, home: Option<OsString>) -> PathBuf {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = set(mvk) {
        return dir;
    }
    if let Some(xdg) = set(xdg) {
        return xdg.join("mvk");
    }
    // With neither variable, the system's temporary directory is the cache of last resort: one
    // per user, so another user cannot plant refs in it.
    set(home).map_or_else(
        || {
            let uid = rustix::process::getuid().as_raw();
            std::env::temp_dir().join(format!("mvk-cache-{uid}"))
        },
        |h| h.join(".cache").join("mvk"),
    )
}

/// The first 12 hex digits of a commit, as messages show it.
pub(crate) fn short(commit: Oid) -> String {
    commit.to_string().chars().take(12).collect()
}

fn full_commit_id(rev: &str) -> Option<Oid> {
    (rev.len() == 40 && rev.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| Oid::from_str(rev).ok())
        .flatten()
}

/// The short names of the cached branches and tags.
fn ref_names(repo: &Repository) -> Vec<String> {
    let mut out: Vec<String> = repo
        .references()
        .map(|refs| {
            refs.flatten()
                .filter_map(|r| r.name().ok().map(str::to_string))
                .filter_map(|n| {
                    n.strip_prefix("refs/tags/")
                        .or_else(|| n.strip_prefix("refs/heads/"))
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// The `.kdl` files of a tree, for "did you mean".
fn kdl_files(tree: &git2::Tree<'_>) -> Vec<String> {
    let mut out = Vec::new();
    let _ = tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if let Ok(name) = entry.name()
            && name.ends_with(".kdl")
            && entry.kind() == Some(ObjectType::Blob)
        {
            out.push(format!("{dir}{name}"));
        }
        git2::TreeWalkResult::Ok
    });
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_root_prefers_mvk_cache_dir_then_xdg_then_home() {
        let s = |v: &str| Some(OsString::from(v));
        assert_eq!(root_from(s("/c"), s("/x"), s("/h")), PathBuf::from("/c"));
        assert_eq!(root_from(s(""), s("/x"), s("/h")), PathBuf::from("/x/mvk"));
        assert_eq!(
            root_from(None, None, s("/h")),
            PathBuf::from("/h/.cache/mvk")
        );
    }

    #[test]
    fn only_full_hex_ids_are_commit_ids() {
        assert!(full_commit_id(&"a".repeat(40)).is_some());
        assert!(full_commit_id("v1").is_none());
        assert!(full_commit_id(&"g".repeat(40)).is_none());
    }
}
