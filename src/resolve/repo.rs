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
        if let Some(files) = std::fs::read(repo.path().join("index"))
            .ok()
            .and_then(|bytes| index_paths(&bytes))
        {
            return Ok(files);
        }
        return indexed(&repo).map_err(|e| {
            format!(
                "cannot read the git index of `{}`: {}",
                root.display(),
                e.message()
            )
        });
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

/// The paths the repository's index lists, sorted and each once, as libgit2 reads them.
fn indexed(repo: &git2::Repository) -> Result<Vec<String>, git2::Error> {
    let mut files: Vec<String> = repo
        .index()?
        .iter()
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

/// The paths an index file lists, sorted and each once, read without libgit2: it checks the
/// file's SHA-1 over every byte (a few milliseconds for a 20,000-file repository, on every
/// compile), which a list of names for globs does not need. `None` for anything but a plain
/// SHA-1 index of version 2, 3 or 4 without a mandatory extension (a split or sparse index):
/// libgit2 reads those, or says why it cannot.
pub(crate) fn index_paths(bytes: &[u8]) -> Option<Vec<String>> {
    const HASH: usize = 20;
    let be32 = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    if bytes.get(..4)? != b"DIRC" || bytes.len() < 12 + HASH {
        return None;
    }
    let version = be32(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = usize::try_from(be32(8)?).ok()?;
    let body = bytes.len() - HASH;
    let mut at = 12;
    let mut files: Vec<String> = Vec::with_capacity(count.min(body / 62));
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        // Stat data (40 bytes) and the object id, then the flags.
        let flags_at = at + 40 + HASH;
        let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let mut path_at = flags_at + 2;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return None;
            }
            path_at += 2;
        }
        let path = if version == 4 {
            // The length of the previous path to drop (a varint), then the rest of this one.
            let (strip, used) = varint(bytes.get(path_at..body)?)?;
            let rest_at = path_at + used;
            let len = bytes.get(rest_at..body)?.iter().position(|&b| b == 0)?;
            let keep = previous.len().checked_sub(usize::try_from(strip).ok()?)?;
            previous.truncate(keep);
            previous.extend_from_slice(&bytes[rest_at..rest_at + len]);
            at = rest_at + len + 1;
            previous.clone()
        } else {
            let len = bytes.get(path_at..body)?.iter().position(|&b| b == 0)?;
            let path = bytes[path_at..path_at + len].to_vec();
            // Padded with NULs to a multiple of 8 bytes, at least one.
            let entry = path_at + len - at;
            at += (entry + 8) & !7;
            path
        };
        if at > body {
            return None;
        }
        files.push(String::from_utf8_lossy(&path).into_owned());
    }
    // Extensions: a mandatory one (its name starts with a lower-case letter) changes what the
    // entries mean; optional ones (caches) do not.
    while at + 8 <= body {
        let name = bytes.get(at..at + 4)?;
        if !name[0].is_ascii_uppercase() {
            return None;
        }
        let size = usize::try_from(be32(at + 4)?).ok()?;
        at = at.checked_add(8)?.checked_add(size)?;
    }
    if at != body {
        return None;
    }
    files.sort();
    files.dedup();
    Some(files)
}

/// Git's offset varint of the index's version 4 (each continuation adds one before shifting),
/// and how many bytes it took.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        if i > 0 {
            value = value.checked_add(1)?.checked_shl(7)?;
        }
        value |= u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    /// What libgit2 lists of the same index.
    fn libgit2_paths(root: &Path) -> Vec<String> {
        indexed(&git2::Repository::open(root).expect("open")).expect("index")
    }

    #[test]
    fn reads_every_version_git_writes_as_libgit2_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        git(root, &["init", "-q"]);
        for (i, path) in [
            "a.txt",
            "src/lib.rs",
            "src/deep/er/x.rs",
            "src/deep/y.rs",
            "tests/long-name-to-share-a-prefix-with-the-next-one.txt",
            "tests/long-name-to-share-a-prefix-with-the-next-two.txt",
            "ünïcode/名前.txt",
        ]
        .iter()
        .enumerate()
        {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(&full, format!("{i}\n")).expect("write");
        }
        git(root, &["add", "-A"]);
        // An intent-to-add entry sets an extended flag (version 3).
        std::fs::write(root.join("later.txt"), "l").expect("write");
        git(root, &["add", "-N", "later.txt"]);
        let index = root.join(".git").join("index");
        for version in ["3", "4", "2"] {
            if version == "2" {
                git(root, &["rm", "-q", "--cached", "later.txt"]);
            }
            git(root, &["update-index", "--index-version", version]);
            let bytes = std::fs::read(&index).expect("read index");
            assert_eq!(
                index_paths(&bytes),
                Some(libgit2_paths(root)),
                "version {version}"
            );
        }
        // A cache extension (the tree cache) is read past.
        git(root, &["write-tree"]);
        let bytes = std::fs::read(&index).expect("read index");
        assert_eq!(index_paths(&bytes), Some(libgit2_paths(root)));
    }

    #[test]
    fn leaves_what_it_does_not_know_to_libgit2() {
        assert_eq!(index_paths(b""), None);
        assert_eq!(index_paths(b"DIRC\0\0\0\x05\0\0\0\0"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        git(root, &["init", "-q"]);
        std::fs::write(root.join("a"), "a").expect("write");
        git(root, &["add", "-A"]);
        let good = std::fs::read(root.join(".git").join("index")).expect("read");
        // Cut anywhere, it is refused, never misread.
        for cut in 0..good.len() - 20 {
            let mut bad = good[..cut].to_vec();
            bad.extend_from_slice(&[0; 20]);
            assert_ne!(
                index_paths(&bad),
                Some(vec!["a".to_string()]),
                "cut at {cut}"
            );
        }
        // A mandatory extension (a split index's `link`) is refused.
        git(root, &["update-index", "--split-index"]);
        let split = std::fs::read(root.join(".git").join("index")).expect("read");
        assert_eq!(index_paths(&split), None);
    }
}
