//! Two trees in; out, the files whose entries differ between them, found by reading only the
//! subtrees whose ids differ.
//!
//! libgit2's tree-to-tree diff walks both trees whole, inflating every subtree of a 20,000-file
//! repository (~400 objects) to find the two files an attempt changed; git compares subtree ids
//! and skips the equal ones, as this does. Callers that need more than the changed paths (rename
//! detection) hand these paths to libgit2's diff as its path list.

use std::collections::BTreeMap;

use git2::{ObjectType, Oid, Repository, Tree};

/// One file-level entry that differs between the trees: its id and mode on each side (`None`
/// where that side has no file at this path). Symlinks and submodules are files here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Changed {
    pub(crate) path: Vec<u8>,
    pub(crate) old: Option<(Oid, i32)>,
    pub(crate) new: Option<(Oid, i32)>,
}

/// The entries of files that differ between OLD and NEW, in path order (bytes). A path that is
/// a file on one side and a directory on the other shows as that file, and each file under the
/// directory, on its own side.
pub(crate) fn changed(
    repo: &Repository,
    old: &Tree<'_>,
    new: &Tree<'_>,
) -> Result<Vec<Changed>, git2::Error> {
    let mut out = Vec::new();
    if old.id() != new.id() {
        walk(repo, Some(old), Some(new), &[], &mut out)?;
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The paths of [`changed`], each once.
pub(crate) fn changed_paths(
    repo: &Repository,
    old: &Tree<'_>,
    new: &Tree<'_>,
) -> Result<Vec<Vec<u8>>, git2::Error> {
    Ok(changed(repo, old, new)?
        .into_iter()
        .map(|c| c.path)
        .collect())
}

/// One side's entry at a name: id, mode, whether it is a tree.
type Entry = (Oid, i32, bool);

fn entries(tree: Option<&Tree<'_>>) -> BTreeMap<Vec<u8>, Entry> {
    tree.map(|t| {
        t.iter()
            .map(|e| {
                (
                    e.name_bytes().to_vec(),
                    (e.id(), e.filemode(), e.kind() == Some(ObjectType::Tree)),
                )
            })
            .collect()
    })
    .unwrap_or_default()
}

fn walk(
    repo: &Repository,
    old: Option<&Tree<'_>>,
    new: Option<&Tree<'_>>,
    prefix: &[u8],
    out: &mut Vec<Changed>,
) -> Result<(), git2::Error> {
    let old = entries(old);
    let new = entries(new);
    let mut names: Vec<&Vec<u8>> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let (a, b) = (old.get(name), new.get(name));
        if a.map(|e| (e.0, e.1)) == b.map(|e| (e.0, e.1)) {
            continue;
        }
        let mut path = prefix.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name);
        let a_tree = a.filter(|e| e.2).map(|e| repo.find_tree(e.0)).transpose()?;
        let b_tree = b.filter(|e| e.2).map(|e| repo.find_tree(e.0)).transpose()?;
        let a_file = a.filter(|e| !e.2).map(|e| (e.0, e.1));
        let b_file = b.filter(|e| !e.2).map(|e| (e.0, e.1));
        if a_file.is_some() || b_file.is_some() {
            out.push(Changed {
                path: path.clone(),
                old: a_file,
                new: b_file,
            });
        }
        if a_tree.is_some() || b_tree.is_some() {
            walk(repo, a_tree.as_ref(), b_tree.as_ref(), &path, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository with a commit of FILES (path, content; a content starting with `->` is a
    /// symlink to the rest); returns the commit's tree id.
    fn commit(repo: &Repository, files: &[(&str, &str)]) -> Oid {
        let mut index = git2::Index::new().expect("index");
        for (path, content) in files {
            let (mode, bytes) = match content.strip_prefix("->") {
                Some(target) => (0o120000, target.as_bytes()),
                None => (0o100644, content.as_bytes()),
            };
            let id = repo.blob(bytes).expect("blob");
            let entry = git2::IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode,
                uid: 0,
                gid: 0,
                file_size: 0,
                id,
                flags: 0,
                flags_extended: 0,
                path: path.as_bytes().to_vec(),
            };
            index.add(&entry).expect("add");
        }
        index.write_tree_to(repo).expect("tree")
    }

    /// What libgit2's own diff (with type changes split, as a delete and an add) names.
    fn libgit2_paths(repo: &Repository, a: &Tree<'_>, b: &Tree<'_>) -> Vec<Vec<u8>> {
        let diff = repo
            .diff_tree_to_tree(Some(a), Some(b), None)
            .expect("diff");
        let mut paths: Vec<Vec<u8>> = diff
            .deltas()
            .flat_map(|d| [d.old_file(), d.new_file()])
            .filter_map(|f| f.path_bytes().map(<[u8]>::to_vec))
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    #[test]
    fn names_what_libgit2s_whole_diff_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let base = [
            ("a/b/c.txt", "c"),
            ("a/b/d.txt", "d"),
            ("a/e.txt", "e"),
            ("f", "f"),
            ("g/h.txt", "h"),
            ("same/x.txt", "x"),
            ("link", "->a"),
        ];
        let cases: Vec<Vec<(&str, &str)>> = vec![
            // one edit deep down
            vec![
                ("a/b/c.txt", "C"),
                ("a/b/d.txt", "d"),
                ("a/e.txt", "e"),
                ("f", "f"),
                ("g/h.txt", "h"),
                ("same/x.txt", "x"),
                ("link", "->a"),
            ],
            // a file becomes a directory, a directory a file, a link retargeted, one removed
            vec![
                ("a/b/c.txt", "c"),
                ("a/b/d.txt", "d"),
                ("a/e.txt", "e"),
                ("f/inner.txt", "i"),
                ("g", "now a file"),
                ("same/x.txt", "x"),
                ("link", "->f"),
            ],
            // a directory replaced by a symlink, a new directory
            vec![
                ("a", "->same"),
                ("f", "f"),
                ("g/h.txt", "h"),
                ("new/deep/n.txt", "n"),
                ("same/x.txt", "x"),
                ("link", "->a"),
            ],
            base.to_vec(),
        ];
        let old = repo.find_tree(commit(&repo, &base)).expect("tree");
        for files in cases {
            let new = repo.find_tree(commit(&repo, &files)).expect("tree");
            let ours = changed_paths(&repo, &old, &new).expect("changed");
            assert_eq!(ours, libgit2_paths(&repo, &old, &new), "{files:?}");
            let back = changed_paths(&repo, &new, &old).expect("changed");
            assert_eq!(back, libgit2_paths(&repo, &new, &old), "{files:?}");
        }
    }

    #[test]
    fn says_each_sides_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repository::init(dir.path()).expect("init");
        let old = repo
            .find_tree(commit(&repo, &[("x/y", "1"), ("z", "2")]))
            .expect("tree");
        let new = repo
            .find_tree(commit(&repo, &[("x/y", "3"), ("w", "4")]))
            .expect("tree");
        let found = changed(&repo, &old, &new).expect("changed");
        let blob = |s: &str| Oid::hash_object(ObjectType::Blob, s.as_bytes()).expect("hash");
        assert_eq!(
            found,
            vec![
                Changed {
                    path: b"w".to_vec(),
                    old: None,
                    new: Some((blob("4"), 0o100644)),
                },
                Changed {
                    path: b"x/y".to_vec(),
                    old: Some((blob("1"), 0o100644)),
                    new: Some((blob("3"), 0o100644)),
                },
                Changed {
                    path: b"z".to_vec(),
                    old: Some((blob("2"), 0o100644)),
                    new: None,
                },
            ]
        );
    }
}
