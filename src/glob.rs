//! Seal and scope glob patterns in; compiled matchers and pattern errors out. The one place
//! repository path patterns are written and compiled: `resolve` holds `scope`, `seal` and
//! `each` to these rules at compile time, and the seal ([`crate::run::git::seal`]), the scheduler's
//! scope overlap and the generic gates' matcher (`mvk __glob-match`) match by them at run time.
//!
//! Pattern rules (repository-relative, case-sensitive, anchored at the repository root):
//! - a pattern without glob characters (`*`, `?`, `[`, `{`, `\`) is a literal path;
//! - `*` and `?` never cross `/`; `**` does (`tests/**`, `**/*.snap`);
//! - a path is covered when it, or any directory containing it, matches a pattern, so the plain
//!   directory pattern `tests` (or `tests/`) covers everything under `tests/`, and `tests/*`
//!   covers nested directories of `tests/` whole;
//! - a leading `./` or `/` and a trailing `/` are ignored; `.` and `..` components are refused.

use std::collections::BTreeSet;

use globset::{GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

/// A pattern the rules refuse, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid glob `{pattern}`: {reason}")]
pub(crate) struct PatternError {
    pub(crate) pattern: String,
    pub(crate) reason: String,
}

/// A compiled set of repository path patterns (the rules in the module docs).
#[derive(Debug, Clone)]
pub(crate) struct PathSet {
    patterns: Vec<String>,
    literals: BTreeSet<String>,
    globs: GlobSet,
}

impl PathSet {
    /// Compiles `patterns` (see the module docs for the rules).
    pub(crate) fn new(patterns: &[String]) -> Result<PathSet, PatternError> {
        let mut normalized = Vec::with_capacity(patterns.len());
        let mut literals = BTreeSet::new();
        let mut globs = GlobSetBuilder::new();
        for raw in patterns {
            let (pattern, glob) = compile(raw)?;
            match glob {
                Some(glob) => {
                    globs.add(glob);
                }
                None => {
                    literals.insert(pattern.to_string());
                }
            }
            normalized.push(pattern.to_string());
        }
        let globs = globs.build().map_err(|e| PatternError {
            pattern: patterns.join(", "),
            reason: e.to_string(),
        })?;
        Ok(PathSet {
            patterns: normalized,
            literals,
            globs,
        })
    }

    /// Whether the repository-relative `path` (`/`-separated) is covered: it or one of the
    /// directories containing it matches a pattern.
    pub(crate) fn covers(&self, path: &str) -> bool {
        let path = normalize(path);
        if path.is_empty() {
            return false;
        }
        let prefixes = path.match_indices('/').map(|(i, _)| &path[..i]);
        prefixes
            .chain(std::iter::once(path))
            .any(|candidate| self.literals.contains(candidate) || self.globs.is_match(candidate))
    }

    /// The directories (or files) every covered path lies under: each pattern's leading
    /// components up to the first one with a wildcard. `None` when a pattern starts with one
    /// (`**/*.snap`), so that the whole tree must be looked at.
    pub(crate) fn roots(&self) -> Option<BTreeSet<String>> {
        let mut roots = BTreeSet::new();
        for pattern in &self.patterns {
            let literal: Vec<&str> = pattern
                .split('/')
                .take_while(|c| !c.contains(['*', '?', '[', '{', '\\']))
                .collect();
            if literal.is_empty() {
                return None;
            }
            roots.insert(literal.join("/"));
        }
        // A root inside another is walked with it.
        let all = roots.clone();
        roots.retain(|r| {
            !all.iter()
                .any(|o| o != r && r.starts_with(o.as_str()) && r[o.len()..].starts_with('/'))
        });
        Some(roots)
    }

    /// Whether no path is covered at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns as compiled (after dropping `./`, leading and trailing `/`).
    pub(crate) fn patterns(&self) -> &[String] {
        &self.patterns
    }
}

fn normalize(path: &str) -> &str {
    let mut p = path;
    loop {
        let before = p.len();
        p = p.trim_start_matches("./").trim_start_matches('/');
        if p.len() == before {
            break;
        }
    }
    p.trim_end_matches('/')
}

/// Whether `raw` is a pattern [`PathSet::new`] accepts (the rules in the module docs): `mvk
/// check` holds `scope` and `seal` to it, so that no loop compiles whose globs the seal or the
/// generic gates' matcher (`mvk __glob-match`) would refuse at run time. Err is why not.
pub(crate) fn check(raw: &str) -> Result<(), PatternError> {
    compile(raw).map(|_| ())
}

/// `raw` normalized, and compiled when it is a glob rather than a literal path.
fn compile(raw: &str) -> Result<(&str, Option<globset::Glob>), PatternError> {
    let invalid = |reason: &str| PatternError {
        pattern: raw.to_string(),
        reason: reason.to_string(),
    };
    let pattern = normalize(raw);
    if pattern.is_empty() {
        return Err(invalid("it names no path"));
    }
    if pattern
        .split('/')
        .any(|c| c == "." || c == ".." || c.is_empty())
    {
        return Err(invalid(
            "`.`, `..` and empty components are not allowed; use a path from the repository root",
        ));
    }
    if !pattern.contains(['*', '?', '[', '{', '\\']) {
        return Ok((pattern, None));
    }
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| invalid(&e.kind().to_string()))?;
    Ok((pattern, Some(glob)))
}

/// Whether `text` is a glob at all, by globset's own syntax (default options, before the rules
/// above are applied): Err is what is wrong with it.
pub(crate) fn check_syntax(text: &str) -> Result<(), String> {
    // Text without a character globset gives a meaning to is a literal it accepts: a fan-out's
    // thousands of `scope "{{item}}"` paths need no parse each.
    if !text.contains(['*', '?', '[', ']', '{', '}', '\\']) {
        return Ok(());
    }
    globset::Glob::new(text)
        .map(|_| ())
        .map_err(|e| e.kind().to_string())
}

/// One glob matched against whole paths, `*` and `?` never crossing `/` (a fan-out's `each`, a
/// scope's component); `None` when it does not compile.
pub(crate) fn matcher(glob: &str) -> Option<GlobMatcher> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

/// `path` as a pattern that matches it literally, glob characters escaped.
pub(crate) fn escape(path: &str) -> String {
    globset::escape(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(patterns: &[&str]) -> PathSet {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        PathSet::new(&patterns).unwrap()
    }

    // Guards the shortcut for literal text: what it accepts without a parse, globset accepts.
    #[test]
    fn literal_text_is_accepted_as_globset_accepts_it() {
        for text in [
            "items/a b.txt",
            "src/lib.rs",
            "a,b",
            "!x",
            "",
            "a//b",
            "-x/+y=z",
        ] {
            assert!(check_syntax(text).is_ok(), "{text}");
            assert!(globset::Glob::new(text).is_ok(), "{text}");
        }
        for text in ["a]", "a}", "[a", "{a", "a\\"] {
            assert_eq!(
                check_syntax(text).is_ok(),
                globset::Glob::new(text).is_ok(),
                "{text}"
            );
        }
    }

    #[test]
    fn pattern_matching_rules() {
        let s = set(&[
            "tests",
            "src/*.rs",
            "**/*.snap",
            "docs/**",
            "./a b/c d.txt",
            "/top/",
        ]);
        assert!(s.covers("tests"));
        assert!(s.covers("tests/pagination.rs"));
        assert!(s.covers("tests/fixtures/deep/x.json"));
        assert!(!s.covers("tests2/x.rs"), "prefix is not a directory");
        assert!(!s.covers("src/tests/x.rs"), "anchored at the root");
        assert!(s.covers("src/lib.rs"));
        assert!(!s.covers("src/sub/lib.rs"), "`*` does not cross `/`");
        assert!(s.covers("a/b/c.snap"));
        assert!(s.covers("x.snap"));
        assert!(s.covers("docs/guide/intro.md"));
        assert!(!s.covers("docs.md"));
        assert!(s.covers("a b/c d.txt"));
        assert!(!s.covers("a b/c.txt"));
        assert!(s.covers("top/anything"));
        assert_eq!(s.patterns()[4], "a b/c d.txt");
        assert!(!s.is_empty());

        let nested = set(&["tests/*"]);
        assert!(nested.covers("tests/a.rs"));
        assert!(
            nested.covers("tests/fixtures/data.json"),
            "matched dir covers its content"
        );
        assert!(!nested.covers("tests"));

        let literal = set(&["tests/pagination.rs"]);
        assert!(literal.covers("tests/pagination.rs"));
        assert!(!literal.covers("tests/pagination.rs.bak"));
        assert!(!literal.covers("tests/other.rs"));

        assert!(set(&[]).is_empty());
        assert!(!set(&[]).covers("anything"));
    }
}
