//! [`Run`]: what one `mvk apply` did (its exit code, events, branches), and the checks of
//! processes and of `main` the tests share.

// The helpers unwrap too: a panic there is the failure report.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;

/// What one `mvk apply` did.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) id: String,
    /// `.mvk/runs/<run>`.
    pub(crate) dir: PathBuf,
    pub(crate) events: Vec<Value>,
    pub(crate) raw_events: String,
    pub(crate) context: String,
}

impl Run {
    /// Everything worth seeing when an assertion fails.
    pub(crate) fn why(&self) -> String {
        format!("{}\n--- events.jsonl\n{}", self.context, self.raw_events)
    }

    pub(crate) fn expect_code(&self, code: i32) {
        assert_eq!(self.code, code, "wrong exit code\n{}", self.why());
    }

    /// The events called NAME, in order.
    pub(crate) fn named(&self, name: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == name).collect()
    }

    /// The one event called NAME.
    pub(crate) fn one(&self, name: &str) -> &Value {
        let found = self.named(name);
        assert_eq!(found.len(), 1, "expected one `{name}`\n{}", self.why());
        found[0]
    }

    pub(crate) fn none(&self, name: &str) {
        assert!(
            self.named(name).is_empty(),
            "expected no `{name}`\n{}",
            self.why()
        );
    }

    /// The attempt numbers of the `attempt.started` events.
    pub(crate) fn attempts(&self) -> Vec<u64> {
        self.named("attempt.started")
            .iter()
            .map(|e| e["attempt"].as_u64().unwrap())
            .collect()
    }

    /// `mvk/<run>/t/N`.
    pub(crate) fn branch(&self, attempt: u32) -> String {
        format!("mvk/{}/t/{attempt}", self.id)
    }

    pub(crate) fn attempt_dir(&self, attempt: u32) -> PathBuf {
        self.dir.join("t").join(attempt.to_string())
    }
}

/// Whether PID is a live process (a zombie is dead: it only waits to be reaped).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state letter follows the command name, which is in parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X'))
}

/// Sends SIGKILL to PID (no `kill` binary needed: a fresh machine may lack procps).
pub(crate) fn kill9(pid: u32) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Asserts the process whose pid an agent wrote to FILE is gone; kills it if not, so a
/// failing test leaves nothing behind either.
pub(crate) fn assert_gone(file: &Path, run: &Run) {
    let text = fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{} missing: {e}\n{}", file.display(), run.why()));
    let pid: u32 = text.trim().parse().unwrap();
    if alive(pid) {
        kill9(pid);
        panic!(
            "process {pid} ({}) outlived mvk apply\n{}",
            file.display(),
            run.why()
        );
    }
}

/// The run did not move `main`, and the repository's files still hold the bug.
pub(crate) fn assert_main_unchanged(fixture: &Fixture, run: &Run) {
    assert_eq!(
        fixture.tip("main"),
        fixture.base,
        "main moved\n{}",
        run.why()
    );
    assert_eq!(
        fs::read_to_string(fixture.root().join("src/calc.sh")).unwrap(),
        CALC,
        "the checked-out files changed"
    );
    run.none("merge.done");
}

/// `main` holds the fix, in history and in the checked-out files, and the checkout is clean.
pub(crate) fn assert_main_fixed(fixture: &Fixture, run: &Run) {
    assert_eq!(
        fixture.show("main", "src/calc.sh").as_deref(),
        Some(FIXED),
        "main lacks the fix\n{}",
        run.why()
    );
    assert_eq!(
        fs::read_to_string(fixture.root().join("src/calc.sh")).unwrap(),
        FIXED,
        "the checked-out main was not updated"
    );
    assert_eq!(
        fixture.git(&["status", "--porcelain"]),
        "",
        "the main worktree is not clean after landing"
    );
    assert_eq!(
        fixture.show("main", "tests/test_calc.sh").as_deref(),
        Some(TEST_CALC)
    );
}
