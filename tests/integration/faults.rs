//! The fault corpus: mvk's own footing gives way — the ledger corrupted or held by another
//! process, a stale git index lock in the main checkout, the worktree deleted under a running
//! attempt, the agent's program missing. Each is a clear error (or a clear outcome), and
//! nothing is lost: the target branch is untouched or holds exactly the accepted change.

use std::fs;

use super::apply::{FIXED, Fixture, simple_loop};

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_corrupted_ledger_is_refused_by_name_and_nothing_runs() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=2"));
    fs::create_dir_all(f.root().join(".mvk")).unwrap();
    fs::write(
        f.root().join(".mvk/ledger.db"),
        "this is not a database\n".repeat(100),
    )
    .unwrap();
    let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(err.contains("ledger.db"), "{err}");
    assert!(!f.state("calls").exists(), "no agent ran");
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn a_ledger_held_by_another_process_is_a_clear_error_after_waiting() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=2"));
    f.apply().expect_code(0);
    let tip = f.tip("main");
    let db = rusqlite::Connection::open(f.root().join(".mvk/ledger.db")).unwrap();
    db.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(err.contains("ledger"), "{err}");
    assert!(err.contains("locked") || err.contains("busy"), "{err}");
    assert_eq!(f.tip("main"), tip, "nothing landed");
    db.execute_batch("ROLLBACK").unwrap();
}

#[test]
fn a_stale_index_lock_in_the_main_checkout_stops_the_landing_and_keeps_the_change() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=2"));
    fs::write(f.root().join(".git/index.lock"), "").unwrap();
    let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    let err = stderr_of(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(4),
        "a person decides: {stdout}{err}"
    );
    assert!(stdout.contains("index.lock"), "{stdout}{err}");
    assert_eq!(f.tip("main"), f.base, "main did not move");
    let run = stdout.lines().next().unwrap().trim().to_string();
    assert_eq!(
        f.show(&format!("mvk/{run}/t/1"), "src/calc.sh").as_deref(),
        Some(FIXED),
        "the accepted change stays on its branch"
    );
}

#[test]
fn a_worktree_deleted_under_its_attempt_fails_the_attempt_not_mvk() {
    let f = Fixture::new(&simple_loop("self_destruct.sh", "budget iterations=2"));
    let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    let err = stderr_of(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // The same failure twice is the brake: stuck.
    assert_eq!(out.status.code(), Some(2), "{stdout}{err}");
    assert!(
        stdout.contains("leaves its worktree in place"),
        "{stdout}{err}"
    );
    let calls = fs::read_to_string(f.state("calls")).unwrap();
    assert_eq!(
        calls.lines().count(),
        2,
        "the second attempt got a rebuilt worktree"
    );
    assert_eq!(f.tip("main"), f.base);
}
