//! A repository root in, the list of its files out: what `each=` globs are matched against.

use std::path::{Path, PathBuf};

/// The repository a loop file belongs to: the git work tree that contains it, else `fallback`.
pub(crate) fn discover_root(entry: &Path, fallback: &Path) -> PathBuf {
    let dir = entry
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    git2::Repository::discover(dir)
        .ok()
        .and_then(|r| r.workdir().map(Path::to_path_buf))
        .unwrap_or_else(|| fallback.to_path_buf())
}

/// Repository-relative paths with `/` separators, sorted: the tracked files of a git work tree,
/// or every file below `root` (but `.git` and `.mvk`) when it is not one.
pub(crate) fn list_files(root: &Path) -> Result<Vec<String>, String> {
    if let Ok(repo) = git2::Repository::open(root)
        && !repo.is_bare()
    {
        let index = repo.index().map_err(|e| {
            format!(
                "cannot read the git index of `{}`: {}",
                root.display(),
                e.message()
            )
        })?;
        let mut files: Vec<String> = index
            .iter()
            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
            .collect();
        files.sort();
        files.dedup();
        return Ok(files);
    }
    let mut files = Vec::new();
    let walker = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            !(e.file_type().is_dir() && matches!(e.file_name().to_str(), Some(".git" | ".mvk")))
        });
    for entry in walker {
        let entry = entry.map_err(|e| format!("cannot list `{}`: {e}", root.display()))?;
        if !entry.file_type().is_file() {
            continue;
        }
        if let Ok(rel) = entry.path().strip_prefix(root) {
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            files.push(parts.join("/"));
        }
    }
    files.sort();
    Ok(files)
}
