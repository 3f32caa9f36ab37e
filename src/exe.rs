//! mvk's own executable → its path, for every process mvk starts of itself: the sandbox's
//! trampoline and probe, the gates' `MVK_EXE`, the commands `mvk mcp` runs.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This executable's path, found once (`entry::run` asks first, at startup). Linux reads it from
/// `/proc/self/exe`, which says `… (deleted)` once the file has been replaced (a `cargo install`
/// or build during a long run), a path that runs nothing; the replacement does.
pub(crate) fn path() -> io::Result<&'static Path> {
    // `io::Error` is not `Clone`: keep what it said and say it again to each caller.
    static EXE: OnceLock<Result<PathBuf, (io::ErrorKind, String)>> = OnceLock::new();
    match EXE.get_or_init(|| {
        std::env::current_exe()
            .map(|exe| undeleted(exe, |p| p.exists()))
            .map_err(|e| (e.kind(), e.to_string()))
    }) {
        Ok(exe) => Ok(exe),
        Err((kind, message)) => Err(io::Error::new(*kind, message.clone())),
    }
}

/// `exe` without the ` (deleted)` Linux appends to a replaced executable's path, when a file is
/// at the path without it.
fn undeleted(exe: PathBuf, exists: impl Fn(&Path) -> bool) -> PathBuf {
    let Some(text) = exe.to_str() else {
        return exe;
    };
    match text.strip_suffix(" (deleted)") {
        Some(live) if exists(Path::new(live)) => PathBuf::from(live),
        _ => exe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a binary replaced during a run (`cargo install`) named itself to its gates as
    /// `…/mvk (deleted)`, so `"$MVK_EXE" __glob-match` failed every attempt; the sandbox's
    /// trampoline and the commands `mvk mcp` starts were run from that path too.
    #[test]
    fn a_replaced_executable_is_named_by_its_live_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let deleted = dir.path().join("mvk (deleted)");
        // The replacement is not there (yet): the path stays as the system gave it.
        assert_eq!(undeleted(deleted.clone(), |p| p.exists()), deleted);
        std::fs::write(dir.path().join("mvk"), "").expect("write");
        assert_eq!(undeleted(deleted, |p| p.exists()), dir.path().join("mvk"));
        let live = dir.path().join("mvk");
        assert_eq!(undeleted(live.clone(), |p| p.exists()), live);
    }

    /// Regression: the sandbox's trampoline and probe and the commands `mvk mcp` runs asked the
    /// system for the path themselves (`std::env::current_exe()`), ` (deleted)` and all. Every
    /// process mvk starts of itself takes the path from here: outside this module and tests, no
    /// code asks the system.
    /// Where `text`'s inline test module begins, if it has one.
    fn test_module_start(text: &str) -> Option<usize> {
        let mut from = 0;
        while let Some(i) = text[from..].find("#[cfg(test)]\nmod ") {
            let at = from + i;
            let line_end = text[at..]
                .match_indices('\n')
                .nth(1)
                .map_or(text.len(), |(j, _)| at + j);
            if text[at..line_end].trim_end().ends_with('{') {
                return Some(at);
            }
            from = line_end;
        }
        None
    }

    #[test]
    fn no_other_code_asks_the_system_for_the_path() {
        fn scan(dir: &Path, found: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).expect("src/ is readable") {
                let path = entry.expect("an entry").path();
                if path.is_dir() {
                    scan(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("src/exe.rs")
                    // A module's unit tests in a file of their own (`#[cfg(test)] mod tests;`).
                    && !path.ends_with("tests.rs")
                {
                    let text = std::fs::read_to_string(&path).expect("a source file");
                    // Tests re-run their own binary, which nothing replaces: the file is read up to
                    // its inline test module (`#[cfg(test)]` then `mod NAME {`); a test-only item
                    // or a test module kept in a file of its own (`mod tests;`) is no cut.
                    let code = test_module_start(&text).map_or(text.as_str(), |i| &text[..i]);
                    if code.contains("current_exe") {
                        found.push(path.display().to_string());
                    }
                }
            }
        }
        let mut found = Vec::new();
        scan(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(found.is_empty(), "use `crate::exe::path()` in {found:?}");
    }
}
