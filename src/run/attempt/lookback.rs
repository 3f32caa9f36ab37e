//! What an earlier attempt left for the next one to read, in: the repository, that attempt's base
//! and final commits, its failing output and the new worktree; out: its diff in the pieces a
//! prompt is cut at (a stat, then hunks from the smallest), and excerpts of the files its failure
//! names (`path:line`, `path:line:col`, Python's `File "path", line N`).

use std::collections::BTreeMap;
use std::path::{Component, Path};

use git2::{DiffFormat, DiffOptions, Oid, Repository};

use crate::prompt::Excerpt;
use crate::prompt::fit::DiffParts;

/// Lines shown either side of a line a failure names.
const WINDOW: u32 = 6;
/// Excerpts taken from one failure, at most: the prompt's budget cuts them further.
const MAX_EXCERPTS: usize = 12;
/// A file larger than this is not excerpted (a generated or data file, not a place to fix).
const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// A line longer than this is shown cut.
const MAX_LINE_CHARS: usize = 240;
/// A diff with more hunks than this keeps only the smallest ones (the prompt shows fewer anyway).
const MAX_HUNKS: usize = 400;

/// The change from `base` to `head`, as a stat and its hunks, each hunk with its file's header,
/// ordered from the smallest (so that a budget leaves out the largest first).
pub(super) fn diff_parts(
    repo: &Repository,
    attempt: u32,
    base: Oid,
    head: Oid,
) -> Result<DiffParts, git2::Error> {
    let old = repo.find_commit(base)?.tree()?;
    let new = repo.find_commit(head)?.tree()?;
    let mut opts = DiffOptions::new();
    opts.context_lines(3);
    let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts))?;
    let stats = diff.stats()?;
    let stat = stats
        .to_buf(git2::DiffStatsFormat::FULL, 72)?
        .as_str()
        .unwrap_or_default()
        .to_string();
    // file header text and hunks, keyed by (file index, hunk index)
    let mut headers: BTreeMap<usize, String> = BTreeMap::new();
    let mut hunks: BTreeMap<(usize, usize), String> = BTreeMap::new();
    let mut file = 0usize;
    let mut last_path: Option<Vec<u8>> = None;
    let mut hunk = 0usize;
    diff.print(DiffFormat::Patch, |delta, _hunk, line| {
        let path = delta
            .new_file()
            .path_bytes()
            .or_else(|| delta.old_file().path_bytes())
            .map(<[u8]>::to_vec);
        if path != last_path {
            if last_path.is_some() {
                file += 1;
            }
            last_path = path;
            hunk = 0;
        }
        let text = String::from_utf8_lossy(line.content());
        match line.origin() {
            'F' => {
                headers.entry(file).or_default().push_str(&text);
            }
            'H' => {
                hunk += 1;
                hunks.entry((file, hunk)).or_default().push_str(&text);
            }
            '+' | '-' | ' ' => {
                let h = hunks.entry((file, hunk)).or_default();
                h.push(line.origin());
                h.push_str(&text);
                if !text.ends_with('\n') {
                    h.push('\n');
                }
            }
            // "\ No newline at end of file" and the like.
            '=' | '>' | '<' => {
                hunks.entry((file, hunk)).or_default().push_str(&text);
            }
            // A binary file's "Binary files differ" comes with its header.
            'B' => {
                headers.entry(file).or_default().push_str(&text);
            }
            _ => {}
        }
        true
    })?;
    let mut pieces: Vec<String> = Vec::new();
    for (&(f, n), body) in &hunks {
        let header = headers.get(&f).map_or("", String::as_str);
        if n == 0 {
            // Lines before the first hunk header: a binary or mode change's own lines.
            pieces.push(format!("{header}{body}"));
        } else {
            pieces.push(format!("{}{body}", file_lines(header)));
        }
    }
    // Files with a header and no hunk at all (a mode change, an empty file, a binary file).
    for (f, header) in &headers {
        if !hunks.keys().any(|(hf, _)| hf == f) {
            pieces.push(header.clone());
        }
    }
    pieces.sort_by_key(String::len);
    pieces.truncate(MAX_HUNKS);
    Ok(DiffParts {
        attempt,
        stat,
        hunks: pieces,
    })
}

/// A file header's `--- a/…` and `+++ b/…` lines (the `diff --git` and `index` lines say
/// nothing a reader of a hunk needs).
fn file_lines(header: &str) -> String {
    let kept: String = header
        .lines()
        .filter(|l| l.starts_with("--- ") || l.starts_with("+++ "))
        .map(|l| format!("{l}\n"))
        .collect();
    if kept.is_empty() {
        header.to_string()
    } else {
        kept
    }
}

/// The `(path, line)` pairs `output` names, in the order it names them, without repeats.
pub(super) fn named_lines(output: &str) -> Vec<(String, u32)> {
    let mut found: Vec<(String, u32)> = Vec::new();
    let mut push = |path: &str, line: u32| {
        let path = path.trim_start_matches("./");
        if line > 0 && !path.is_empty() && !found.iter().any(|(p, l)| p == path && *l == line) {
            found.push((path.to_string(), line));
        }
    };
    for text in output.lines() {
        // Python: `  File "src/app.py", line 12, in f`.
        if let Some(at) = text.find("File \"") {
            let rest = &text[at + 6..];
            if let Some(end) = rest.find('"') {
                let after = &rest[end + 1..];
                if let Some(n) = after.strip_prefix(", line ") {
                    let digits: String = n.chars().take_while(char::is_ascii_digit).collect();
                    if let Ok(line) = digits.parse() {
                        push(&rest[..end], line);
                        continue;
                    }
                }
            }
        }
        // `path:line` and `path:line:col`, as compilers, linters and test runners print them;
        // a word is cut at spaces, quotes, parentheses and brackets.
        for word in text.split(|c: char| {
            c.is_whitespace() || matches!(c, '"' | '\'' | '(' | ')' | '[' | ']' | '<' | '>' | ',')
        }) {
            let Some((path, rest)) = split_location(word) else {
                continue;
            };
            push(path, rest);
        }
    }
    found
}

/// `src/lib.rs:12:5:` → (`src/lib.rs`, 12). A path must look like a file: a dot or a slash in
/// it, no scheme (`http://host:80` is not one).
fn split_location(word: &str) -> Option<(&str, u32)> {
    let colon = word.find(':')?;
    let (path, rest) = (&word[..colon], &word[colon + 1..]);
    if path.is_empty() || rest.starts_with("//") {
        return None;
    }
    if !(path.contains('.') || path.contains('/')) {
        return None;
    }
    let digits: &str = &rest[..rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len())];
    let line = digits.parse().ok()?;
    Some((path, line))
}

/// Excerpts of the files `output` names, as commit `at` has them (the failing attempt's own
/// commit: its line numbers are the ones the output names), when they are text there. A path is
/// relative, or absolute under `worktree` (the new attempt's) or `old_worktree` (where the
/// failing attempt ran). Reading from git, not the disk: no link or special file an agent left
/// can lead the read anywhere.
pub(super) fn excerpts(
    output: &str,
    repo: &Repository,
    at: Oid,
    worktree: &Path,
    old_worktree: Option<&Path>,
) -> Vec<Excerpt> {
    let Ok(tree) = repo.find_commit(at).and_then(|c| c.tree()) else {
        return Vec::new();
    };
    // Windows per file, in the order the files are first named; overlapping ones merged.
    let mut order: Vec<String> = Vec::new();
    let mut lines: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (path, line) in named_lines(output) {
        let Some(rel) = relative(&path, worktree, old_worktree) else {
            continue;
        };
        if !lines.contains_key(&rel) {
            order.push(rel.clone());
        }
        lines.entry(rel).or_default().push(line);
    }
    let mut out = Vec::new();
    for rel in order {
        let Some(text) = read_text(repo, &tree, &rel) else {
            continue;
        };
        let all: Vec<&str> = text.lines().collect();
        let count = u32::try_from(all.len()).unwrap_or(u32::MAX);
        let mut named = lines.remove(&rel).unwrap_or_default();
        named.retain(|&l| l <= count);
        let mut windows: Vec<(u32, u32, u32)> = Vec::new();
        for &l in &named {
            let (from, to) = (l.saturating_sub(WINDOW).max(1), (l + WINDOW).min(count));
            match windows
                .iter_mut()
                .find(|w| from <= w.1 + 1 && to + 1 >= w.0)
            {
                Some(w) => {
                    w.0 = w.0.min(from);
                    w.1 = w.1.max(to);
                }
                None => windows.push((from, to, l)),
            }
        }
        for (from, to, line) in windows {
            let width = to.to_string().len();
            let mut body = String::new();
            for n in from..=to {
                let Some(t) = all.get(n as usize - 1) else {
                    break;
                };
                let mark = if named.contains(&n) { '>' } else { ' ' };
                let t: String = if t.chars().count() > MAX_LINE_CHARS {
                    let cut: String = t.chars().take(MAX_LINE_CHARS).collect();
                    format!("{cut} […]")
                } else {
                    (*t).to_string()
                };
                body.push_str(&format!("{mark}{n:>width$} | {t}\n"));
            }
            out.push(Excerpt {
                path: rel.clone(),
                line,
                from,
                to,
                text: body,
            });
            if out.len() >= MAX_EXCERPTS {
                return out;
            }
        }
    }
    out
}

/// `path` as a path inside the worktree, when it names one: relative without `..`, or absolute
/// under the old or the new worktree.
fn relative(path: &str, worktree: &Path, old_worktree: Option<&Path>) -> Option<String> {
    let p = Path::new(path);
    let inner = if p.is_absolute() {
        [Some(worktree), old_worktree]
            .into_iter()
            .flatten()
            .find_map(|root| p.strip_prefix(root).ok())?
    } else {
        p
    };
    let normal = inner
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !normal || inner.as_os_str().is_empty() {
        return None;
    }
    let s = inner.to_str()?.trim_start_matches("./").to_string();
    // `.git` is mvk's link to the repository, never a file the agent should read as source.
    if s == ".git" || s.starts_with(".git/") {
        return None;
    }
    Some(s)
}

/// The text of `rel` in `tree`: a regular file (not a link, not a submodule), not too large,
/// valid UTF-8 without NULs in its first 8 KiB.
fn read_text(repo: &Repository, tree: &git2::Tree<'_>, rel: &str) -> Option<String> {
    let entry = tree.get_path(Path::new(rel)).ok()?;
    if !matches!(entry.filemode(), 0o100644 | 0o100755) {
        return None;
    }
    let blob = repo.find_blob(entry.id()).ok()?;
    let bytes = blob.content();
    if bytes.len() as u64 > MAX_FILE_BYTES || bytes.iter().take(8192).any(|&b| b == 0) {
        return None;
    }
    String::from_utf8(bytes.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locations_compilers_and_test_runners_print_are_found() {
        let out = "\
Traceback (most recent call last):
  File \"/w/slot/src/app.py\", line 12, in total
error[E0308]: mismatched types
  --> src/lib.rs:3:5
tests/test_number.py:40: AssertionError
    at Object.<anonymous> (/w/slot/lib/x.js:7:15)
./pkg/x_test.go:10: want 2
see https://example.com:443/path and version 1.2:3
";
        let found = named_lines(out);
        assert_eq!(
            found,
            vec![
                ("/w/slot/src/app.py".to_string(), 12),
                ("src/lib.rs".to_string(), 3),
                ("tests/test_number.py".to_string(), 40),
                ("/w/slot/lib/x.js".to_string(), 7),
                ("pkg/x_test.go".to_string(), 10),
                ("1.2".to_string(), 3),
            ]
        );
    }

    #[test]
    fn excerpts_are_windows_of_the_failing_commits_text_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let w = dir.path().join("new");
        std::fs::create_dir_all(w.join("src")).expect("mkdir");
        let repo = Repository::init(&w).expect("init");
        let body: String = (1..=40).map(|n| format!("line {n}\n")).collect();
        std::fs::write(w.join("src/app.py"), &body).expect("write");
        std::fs::write(w.join("src/blob.bin"), b"a\0b\n").expect("write");
        std::fs::write(dir.path().join("outside.py"), &body).expect("write");
        std::os::unix::fs::symlink("../outside.py", w.join("link.py")).expect("link");
        let mut index = repo.index().expect("index");
        for f in ["src/app.py", "src/blob.bin", "link.py"] {
            index.add_path(Path::new(f)).expect("add");
        }
        let tree = repo
            .find_tree(index.write_tree().expect("tree"))
            .expect("find");
        let sig = git2::Signature::now("t", "t@example.com").expect("sig");
        let at = repo
            .commit(None, &sig, &sig, "c", &tree, &[])
            .expect("commit");
        // What the disk holds now is not what the commit says: the commit is read.
        std::fs::write(w.join("src/app.py"), "changed since\n").expect("write");
        let out = "  File \"/old/slot/src/app.py\", line 20, in f\nsrc/app.py:22: boom\n\
                   src/blob.bin:1\n../outside.py:3\nlink.py:3\nsrc/app.py:99\nsrc/missing.py:1\n";
        let ex = excerpts(out, &repo, at, &w, Some(Path::new("/old/slot")));
        assert_eq!(ex.len(), 1, "{ex:?}");
        let e = &ex[0];
        assert_eq!(
            (e.path.as_str(), e.line, e.from, e.to),
            ("src/app.py", 20, 14, 28)
        );
        assert!(e.text.contains(">20 | line 20\n"), "{}", e.text);
        assert!(e.text.contains(">22 | line 22\n"), "{}", e.text);
        assert!(e.text.contains(" 14 | line 14\n"), "{}", e.text);
        assert!(!e.text.contains("line 29"), "{}", e.text);
    }
}
