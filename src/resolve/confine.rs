//! The repository fence for a compilation served to someone else (`mvk mcp` and the commands it
//! starts): every file the compiler reads — the entry file, its imports, templates, `mvk.lock`,
//! a local git import's repository — must resolve (after `..` and symbolic links) inside the
//! checkout's top directory and outside its git directory, else it is refused before a byte of
//! it is read. Without this a repository file importing `/etc/passwd` would have its lines
//! rendered into the diagnostics the caller receives, and `.git/config` would hand out remote
//! URLs with their tokens.

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

/// Where a confined compilation may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confine {
    /// The checkout's top directory, canonical.
    root: PathBuf,
    /// Its git directory and common directory, canonical: inside the root or not, never read.
    git_dirs: Vec<PathBuf>,
}

/// The fence of this process, once set: set by `mvk mcp` for itself and by the commands it
/// starts (the hidden `__session` first argument), never by anything a loop file says.
static PROCESS: OnceLock<Confine> = OnceLock::new();

/// Fences every later compilation of this process in `confine`.
pub(crate) fn confine_process(confine: Confine) {
    // Set once per process; a second call names the same checkout.
    let _ = PROCESS.set(confine);
}

/// The fence of this process, if it has one.
pub(crate) fn current() -> Option<Confine> {
    PROCESS.get().cloned()
}

impl Confine {
    /// The fence of the checkout whose top directory is `dir` (or of `dir` alone outside a
    /// repository).
    pub fn for_checkout(dir: &Path) -> Result<Confine, String> {
        let root = dir
            .canonicalize()
            .map_err(|e| format!("cannot resolve `{}`: {e}", dir.display()))?;
        let mut git_dirs = Vec::new();
        if let Ok(repo) = git2::Repository::open(&root) {
            for d in [repo.path(), repo.commondir()] {
                if let Ok(d) = d.canonicalize()
                    && !git_dirs.contains(&d)
                {
                    git_dirs.push(d);
                }
            }
        }
        Ok(Confine { root, git_dirs })
    }

    /// The repository's top directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `path` resolved, when it may be read; else why not. A path that does not exist is
    /// resolved through its directory, so that reading it still reports it missing.
    pub fn check(&self, path: &Path) -> Result<PathBuf, String> {
        let outside = || {
            format!(
                "`{}` is outside the repository `{}`",
                path.display(),
                self.root.display()
            )
        };
        let resolved = match path.canonicalize() {
            Ok(p) => p,
            Err(_) => match (path.parent(), path.file_name()) {
                (Some(dir), Some(name)) => match dir.canonicalize() {
                    Ok(d) => d.join(name),
                    // Its directory is missing too, so nothing can be read there; judged by
                    // its spelling, so that reading it reports it missing.
                    Err(_) => super::normalize(path),
                },
                _ => return Err(outside()),
            },
        };
        let Ok(rel) = resolved.strip_prefix(&self.root) else {
            return Err(outside());
        };
        let in_git = self.git_dirs.iter().any(|g| resolved.starts_with(g))
            || rel
                .components()
                .any(|c| matches!(c, Component::Normal(n) if n == ".git"));
        if in_git {
            return Err(format!(
                "`{}` is in the repository's git directory",
                path.display()
            ));
        }
        Ok(resolved)
    }

    /// A git import's URL, when it names a repository inside the fence (`file://…` or a
    /// path); any other URL is refused, since what it reads cannot be checked.
    pub fn check_url(&self, url: &str) -> Result<(), String> {
        let path = url.strip_prefix("file://").unwrap_or(url);
        if path.contains("://") {
            return Err(format!(
                "`{url}` is not a repository inside `{}`",
                self.root.display()
            ));
        }
        self.check(Path::new(path)).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_out_of_the_root_or_in_its_git_directory_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("loops")).unwrap();
        git2::Repository::init(&root).unwrap();
        std::fs::write(root.join("loops/a.kdl"), "").unwrap();
        std::fs::write(dir.path().join("outside.kdl"), "").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("loops/link.kdl")).unwrap();
        let c = Confine::for_checkout(&root).unwrap();
        assert!(c.check(&root.join("loops/a.kdl")).is_ok());
        assert!(c.check(&root.join("loops/missing.kdl")).is_ok());
        assert!(c.check(&root.join("no/such/dir.kdl")).is_ok());
        assert!(c.check(&root.join("no/../../such.kdl")).is_err());
        assert!(c.check(&root.join("loops/../../outside.kdl")).is_err());
        assert!(c.check(Path::new("/etc/passwd")).is_err());
        assert!(c.check(&root.join("loops/link.kdl")).is_err());
        assert!(c.check(&root.join(".git/config")).is_err());
        assert!(c.check_url("file:///etc").is_err());
        assert!(c.check_url("https://example.com/x.git").is_err());
        assert!(c.check_url(&format!("file://{}", root.display())).is_ok());
    }
}
