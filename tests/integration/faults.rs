//! The fault corpus: mvk's own footing gives way — the ledger corrupted or held by another
//! process, the disk filling while it is written, a stale git index lock in the main checkout,
//! the worktree deleted under a running attempt, the agent's program missing, a template that
//! cannot render. Each is a clear error (or a clear outcome), and
//! nothing is lost: the target branch is untouched or holds exactly the accepted change.

use std::fs;

use super::support::{FIXED, Fixture, simple_loop};

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

/// Runs `mvk apply loops/t.kdl` with every file it writes limited to `bytes` (SIGXFSZ ignored,
/// as a full disk would: writes fail with an error instead of killing the process).
fn apply_with_file_limit(f: &Fixture, bytes: u64) -> std::process::Output {
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    // The fixture's environment, under `sh -c` so the shell can ignore SIGXFSZ before `prlimit`.
    let cmd = f.mvk_std();
    let script = format!(
        "trap '' XFSZ; exec prlimit --fsize={bytes} '{}' apply loops/t.kdl",
        mvk.display()
    );
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c").arg(script).current_dir(f.root());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh.output().unwrap()
}

#[test]
fn the_disk_filling_while_the_ledger_is_written_is_a_clear_error_and_a_resume_finishes_the_run() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=2"));
    // A first run makes the ledger; the second cannot grow it past the limit.
    f.apply().expect_code(0);
    f.git(&["reset", "-q", "--hard", &f.base]);
    let out = apply_with_file_limit(&f, 120_000);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(err.contains("ledger"), "{err}");
    assert!(err.contains("file-size limit"), "{err}");
    assert!(err.contains("mvk resume"), "{err}");
    assert_eq!(f.tip("main"), f.base, "nothing landed");
    let run = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let db = rusqlite::Connection::open(f.root().join(".mvk/ledger.db")).unwrap();
    let check: String = db
        .query_row("pragma integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let (runs, finished): (i64, Option<String>) = db
        .query_row(
            "select (select count(*) from runs), (select outcome from runs where id = ?1)",
            [&run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        runs, 2,
        "the first run and the stopped one are both recorded"
    );
    assert_eq!(finished, None, "the stopped run is not over: {err}");
    drop(db);
    let calls_before = fs::read_to_string(f.state("calls"))
        .unwrap()
        .lines()
        .count();
    // With room again, the run carries on where it stopped and finishes.
    let resumed = f.mvk().args(["resume", &run]).output().unwrap();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&resumed.stdout),
        stderr_of(&resumed)
    );
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    // Nothing ran twice: one landing, and one agent call per attempt the run recorded.
    let landed = f.git(&["rev-list", "--count", &format!("{}..main", f.base)]);
    assert_eq!(landed.trim(), "1");
    let db = rusqlite::Connection::open(f.root().join(".mvk/ledger.db")).unwrap();
    let attempts: i64 = db
        .query_row(
            "select count(*) from attempts where run = ?1 and agent_done_at is not null",
            [&run],
            |r| r.get(0),
        )
        .unwrap();
    let calls = fs::read_to_string(f.state("calls"))
        .unwrap()
        .lines()
        .count();
    assert_eq!(
        calls - 1,
        usize::try_from(attempts).unwrap(),
        "the stopped run's agent calls ({calls_before} before the resume, {calls} after, the first run's one included) are its finished attempts"
    );
}

#[test]
fn a_missing_agent_program_is_a_usage_error_naming_it() {
    for sandbox in ["", "sandbox"] {
        let text = super::support::loop_kdl(
            "agent bot { run \"no-such-agent-program\"; }\n",
            true,
            super::support::TESTS_GATE,
            &format!("{sandbox}\n    budget iterations=1"),
        );
        let f = Fixture::new(&text);
        let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
        let err = stderr_of(&out);
        // Refused before the run starts (mvk doctor's checks), so no attempt is spent.
        assert_eq!(out.status.code(), Some(64), "{sandbox}: {err}");
        assert!(err.contains("agent bot"), "{err}");
        assert!(
            err.contains("`no-such-agent-program` is not installed"),
            "{err}"
        );
        assert!(
            err.contains("hint: install `no-such-agent-program`"),
            "{err}"
        );
        assert_eq!(f.tip("main"), f.base);
        let ledger = f.root().join(".mvk/ledger.db");
        if ledger.exists() {
            let db = rusqlite::Connection::open(ledger).unwrap();
            let check: String = db
                .query_row("pragma integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(check, "ok");
            let attempts: i64 = db
                .query_row("select count(*) from attempts", [], |r| r.get(0))
                .unwrap_or(0);
            assert_eq!(attempts, 0, "no attempt was made");
        }
    }
}

#[test]
fn with_no_doctor_a_missing_agent_program_is_still_a_usage_error_when_it_is_started() {
    let text = super::support::loop_kdl(
        "agent bot { run \"no-such-agent-program\"; }\n",
        true,
        super::support::TESTS_GATE,
        "budget iterations=1",
    );
    let f = Fixture::new(&text);
    let out = f
        .mvk()
        .args(["apply", "loops/t.kdl", "--no-doctor"])
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("cannot run agent `bot`"), "{err}");
    assert!(err.contains("hint: install it"), "{err}");
    assert_eq!(f.tip("main"), f.base);
    let db = rusqlite::Connection::open(f.root().join(".mvk/ledger.db")).unwrap();
    let check: String = db
        .query_row("pragma integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

#[test]
fn a_template_that_cannot_render_stops_the_run_before_anything_runs() {
    // `check` renders every template with a sample, so a template that would fail at render
    // time is refused when the loop is compiled, by `apply` as by `check`.
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=1"));
    fs::write(
        f.root().join("loops/p.hbs"),
        "Fix {{goal}}: {{failure.nope}}\n",
    )
    .unwrap();
    let kdl = fs::read_to_string(f.root().join("loops/t.kdl")).unwrap();
    let kdl = kdl.replace("    agent bot\n", "    agent bot\n    prompt \"p.hbs\"\n");
    fs::write(f.root().join("loops/t.kdl"), kdl).unwrap();
    let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(65), "{err}");
    assert!(err.contains("loops/p.hbs:1:"), "{err}");
    assert!(err.contains("failure.nope"), "{err}");
    assert!(!f.state("calls").exists(), "no agent ran");
    assert!(!f.root().join(".mvk/runs").exists(), "no run started");
}

#[test]
fn a_scratch_branch_left_by_a_slot_build_an_earlier_mvk_died_in_goes_with_gc() {
    // Earlier versions built a slot off a scratch branch, dropped at once; one killed in between
    // left it. A run now makes none.
    let f = Fixture::new(&simple_loop("fix.sh", "budget iterations=1"));
    f.apply().expect_code(0);
    let scratch = || f.git(&["branch", "--list", "mvk-scratch/*"]);
    assert_eq!(scratch(), "", "a run that ends leaves no scratch branch");
    // The pool's tag, from the name mvk gave its slot's registration (`mvk-<tag>-<n>`).
    let admin = fs::read_dir(f.root().join(".git/worktrees"))
        .unwrap()
        .flatten()
        .find_map(|e| e.file_name().to_str().map(str::to_string))
        .unwrap();
    let tag = admin.split('-').nth(1).unwrap();
    let left = format!("mvk-scratch/{tag}-0-00000000deadbeef");
    f.git(&["branch", &left, "main"]);
    let dry = f.mvk().args(["gc", "--dry-run"]).output().unwrap();
    let said = String::from_utf8_lossy(&dry.stdout);
    assert!(
        said.contains(&format!("would delete branch {left}")),
        "{said}"
    );
    assert!(scratch().contains(&left), "a dry run deletes nothing");
    let gc = f.mvk().arg("gc").output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", stderr_of(&gc));
    assert_eq!(scratch(), "", "gc removed it");
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}
