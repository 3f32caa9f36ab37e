//! Finding the repository a command works in: `--repo` or a loop file's path in; the root of
//! its git work tree out (and the file as shown relative to it).

use std::path::{Path, PathBuf};

use super::{Cli, CliError};

/// The repository to work in: `--repo`, else the git repository holding the loop file.
pub(crate) fn repository(cli: &Cli, file: &Path) -> Result<PathBuf, CliError> {
    repository_at(&start_of(cli, file))
}

/// The top of the checkout that holds `--repo` (or `file`): a linked worktree's own, not the
/// main checkout — what `mvk verify` checks, since that is where the change being judged is.
pub(crate) fn checkout(cli: &Cli, file: &Path) -> Result<PathBuf, CliError> {
    let (_, workdir) = discover(&start_of(cli, file))?;
    workdir.canonicalize().map_err(|e| CliError::Usage {
        message: format!("cannot resolve `{}`: {e}", workdir.display()),
        hint: None,
    })
}

/// Where a command about `file` looks for its repository: `--repo`, else the file's directory.
fn start_of(cli: &Cli, file: &Path) -> PathBuf {
    match &cli.repo {
        Some(r) => r.clone(),
        None => file
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf(),
    }
}

/// The main checkout of the git repository that holds `start`.
pub(crate) fn repository_at(start: &Path) -> Result<PathBuf, CliError> {
    let (repo, workdir) = discover(start)?;
    // A linked worktree works too, but the pool and `.mvk/` belong to the main checkout.
    let main = git2::Repository::open(repo.commondir())
        .ok()
        .and_then(|m| m.workdir().map(Path::to_path_buf))
        .unwrap_or(workdir);
    main.canonicalize().map_err(|e| CliError::Usage {
        message: format!("cannot resolve `{}`: {e}", main.display()),
        hint: None,
    })
}

/// The repository that holds `start` and the top of its checkout (refused when bare).
fn discover(start: &Path) -> Result<(git2::Repository, PathBuf), CliError> {
    let start = start.to_path_buf();
    let repo = git2::Repository::discover(&start).map_err(|e| CliError::Usage {
        message: format!(
            "`{}` is not inside a git repository: {}",
            start.display(),
            e.message()
        ),
        hint: Some(
            "run mvk inside the repository the loop works on, or name it with `--repo DIR`".into(),
        ),
    })?;
    let Some(workdir) = repo.workdir() else {
        return Err(CliError::Usage {
            message: format!(
                "`{}` is a bare repository; mvk needs a checkout",
                start.display()
            ),
            hint: None,
        });
    };
    let workdir = workdir.to_path_buf();
    Ok((repo, workdir))
}

pub(crate) fn shown_file(file: &Path, repo_root: &Path) -> String {
    let abs = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    abs.strip_prefix(repo_root)
        .map_or_else(|_| file.display().to_string(), |p| p.display().to_string())
}

/// The repository of the command: `--repo`, else the one holding the working directory.
pub(crate) fn repo_root(cli: &Cli) -> Result<PathBuf, CliError> {
    let start = match &cli.repo {
        Some(r) => r.clone(),
        None => PathBuf::from("."),
    };
    repository_at(&start)
}
