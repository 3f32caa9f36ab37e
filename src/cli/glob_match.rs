//! `mvk __glob-match [--invert] [--] GLOB…` (hidden, not a command): lines naming repository
//! paths in on stdin, the lines whose path matches a glob (or, with `--invert`, none) out on
//! stdout, unchanged.
//!
//! The stdlib's generic gates (`std/gates/generic.kdl`) pipe `git diff --name-only` or
//! `--numstat` through it, as `"$MVK_EXE" __glob-match`, so that their globs (`scope`, `also`,
//! `exclude`, `paths`) match exactly as the loop's own `scope` and `seal` do: the seal's matcher
//! ([`crate::glob::PathSet`]: `*` within a directory, `**` across, `{a,b}`, and a path is covered
//! when it or a directory containing it matches). git's `:(glob)` pathspecs know no `{a,b}`.
//!
//! A line is a path, or tab-separated fields whose last one is the path (`--numstat`); a path
//! git quoted (`"a\tb"`, C-style) is unquoted before it is matched. An invalid glob is exit 2
//! with a message on stderr; nothing else fails.

use std::ffi::OsString;
use std::io::{self, BufRead, Write};
use std::process::ExitCode;

use crate::glob::{PathSet, PatternError};

/// The argument that selects this helper, before clap sees the command line.
pub(crate) const HELPER: &str = "__glob-match";

/// Runs the helper on the arguments after [`HELPER`].
pub(crate) fn run(args: &[OsString]) -> ExitCode {
    let mut invert = false;
    let mut globs = Vec::new();
    let mut options = true;
    for arg in args {
        let Some(arg) = arg.to_str() else {
            return refuse(&format!("a glob is not UTF-8: `{}`", arg.to_string_lossy()));
        };
        match arg {
            "--invert" if options => invert = true,
            "--" if options => options = false,
            _ if options && arg.starts_with("--") => {
                return refuse(&format!("unknown option `{arg}`"));
            }
            _ => globs.push(arg.to_string()),
        }
    }
    let matcher = match Matcher::new(&globs) {
        Ok(m) => m,
        Err(e) => return refuse(&e.to_string()),
    };
    let stdin = io::stdin().lock();
    let mut stdout = io::BufWriter::new(io::stdout().lock());
    match matcher.filter(stdin, &mut stdout, invert) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => refuse(&format!("cannot copy the lines: {e}")),
    }
}

fn refuse(why: &str) -> ExitCode {
    super::printer::err_line(&format!("mvk {HELPER}: {why}"));
    ExitCode::from(2)
}

/// Globs compiled with the seal's rules; none matches nothing.
pub(crate) struct Matcher {
    paths: Option<PathSet>,
}

impl Matcher {
    pub(crate) fn new(globs: &[String]) -> Result<Matcher, PatternError> {
        let paths = if globs.is_empty() {
            None
        } else {
            Some(PathSet::new(globs)?)
        };
        Ok(Matcher { paths })
    }

    /// Whether the line's path (its last tab-separated field, unquoted) matches.
    pub(crate) fn matches_line(&self, line: &[u8]) -> bool {
        let Some(paths) = &self.paths else {
            return false;
        };
        let field = line.rsplit(|b| *b == b'\t').next().unwrap_or(line);
        let path = unquote(field);
        paths.covers(&String::from_utf8_lossy(&path))
    }

    /// Copies the lines of `input` that match (or, `invert`ed, do not) to `output`.
    pub(crate) fn filter(
        &self,
        mut input: impl BufRead,
        output: &mut impl Write,
        invert: bool,
    ) -> io::Result<()> {
        let mut line = Vec::new();
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text.is_empty() {
                continue;
            }
            if self.matches_line(text) != invert {
                output.write_all(text)?;
                output.write_all(b"\n")?;
            }
        }
        output.flush()
    }
}

/// git's C-style quoting undone (`"a\tb"`, `"caf\303\251"`); anything else as it is.
fn unquote(field: &[u8]) -> Vec<u8> {
    let Some(inner) = field
        .strip_prefix(b"\"")
        .and_then(|f| f.strip_suffix(b"\""))
    else {
        return field.to_vec();
    };
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let b = inner[i];
        i += 1;
        if b != b'\\' || i == inner.len() {
            out.push(b);
            continue;
        }
        let e = inner[i];
        i += 1;
        match e {
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b't' => out.push(b'\t'),
            b'n' => out.push(b'\n'),
            b'v' => out.push(0x0b),
            b'f' => out.push(0x0c),
            b'r' => out.push(b'\r'),
            b'0'..=b'3'
                if inner.len() >= i + 2
                    && inner[i..i + 2].iter().all(|d| (b'0'..=b'7').contains(d)) =>
            {
                out.push((e - b'0') * 64 + (inner[i] - b'0') * 8 + (inner[i + 1] - b'0'));
                i += 2;
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(globs: &[&str], input: &str, invert: bool) -> String {
        let globs: Vec<String> = globs.iter().map(|g| g.to_string()).collect();
        let m = Matcher::new(&globs).expect("valid globs");
        let mut out = Vec::new();
        m.filter(input.as_bytes(), &mut out, invert)
            .expect("filters");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn braces_alternate_as_in_scope() {
        let paths = "src/a/x.rs\nsrc/b/deep/y.rs\nsrc/c/z.rs\ndocs/a.md\n";
        assert_eq!(
            kept(&["src/{a,b}/**"], paths, false),
            "src/a/x.rs\nsrc/b/deep/y.rs\n"
        );
        assert_eq!(kept(&["src/{a,b}/**", "docs"], paths, true), "src/c/z.rs\n");
    }

    #[test]
    fn numstat_lines_match_on_their_last_field() {
        let stat = "3\t1\tCargo.lock\n2\t0\tsrc/lib.rs\n-\t-\tlogo.png\n";
        assert_eq!(
            kept(&["{Cargo.lock,*.png}"], stat, true),
            "2\t0\tsrc/lib.rs\n"
        );
    }

    #[test]
    fn quoted_paths_are_unquoted_before_matching() {
        assert_eq!(unquote(br#""a\tb\"c\\d""#), b"a\tb\"c\\d".to_vec());
        assert_eq!(unquote(br#""caf\303\251""#), "café".as_bytes().to_vec());
        assert_eq!(unquote(b"plain"), b"plain".to_vec());
        // The line is copied as git printed it.
        assert_eq!(
            kept(&["src/*.rs"], "\"src/t\\tab.rs\"\nother\n", false),
            "\"src/t\\tab.rs\"\n"
        );
    }

    #[test]
    fn no_glob_matches_nothing_and_a_bad_one_is_refused() {
        assert_eq!(kept(&[], "a\nb\n", false), "");
        assert_eq!(kept(&[], "a\nb\n", true), "a\nb\n");
        assert!(Matcher::new(&["src/{a".to_string()]).is_err());
    }
}
