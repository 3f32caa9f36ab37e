//! mvk's own executable → its path, for every process mvk starts of itself: the sandbox's
//! trampoline and probe, the gates' `MVK_EXE`, the commands `mvk mcp` runs.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This executable's path, found once (`cli::run` asks first, at startup). Linux reads it from
/// `/proc/self/exe`, which says `… (deleted)` once the file has been replaced (a `cargo install`
/// or build during a long run), a path that runs nothing; the replacement does.
pub fn path() -> io::Result<&'static Path> {
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
}
