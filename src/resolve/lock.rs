//! `mvk.lock` in, pinned imports out (and back): one entry per import reachable from the loop
//! files of a directory, the reference as written beside what it was locked to.
//!
//! The file is JSON with sorted keys, two-space indented, ending in a newline, so that a change
//! to one import is a change to a few lines:
//!
//! ```json
//! {
//!   "imports": {
//!     "git+file:///srv/git/gates.git?rev=v1#rust.kdl": {
//!       "locked": { "blake3": "…", "commit": "…" },
//!       "original": { "git": "file:///srv/git/gates.git", "path": "rust.kdl", "rev": "v1" }
//!     },
//!     "../gates/team.kdl": { "locked": { "blake3": "…" }, "original": { "path": "../gates/team.kdl" } },
//!     "std/gates/rust.kdl": { "locked": { "blake3": "…", "mvk": "0.1.0" }, "original": { "path": "std/gates/rust.kdl" } }
//!   },
//!   "version": 1
//! }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The lock file's name, in the directory of the loop files it locks.
pub(crate) const FILE_NAME: &str = "mvk.lock";

/// The format's version; a lock of another version is refused.
pub(crate) const VERSION: u32 = 1;

/// The codes of diagnostics that say an import no longer matches the lock: when they are a
/// compilation's only errors, the command exits with the drift code (5), not 65.
pub(crate) const DRIFT_CODES: &[&str] = &["mvk::lock-drift", "mvk::not-locked"];

/// Whether every error among `diags` is drift from the lock (and there is at least one).
pub(crate) fn only_drift(diags: &crate::diag::Diagnostics) -> bool {
    diags.has_errors()
        && diags
            .iter()
            .filter(|d| d.is_error())
            .all(|d| DRIFT_CODES.contains(&d.code))
}

/// How a compilation treats `mvk.lock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `check`, `plan`, `apply`: when a lock exists, every import must match it and git imports
    /// read the locked commit (fetched only when the cache lacks it); no lock, no check.
    #[default]
    Verify,
    /// `mvk lock`: every git rev is fetched again; an entry that no longer matches is drift,
    /// an import the lock lacks is recorded.
    Refresh,
    /// `mvk lock --update`: every git rev is fetched again and whatever is found is recorded.
    Update,
    /// Library use and tests: the lock is neither read nor checked.
    Ignore,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LockFile {
    pub(crate) version: u32,
    pub(crate) imports: BTreeMap<String, Entry>,
}

/// One import: as written, and as locked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub original: Original,
    pub locked: Locked,
}

/// The reference as written: a path (`std/…`, relative to the lock's directory, or inside a
/// repository) and, for a git import, the URL and the rev.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Original {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<String>,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
}

/// What the reference resolved to: the blake3 of the file's text, and the commit (git) or the
/// mvk version (stdlib).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    pub blake3: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mvk: Option<String>,
}

/// Reading or writing the lock failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockError {
    #[error("cannot read `{path}`: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("`{path}` is not a lock file mvk can read: {message}")]
    Malformed { path: String, message: String },
    #[error("cannot write `{path}`: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

impl Original {
    /// The entry's key: the path for a file, `git+URL?rev=REV#PATH` for a git import.
    pub fn key(&self) -> String {
        match (&self.git, &self.rev) {
            (Some(url), Some(rev)) => format!("git+{url}?rev={rev}#{}", self.path),
            (Some(url), None) => format!("git+{url}#{}", self.path),
            (None, _) => self.path.clone(),
        }
    }

    /// How the reference is named in messages.
    pub fn describe(&self) -> String {
        match (&self.git, &self.rev) {
            (Some(url), Some(rev)) => format!("`{}` from `{url}` at `{rev}`", self.path),
            (Some(url), None) => format!("`{}` from `{url}`", self.path),
            (None, _) => format!("`{}`", self.path),
        }
    }
}

impl Locked {
    /// How the locked state is named in messages: the commit (short) and the content hash (short).
    pub fn describe(&self) -> String {
        let hash: String = self.blake3.chars().take(12).collect();
        match (&self.commit, &self.mvk) {
            (Some(c), _) => format!("commit `{}`, content `{hash}`", short(c)),
            (None, Some(v)) => format!("mvk `{v}`, content `{hash}`"),
            (None, None) => format!("content `{hash}`"),
        }
    }

    /// Whether `found` is what this entry locked. The stdlib is compared by content only: a new
    /// mvk version with the same text is no drift.
    pub fn matches(&self, found: &Locked) -> bool {
        self.blake3 == found.blake3 && self.commit == found.commit
    }
}

fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

impl LockFile {
    pub(crate) fn new(imports: BTreeMap<String, Entry>) -> LockFile {
        LockFile {
            version: VERSION,
            imports,
        }
    }

    /// The canonical text: sorted keys, two-space indent, a final newline.
    pub(crate) fn to_text(&self) -> String {
        // Through `Value`, whose maps are sorted, so every level has sorted keys.
        let value = serde_json::to_value(self).unwrap_or_default();
        let mut text = serde_json::to_string_pretty(&value).unwrap_or_default();
        text.push('\n');
        text
    }

    pub(crate) fn parse(text: &str, path: &Path) -> Result<LockFile, LockError> {
        let malformed = |message: String| LockError::Malformed {
            path: crate::source::display_path(path),
            message,
        };
        let lock: LockFile = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
        if lock.version != VERSION {
            return Err(malformed(format!(
                "version {} (this mvk reads version {VERSION})",
                lock.version
            )));
        }
        Ok(lock)
    }
}

/// Where the lock of the loop file `entry` lives: beside it.
pub(crate) fn path_for(entry: &Path) -> PathBuf {
    entry
        .parent()
        .map_or_else(|| PathBuf::from(FILE_NAME), |d| d.join(FILE_NAME))
}

/// The lock at `path`, or `None` when there is none.
pub(crate) fn read(path: &Path) -> Result<Option<LockFile>, LockError> {
    match std::fs::read_to_string(path) {
        Ok(text) => LockFile::parse(&text, path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LockError::Read {
            path: crate::source::display_path(path),
            source,
        }),
    }
}

/// Writes the lock atomically: a temporary file beside it, then a rename.
pub(crate) fn write(path: &Path, lock: &LockFile) -> Result<(), LockError> {
    let err = |source| LockError::Write {
        path: crate::source::display_path(path),
        source,
    };
    let tmp = path.with_extension("lock.tmp");
    std::fs::write(&tmp, lock.to_text()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// A path relative to `base`, both absolute and normalized (`../gates/team.kdl`), with `/`.
pub(crate) fn relative(path: &Path, base: &Path) -> String {
    let p: Vec<_> = path.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".to_string(); b.len() - common];
    parts.extend(
        p[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(git: Option<&str>, rev: Option<&str>, path: &str) -> Entry {
        Entry {
            original: Original {
                git: git.map(str::to_string),
                path: path.to_string(),
                rev: rev.map(str::to_string),
            },
            locked: Locked {
                blake3: "ab".repeat(32),
                commit: git.map(|_| "cd".repeat(20)),
                mvk: None,
            },
        }
    }

    #[test]
    fn the_text_has_sorted_keys_and_reads_back() {
        let mut imports = BTreeMap::new();
        for e in [
            entry(Some("file:///g.git"), Some("v1"), "rust.kdl"),
            entry(None, None, "../team.kdl"),
        ] {
            imports.insert(e.original.key(), e);
        }
        let lock = LockFile::new(imports);
        let text = lock.to_text();
        let imports_at = text.find("\"imports\"").unwrap_or(usize::MAX);
        let version_at = text.find("\"version\"").unwrap_or(0);
        assert!(imports_at < version_at, "{text}");
        let locked_at = text.find("\"locked\"").unwrap_or(usize::MAX);
        let original_at = text.find("\"original\"").unwrap_or(0);
        assert!(locked_at < original_at, "{text}");
        assert!(
            text.contains("\"git+file:///g.git?rev=v1#rust.kdl\""),
            "{text}"
        );
        assert!(text.ends_with("}\n"));
        assert_eq!(
            LockFile::parse(&text, Path::new("mvk.lock")).ok(),
            Some(lock)
        );
    }

    #[test]
    fn another_version_or_an_unknown_field_is_refused() {
        let other = r#"{"imports": {}, "version": 2}"#;
        assert!(matches!(
            LockFile::parse(other, Path::new("mvk.lock")),
            Err(LockError::Malformed { message, .. }) if message.contains("version 2")
        ));
        let extra = r#"{"imports": {}, "version": 1, "extra": 1}"#;
        assert!(matches!(
            LockFile::parse(extra, Path::new("mvk.lock")),
            Err(LockError::Malformed { message, .. }) if message.contains("extra")
        ));
    }

    #[test]
    fn relative_paths_climb_with_dot_dot() {
        assert_eq!(
            relative(Path::new("/r/gates/team.kdl"), Path::new("/r/loops")),
            "../gates/team.kdl"
        );
        assert_eq!(
            relative(Path::new("/r/loops/lib.kdl"), Path::new("/r/loops")),
            "lib.kdl"
        );
    }
}
