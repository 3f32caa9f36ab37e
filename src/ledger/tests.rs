//! The ledger against real SQLite files in temp directories.

use super::*;
use rusqlite::ffi;

fn ledger_in(dir: &tempfile::TempDir) -> (Ledger, PathBuf) {
    let path = dir.path().join("repo/.mvk/ledger.db");
    (Ledger::open(&path).expect("open the ledger"), path)
}

fn sources() -> Vec<(String, String)> {
    vec![
        (
            "loops/fix.kdl".into(),
            "loop fix { goal \"fix it\" }\n".into(),
        ),
        (
            "std/gates.kdl".into(),
            "gate tests { run \"cargo\" \"test\" }\n".into(),
        ),
    ]
}

fn run_start<'a>(id: &'a str, ir_json: &'a str, sources: &'a [(String, String)]) -> RunStart<'a> {
    RunStart {
        id,
        file: "loops/fix.kdl",
        program: "fix",
        kind: "loop",
        program_digest: "d1g35t",
        ir_json,
        sources,
        repo_root: "/repo",
        base_commit: "b0",
        target_branch: "main",
        pid: 4242,
        host: "box",
        mode: "auto",
    }
}

fn task_start<'a>(run: &'a str, name: &'a str, fields: &'a [(String, String)]) -> TaskStart<'a> {
    TaskStart {
        run,
        name,
        digest: "t4sk",
        fields,
        after: &[],
        base: "b0",
        seal_digest: "s0",
    }
}

fn attempt_start<'a>(run: &'a str, task: &'a str, number: u32) -> AttemptStart<'a> {
    AttemptStart {
        run,
        task,
        number,
        rung: 1,
        agent: "claude",
        branch: "mvk/r/t/1",
        worktree: "/wt/slot-0",
        base: "b0",
        epoch: 0,
    }
}

fn gate<'a>(phase: &'a str, name: &'a str, verdict: &'a str) -> GateRow<'a> {
    GateRow {
        phase,
        ordinal: 0,
        name,
        verdict,
        exit_code: Some(if verdict == "pass" { 0 } else { 101 }),
        counts: Some((12, 11, 1, 0)),
        evidence: "cargo-test summary",
        reason: "1 failed",
        log: "gate-tests.log",
        duration_ms: 900,
    }
}

fn agent_end(usage: Option<Cost>) -> AgentEnd<'static> {
    AgentEnd {
        exit_code: Some(0),
        timed_out: false,
        duration_ms: 1500,
        head: Some("h1"),
        usage,
        rate_limited: 2,
    }
}

const PASSED: AttemptEnd<'static> = AttemptEnd {
    outcome: "passed",
    failure_kind: None,
    signature: None,
    criterion: None,
    failure_json: None,
};

/// The extended SQLite result code under a write error, or 0 when it is not an SQLite failure.
fn sqlite_code(err: &LedgerError) -> i32 {
    match err {
        LedgerError::Write {
            source: rusqlite::Error::SqliteFailure(e, _),
            ..
        } => e.extended_code,
        _ => 0,
    }
}

fn count(ledger: &Ledger, table: &str) -> i64 {
    ledger
        .conn
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .expect("count rows")
}

fn user_version(conn: &Connection) -> i64 {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("read user_version")
}

#[test]
fn open_creates_the_file_and_its_directory_and_migrates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ledger, path) = ledger_in(&dir);
    assert!(path.is_file(), "{} was created", path.display());
    assert_eq!(ledger.path(), path);
    assert_eq!(user_version(&ledger.conn), schema::known_version());
    let mode: String = ledger
        .conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .expect("journal mode");
    assert_eq!(mode, "wal");
    let fk: i64 = ledger
        .conn
        .pragma_query_value(None, "foreign_keys", |r| r.get(0))
        .expect("foreign_keys");
    assert_eq!(fk, 1);
    // NORMAL is 1.
    let sync: i64 = ledger
        .conn
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .expect("synchronous");
    assert_eq!(sync, 1);
    let mut stmt = ledger
        .conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        .expect("list tables");
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .expect("query tables")
        .collect::<Result<_, _>>()
        .expect("table names");
    assert_eq!(
        tables,
        [
            "attempts",
            "checkpoints",
            "costs",
            "events",
            "followups",
            "gate_results",
            "landing_answers",
            "lessons",
            "merges",
            "program_sources",
            "programs",
            "pull_requests",
            "resumptions",
            "reviews",
            "runs",
            "task_deps",
            "task_fields",
            "tasks"
        ]
    );
}

#[test]
fn reopening_keeps_the_rows_and_applies_nothing_twice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = sources();
    let (mut ledger, path) = ledger_in(&dir);
    ledger
        .begin_run(&run_start("r1", "{}", &src))
        .expect("begin run");
    let objects = count(&ledger, "sqlite_schema");
    drop(ledger);
    // Migration 1 has no IF NOT EXISTS: applying it again would fail on the existing tables.
    let ledger = Ledger::open(&path).expect("reopen");
    let again = Ledger::open(&path).expect("reopen while open");
    assert_eq!(user_version(&ledger.conn), schema::known_version());
    assert_eq!(count(&ledger, "sqlite_schema"), objects);
    let status = again
        .run_status("r1")
        .expect("read")
        .expect("the run is kept");
    assert_eq!(status.state, "running");
    assert_eq!((status.pid, status.host.as_str()), (4242, "box"));
}

#[test]
fn a_ledger_from_a_newer_mvk_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ledger.db");
    let newer = schema::known_version() + 1;
    {
        let conn = Connection::open(&path).expect("create");
        conn.execute_batch("CREATE TABLE future (x INTEGER);")
            .expect("a table of the future");
        conn.pragma_update(None, "user_version", newer)
            .expect("set version");
    }
    let err = Ledger::open(&path)
        .err()
        .expect("a newer ledger is refused");
    match &err {
        LedgerError::TooNew { found, known, .. } => {
            assert_eq!((*found, *known), (newer, schema::known_version()));
        }
        other => panic!("expected TooNew, got {other:?}"),
    }
    assert!(err.to_string().contains("upgrade mvk"), "{err}");
    let conn = Connection::open(&path).expect("reopen raw");
    assert_eq!(user_version(&conn), newer, "never downgraded");
    let tables: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .expect("count tables");
    assert_eq!(tables, 1, "no migration ran on it");
}

#[test]
fn a_full_run_round_trips_and_spent_sums_its_costs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let src = sources();
    ledger
        .begin_run(&run_start("r1", r#"{"tasks":["fix"]}"#, &src))
        .expect("begin run");
    ledger.heartbeat("r1").expect("heartbeat");
    let fields = vec![
        ("goal".to_string(), "g0".to_string()),
        ("gate.tests".to_string(), "g1".to_string()),
    ];
    let after = vec!["setup".to_string()];
    ledger
        .begin_task(&TaskStart {
            after: &after,
            ..task_start("r1", "fix", &fields)
        })
        .expect("begin task");
    ledger
        .begin_task(&task_start("r1", "docs", &[]))
        .expect("begin another task");

    // Attempt 1 fails its gate.
    let a1 = ledger
        .begin_attempt(&attempt_start("r1", "fix", 1))
        .expect("begin attempt 1");
    let c1 = Cost {
        input_tokens: 1000,
        output_tokens: 200,
        usd_micros: 30_000,
    };
    ledger
        .agent_done(a1, &agent_end(Some(c1)))
        .expect("agent 1");
    ledger
        .record_gate(a1, &gate("gate", "tests", "fail"))
        .expect("gate 1");
    ledger
        .finish_attempt(
            a1,
            &AttemptEnd {
                outcome: "failed",
                failure_kind: Some("gate"),
                signature: Some("sig-1"),
                criterion: Some("tests pass"),
                failure_json: Some(r#"{"kind":"gate"}"#),
            },
        )
        .expect("finish attempt 1");

    // Attempt 2 passes on rung 2 and lands.
    let a2 = ledger
        .begin_attempt(&AttemptStart {
            rung: 2,
            agent: "codex",
            ..attempt_start("r1", "fix", 2)
        })
        .expect("begin attempt 2");
    let c2 = Cost {
        input_tokens: 500,
        output_tokens: 50,
        usd_micros: 7_000,
    };
    ledger
        .agent_done(a2, &agent_end(Some(c2)))
        .expect("agent 2");
    ledger
        .record_gate(a2, &gate("gate", "tests", "pass"))
        .expect("gate 2");
    ledger
        .finish_attempt(a2, &PASSED)
        .expect("finish attempt 2");
    ledger
        .record_gate(a2, &gate("after-merge", "tests", "pass"))
        .expect("after-merge gate");
    let m = ledger
        .begin_merge(&MergeStart {
            run: "r1",
            task: "fix",
            attempt_id: a2,
            into: "main",
            strategy: "squash",
            old_tip: "b0",
            new_commit: "c9",
            index_lock: None,
        })
        .expect("merge intent");
    ledger
        .finish_merge(m, "done", Some("c9"), "")
        .expect("merge done");
    ledger
        .event(
            "r1",
            Some("fix"),
            Some(2),
            1_700_000_000_123,
            "merge.done",
            r#"{"commit":"c9"}"#,
        )
        .expect("event");
    ledger
        .event(
            "r1",
            None,
            None,
            1_700_000_000_124,
            "run.finished",
            r#"{"outcome":"accepted"}"#,
        )
        .expect("event");
    ledger
        .finish_task("r1", "fix", "accepted", Some("c9"))
        .expect("finish task");

    // The other task's attempt reports no usage: it counts as an attempt, with no cost row.
    let d1 = ledger
        .begin_attempt(&attempt_start("r1", "docs", 1))
        .expect("docs attempt");
    ledger.agent_done(d1, &agent_end(None)).expect("docs agent");
    ledger
        .finish_attempt(d1, &PASSED)
        .expect("docs attempt ends");
    ledger
        .finish_task("r1", "docs", "accepted", None)
        .expect("finish docs");
    ledger.finish_run("r1", "accepted", 0).expect("finish run");

    assert_eq!(
        ledger.spent("r1", None).expect("spent by the run"),
        Spent {
            attempts: 3,
            input_tokens: 1500,
            output_tokens: 250,
            usd_micros: 37_000
        }
    );
    assert_eq!(
        ledger.spent("r1", Some("docs")).expect("spent by docs"),
        Spent {
            attempts: 1,
            input_tokens: 0,
            output_tokens: 0,
            usd_micros: 0
        }
    );
    assert_eq!(
        ledger
            .spent("r1", Some("fix"))
            .expect("spent by fix")
            .usd_micros,
        37_000
    );
    assert_eq!(
        ledger
            .spent("nope", None)
            .expect("spent by no run")
            .attempts,
        0
    );

    let status = ledger.run_status("r1").expect("status").expect("the run");
    assert_eq!(status.state, "finished");
    assert_eq!(status.outcome.as_deref(), Some("accepted"));
    assert_eq!(status.exit_code, Some(0));
    assert_eq!(ledger.run_status("nope").expect("status"), None);

    let c = &ledger.conn;
    let run: (String, String, String, String, i64, i64, i64) = c
        .query_row(
            "SELECT file, program, kind, program_digest, started_at, heartbeat_at, finished_at
             FROM runs WHERE id = 'r1'",
            [],
            |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            },
        )
        .expect("the run row");
    assert_eq!(
        (
            run.0.as_str(),
            run.1.as_str(),
            run.2.as_str(),
            run.3.as_str()
        ),
        ("loops/fix.kdl", "fix", "loop", "d1g35t")
    );
    assert!(run.4 <= run.5 && run.5 == run.6, "times in order: {run:?}");
    let ir: String = c
        .query_row(
            "SELECT ir_json FROM programs WHERE digest = 'd1g35t'",
            [],
            |r| r.get(0),
        )
        .expect("the program");
    assert_eq!(ir, r#"{"tasks":["fix"]}"#);
    let stored: Vec<(i64, String, String)> = c
        .prepare("SELECT file_id, path, text FROM program_sources ORDER BY file_id")
        .expect("sources")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query sources")
        .collect::<Result<_, _>>()
        .expect("source rows");
    assert_eq!(
        stored,
        vec![
            (0, src[0].0.clone(), src[0].1.clone()),
            (1, src[1].0.clone(), src[1].1.clone())
        ]
    );
    let task: (String, String, Option<String>) = c
        .query_row(
            "SELECT state, outcome, merged FROM tasks WHERE run = 'r1' AND name = 'fix'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("the task row");
    assert_eq!(
        task,
        ("finished".into(), "accepted".into(), Some("c9".into()))
    );
    let fields_back: Vec<(String, String)> = c
        .prepare("SELECT field, digest FROM task_fields WHERE task = 'fix' ORDER BY field")
        .expect("fields")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query fields")
        .collect::<Result<_, _>>()
        .expect("field rows");
    assert_eq!(
        fields_back,
        vec![
            ("gate.tests".to_string(), "g1".to_string()),
            ("goal".to_string(), "g0".to_string())
        ]
    );
    let dep: String = c
        .query_row("SELECT after FROM task_deps WHERE task = 'fix'", [], |r| {
            r.get(0)
        })
        .expect("the dependency");
    assert_eq!(dep, "setup");
    type AttemptRow = (
        u32,
        u32,
        String,
        String,
        Option<i32>,
        bool,
        i64,
        String,
        u32,
        String,
        Option<String>,
        Option<String>,
    );
    let attempts: Vec<AttemptRow> = c
        .prepare(
            "SELECT number, rung, agent, state, exit_code, timed_out, agent_ms, head, rate_limited,
                outcome, failure_kind, signature
             FROM attempts WHERE task = 'fix' ORDER BY number",
        )
        .expect("attempts")
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
                r.get(11)?,
            ))
        })
        .expect("query attempts")
        .collect::<Result<_, _>>()
        .expect("attempt rows");
    assert_eq!(
        attempts,
        vec![
            (
                1,
                1,
                "claude".into(),
                "finished".into(),
                Some(0),
                false,
                1500,
                "h1".into(),
                2,
                "failed".into(),
                Some("gate".into()),
                Some("sig-1".into())
            ),
            (
                2,
                2,
                "codex".into(),
                "finished".into(),
                Some(0),
                false,
                1500,
                "h1".into(),
                2,
                "passed".into(),
                None,
                None
            ),
        ]
    );
    let gates: Vec<(i64, String, String, Option<i64>, String)> = c
        .prepare(
            "SELECT attempt_id, phase, verdict, executed, evidence FROM gate_results ORDER BY id",
        )
        .expect("gates")
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .expect("query gates")
        .collect::<Result<_, _>>()
        .expect("gate rows");
    assert_eq!(
        gates,
        vec![
            (
                a1,
                "gate".into(),
                "fail".into(),
                Some(12),
                "cargo-test summary".into()
            ),
            (
                a2,
                "gate".into(),
                "pass".into(),
                Some(12),
                "cargo-test summary".into()
            ),
            (
                a2,
                "after-merge".into(),
                "pass".into(),
                Some(12),
                "cargo-test summary".into()
            ),
        ]
    );
    let costs: Vec<(i64, String, i64)> = c
        .prepare("SELECT attempt_id, kind, usd_micros FROM costs ORDER BY id")
        .expect("costs")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query costs")
        .collect::<Result<_, _>>()
        .expect("cost rows");
    assert_eq!(
        costs,
        vec![(a1, "agent".into(), 30_000), (a2, "agent".into(), 7_000)]
    );
    let merge: (String, Option<String>, String, String, String) = c
        .query_row(
            "SELECT state, commit_id, into_branch, old_tip, new_commit FROM merges WHERE id = ?1",
            [m],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .expect("the merge row");
    assert_eq!(
        merge,
        (
            "done".into(),
            Some("c9".into()),
            "main".into(),
            "b0".into(),
            "c9".into()
        )
    );
    type EventRow = (Option<String>, Option<u32>, i64, String, String);
    let events: Vec<EventRow> = c
        .prepare("SELECT task, attempt, time_ms, event, detail_json FROM events ORDER BY id")
        .expect("events")
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .expect("query events")
        .collect::<Result<_, _>>()
        .expect("event rows");
    assert_eq!(
        events,
        vec![
            (
                Some("fix".into()),
                Some(2),
                1_700_000_000_123,
                "merge.done".into(),
                r#"{"commit":"c9"}"#.into()
            ),
            (
                None,
                None,
                1_700_000_000_124,
                "run.finished".into(),
                r#"{"outcome":"accepted"}"#.into()
            ),
        ]
    );
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity check");
    assert_eq!(check, "ok");
}

#[test]
fn a_program_is_stored_once_per_digest_with_its_first_sources() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let first = sources();
    let second = vec![("loops/fix.kdl".to_string(), "// reformatted\n".to_string())];
    ledger
        .begin_run(&run_start("r1", r#"{"v":1}"#, &first))
        .expect("run 1");
    ledger
        .begin_run(&run_start("r2", r#"{"v":2}"#, &second))
        .expect("run 2");
    assert_eq!(count(&ledger, "programs"), 1);
    assert_eq!(count(&ledger, "program_sources"), 2);
    let ir: String = ledger
        .conn
        .query_row("SELECT ir_json FROM programs", [], |r| r.get(0))
        .expect("the program");
    assert_eq!(ir, r#"{"v":1}"#);
}

#[test]
fn foreign_key_violations_are_errors_and_leave_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let fk = ffi::SQLITE_CONSTRAINT_FOREIGNKEY;

    let err = ledger
        .begin_task(&task_start("no-such-run", "fix", &[]))
        .expect_err("a task of an unknown run");
    assert_eq!(sqlite_code(&err), fk, "{err:?}");
    assert!(
        err.to_string().contains("task `fix` of run `no-such-run`"),
        "{err}"
    );

    let src = sources();
    ledger.begin_run(&run_start("r1", "{}", &src)).expect("run");
    let err = ledger
        .begin_attempt(&attempt_start("r1", "no-such-task", 1))
        .expect_err("an attempt of an unknown task");
    assert_eq!(sqlite_code(&err), fk, "{err:?}");
    let err = ledger
        .record_gate(999, &gate("gate", "tests", "pass"))
        .expect_err("a gate of an unknown attempt");
    assert_eq!(sqlite_code(&err), fk, "{err:?}");
    let err = ledger
        .event("no-such-run", None, None, 0, "run.started", "{}")
        .expect_err("an event of an unknown run");
    assert_eq!(sqlite_code(&err), fk, "{err:?}");

    // A merge must name an attempt of its own task.
    ledger
        .begin_task(&task_start("r1", "fix", &[]))
        .expect("fix");
    ledger
        .begin_task(&task_start("r1", "docs", &[]))
        .expect("docs");
    let a = ledger
        .begin_attempt(&attempt_start("r1", "fix", 1))
        .expect("attempt");
    let err = ledger
        .begin_merge(&MergeStart {
            run: "r1",
            task: "docs",
            attempt_id: a,
            into: "main",
            strategy: "squash",
            old_tip: "b0",
            new_commit: "c1",
            index_lock: None,
        })
        .expect_err("a merge of another task's attempt");
    assert_eq!(sqlite_code(&err), fk, "{err:?}");

    assert_eq!(count(&ledger, "gate_results"), 0);
    assert_eq!(count(&ledger, "events"), 0);
    assert_eq!(count(&ledger, "merges"), 0);
    assert_eq!(count(&ledger, "attempts"), 1);
}

#[test]
fn a_failed_write_records_nothing_of_its_transition() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let src = sources();
    ledger.begin_run(&run_start("r1", "{}", &src)).expect("run");
    // The second row of the same field breaks the task_fields key after the task row went in.
    let fields = vec![
        ("goal".to_string(), "g0".to_string()),
        ("goal".to_string(), "g1".to_string()),
    ];
    let err = ledger
        .begin_task(&task_start("r1", "fix", &fields))
        .expect_err("a repeated field");
    assert_eq!(
        sqlite_code(&err),
        ffi::SQLITE_CONSTRAINT_PRIMARYKEY,
        "{err:?}"
    );
    assert_eq!(count(&ledger, "tasks"), 0, "the task row was rolled back");
    assert_eq!(count(&ledger, "task_fields"), 0);
}

#[test]
fn transitions_from_the_wrong_state_are_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let src = sources();
    ledger.begin_run(&run_start("r1", "{}", &src)).expect("run");
    ledger
        .begin_task(&task_start("r1", "fix", &[]))
        .expect("task");
    let a = ledger
        .begin_attempt(&attempt_start("r1", "fix", 1))
        .expect("attempt");
    ledger
        .finish_attempt(a, &PASSED)
        .expect("finish from running");

    let err = ledger
        .finish_attempt(a, &PASSED)
        .expect_err("finishing twice");
    assert!(
        matches!(&err, LedgerError::State { problem, .. } if problem == &format!("attempt #{a} is `finished`, not `running` or `agent-done`")),
        "{err:?}"
    );
    let err = ledger
        .agent_done(a, &agent_end(Some(Cost::default())))
        .expect_err("an agent result after the verdict");
    assert!(matches!(err, LedgerError::State { .. }), "{err:?}");
    assert_eq!(
        count(&ledger, "costs"),
        0,
        "no cost row for a refused result"
    );

    let err = ledger
        .finish_merge(77, "done", Some("c1"), "")
        .expect_err("an unknown merge");
    assert!(
        matches!(&err, LedgerError::State { problem, .. } if problem == "the ledger has no merge #77"),
        "{err:?}"
    );
    let m = ledger
        .begin_merge(&MergeStart {
            run: "r1",
            task: "fix",
            attempt_id: a,
            into: "main",
            strategy: "ff",
            old_tip: "b0",
            new_commit: "c1",
            index_lock: None,
        })
        .expect("intent");
    let err = ledger
        .finish_merge(m, "intent", None, "")
        .expect_err("an intent cannot settle as an intent");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_CHECK, "{err:?}");
    let err = ledger
        .finish_merge(m, "done", None, "")
        .expect_err("done needs the commit");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_CHECK, "{err:?}");
    ledger
        .finish_merge(m, "conflict", None, "src/a.rs")
        .expect("conflict");
    let err = ledger
        .finish_merge(m, "done", Some("c1"), "")
        .expect_err("settling twice");
    assert!(matches!(err, LedgerError::State { .. }), "{err:?}");

    ledger
        .finish_task("r1", "fix", "rejected", None)
        .expect("task ends");
    let err = ledger
        .finish_task("r1", "fix", "accepted", Some("c1"))
        .expect_err("a task ends once");
    assert!(matches!(err, LedgerError::State { .. }), "{err:?}");
    ledger.finish_run("r1", "rejected", 1).expect("run ends");
    let err = ledger
        .finish_run("r1", "accepted", 0)
        .expect_err("a run ends once");
    assert!(matches!(err, LedgerError::State { .. }), "{err:?}");
    let err = ledger.heartbeat("nope").expect_err("an unknown run");
    assert!(
        matches!(&err, LedgerError::State { problem, .. } if problem == "the ledger has no run `nope`"),
        "{err:?}"
    );
}

#[test]
fn unknown_values_and_repeated_attempt_numbers_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let src = sources();
    let err = ledger
        .begin_run(&RunStart {
            kind: "pipeline",
            ..run_start("r0", "{}", &src)
        })
        .expect_err("an unknown kind");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_CHECK, "{err:?}");
    assert_eq!(
        count(&ledger, "programs"),
        0,
        "the program went with the run"
    );
    let err = ledger
        .begin_run(&run_start("r0", "not json", &src))
        .expect_err("IR that is not JSON");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_CHECK, "{err:?}");

    ledger.begin_run(&run_start("r1", "{}", &src)).expect("run");
    let err = ledger
        .event("r1", None, None, 0, "run.started", "{oops")
        .expect_err("detail that is not JSON");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_CHECK, "{err:?}");
    ledger
        .begin_task(&task_start("r1", "fix", &[]))
        .expect("task");
    let a = ledger
        .begin_attempt(&attempt_start("r1", "fix", 1))
        .expect("attempt 1");
    let err = ledger
        .begin_attempt(&attempt_start("r1", "fix", 1))
        .expect_err("attempt 1 again");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_UNIQUE, "{err:?}");
    let err = ledger
        .record_gate(a, &gate("gate", "tests", "green"))
        .expect_err("an unknown verdict");
    assert_eq!(sqlite_code(&err), ffi::SQLITE_CONSTRAINT_CHECK, "{err:?}");
    let err = ledger
        .agent_done(
            a,
            &agent_end(Some(Cost {
                usd_micros: u64::MAX,
                ..Cost::default()
            })),
        )
        .expect_err("more micro-dollars than SQLite holds");
    assert!(
        matches!(
            err,
            LedgerError::TooLarge {
                field: "usd_micros",
                ..
            }
        ),
        "{err:?}"
    );
    let state: String = ledger
        .conn
        .query_row("SELECT state FROM attempts WHERE id = ?1", [a], |r| {
            r.get(0)
        })
        .expect("state");
    assert_eq!(state, "running", "the refused result changed nothing");
}

#[test]
fn a_reader_reads_while_the_writer_writes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut writer, path) = ledger_in(&dir);
    let src = sources();
    writer.begin_run(&run_start("r1", "{}", &src)).expect("run");
    writer
        .event("r1", None, None, 1, "run.started", "{}")
        .expect("event 1");

    // A reader holds a read transaction open (as `mvk log` does mid-query).
    let mut reader = Connection::open(&path).expect("a second connection");
    let read = reader.transaction().expect("read transaction");
    let before: i64 = read
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .expect("read");
    assert_eq!(before, 1);
    // Without WAL, this commit would need the reader gone: it would wait out the busy timeout
    // and fail. In WAL it commits, and the reader keeps its snapshot.
    writer
        .event("r1", None, None, 2, "task.started", "{}")
        .expect("write while a reader reads");
    let during: i64 = read
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .expect("read again");
    assert_eq!(during, 1, "the reader's snapshot");
    read.commit().expect("end the read");

    // A writer holds its transaction open; a third connection still reads the committed rows.
    let mut other = Connection::open(&path).expect("a third connection");
    let open_write = other
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .expect("write transaction");
    open_write
        .execute(
            "INSERT INTO events (run, time_ms, event, detail_json) VALUES ('r1', 3, 'x', '{}')",
            [],
        )
        .expect("uncommitted insert");
    let status = Ledger::open(&path)
        .expect("open while a write is open")
        .spent("r1", None)
        .expect("read while a write is open");
    assert_eq!(status.attempts, 0);
    let seen: i64 = reader
        .query_row("SELECT COUNT(*) FROM events", [], |r| r.get(0))
        .expect("read during the write");
    assert_eq!(seen, 2, "committed rows, not the open write's");
    open_write.rollback().expect("roll back");
}

/// A shipped migration has run in users' ledgers; editing it would leave theirs and new ones
/// different. Change the schema by appending a migration instead.
#[test]
fn shipped_migrations_never_change() {
    let shipped = [
        "732dd8d7cbaa3ffc5a4be913bf7ac79ce0ca4b920a6b99bb0c9551caaa3ae4e8",
        "2ef6b0545ec8e9c9f678cf18e2aaa0e3b66f3d753ab803a2a09bca65f3274ec3",
        "7ca37649db6c457b1164ef6394317205fd3ad4d6528fcdd3a519ecb9a2e86aa3",
        "2bb3895e55293b59e457e0a71d3be30d753333b17b03abf6b011d90e81774f9a",
        "75d9fa6d6eda88578ab2cb18ef2d0386e2c65560c457637edb5f5113682c9495",
        "89390a7422475a5c130e23467e9b6505ba37f29e53d4500dcc88c880e6477878",
        "45f3ae38eb380b7102f3ca5d3425c760af0cd83eb95e68ad5d11821ea44cfc0e",
        "b6761bc317ed8ef7d9b9824deb2bed7ca712933716efcfc5ad54f20c9a12d16a",
        "c5782d5d092c98232aacb4ae95cfccd2901b586f40b0141a0724ca232ecf2182",
        "762df956838b4fa5b8cc151031261429fcf14930a272ce60cc1a807d4993979d",
        "6ed96ec254235f15f7b9cbac55a28067b78cdaa7192e2e7b9f7e92d62622be68",
    ];
    let now: Vec<String> = schema::MIGRATIONS
        .iter()
        .map(|m| blake3::hash(m.as_bytes()).to_hex().to_string())
        .collect();
    assert!(now.len() >= shipped.len(), "a migration was removed");
    assert_eq!(&now[..shipped.len()], shipped);
}

/// Reviews: rejections count once per attempt, the last blockers are read back, review costs
/// count in `spent`; checkpoints pause the run with them and are decided once, a rejection only
/// with a reason.
#[test]
fn reviews_and_checkpoints_round_trip() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut ledger, _) = ledger_in(&dir);
    let src = sources();
    ledger
        .begin_run(&run_start("r1", r#"{"tasks":["fix"]}"#, &src))
        .expect("begin run");
    ledger
        .begin_task(&task_start("r1", "fix", &[]))
        .expect("begin task");
    let a1 = ledger
        .begin_attempt(&attempt_start("r1", "fix", 1))
        .expect("begin attempt");
    let blockers = r#"[{"category":"correctness","evidence":"off by one","location":"a.rs:3"}]"#;
    let review = |verdict, blockers_json, usage| ReviewRow {
        attempt_id: a1,
        agent: "critic",
        verdict,
        blockers_json,
        notes: &[],
        reason: "",
        exit_code: Some(0),
        output: "review.out",
        usage,
    };
    let cost = Cost {
        input_tokens: 10,
        output_tokens: 5,
        usd_micros: 7,
    };
    // Reviewed twice (a crash between the verdict and the attempt's end): one rejection.
    ledger
        .record_review(&review("reject", blockers, Some(cost)))
        .expect("review");
    ledger
        .record_review(&review("reject", blockers, None))
        .expect("review again");
    assert_eq!(ledger.review_rejections("r1", "fix", 0).expect("count"), 1);
    assert_eq!(
        ledger
            .last_blockers("r1", "fix", 0)
            .expect("blockers")
            .as_deref(),
        Some(blockers)
    );
    assert_eq!(ledger.spent("r1", None).expect("spent").usd_micros, 7);
    // A reject without blockers, an approve with them: refused by the schema.
    assert!(matches!(
        ledger.record_review(&review("reject", "[]", None)),
        Err(LedgerError::Write { .. })
    ));
    assert!(matches!(
        ledger.record_review(&review("approve", blockers, None)),
        Err(LedgerError::Write { .. })
    ));

    let id = ledger
        .open_checkpoint(&CheckpointStart {
            run: "r1",
            task: "fix",
            attempt_id: a1,
            kind: "review",
            lands: true,
            question: "land it anyway?",
        })
        .expect("checkpoint");
    assert_eq!(
        ledger.run_status("r1").expect("status").map(|s| s.state),
        Some("running".to_string())
    );
    ledger.pause_run("r1").expect("pause");
    assert_eq!(
        ledger.run_status("r1").expect("status").map(|s| s.state),
        Some("paused".to_string())
    );
    assert!(matches!(
        ledger.decide(id, "reject", None),
        Err(LedgerError::Write { .. })
    ));
    ledger
        .decide(id, "reject", Some("handle zero"))
        .expect("decide");
    assert!(matches!(
        ledger.decide(id, "approve", None),
        Err(LedgerError::State { .. })
    ));
    let rows = ledger.checkpoints("r1").expect("checkpoints");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].decision.as_deref(),
            rows[0].reason.as_deref(),
            rows[0].attempt
        ),
        (Some("reject"), Some("handle zero"), 1)
    );
    // Pausing a run that is not running is refused.
    assert!(matches!(
        ledger.pause_run("r1"),
        Err(LedgerError::State { .. })
    ));
}

/// Migration 5 on a ledger an older mvk wrote: the runs `mvk attempt` started (their
/// `run.started` event says `attempt_only`) become `attempt` runs, the others `apply`; a reader
/// (`mvk status`) that finds the older ledger migrates it instead of refusing it.
#[test]
fn migration_5_tells_attempts_from_runs_in_an_older_ledger_and_readers_migrate_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ledger.db");
    {
        let mut conn = Connection::open(&path).expect("create");
        let tx = conn.transaction().expect("tx");
        for m in &schema::MIGRATIONS[..3] {
            tx.execute_batch(m).expect("an older migration");
        }
        tx.pragma_update(None, "user_version", 3)
            .expect("version 3");
        tx.execute(
            "INSERT INTO programs (digest, ir_json, created_at) VALUES ('d', '{}', 0)",
            [],
        )
        .expect("program");
        for (run, attempt_only) in [("r-apply", false), ("r-attempt", true)] {
            tx.execute(
                "INSERT INTO runs (id, file, program, kind, program_digest, repo_root, base_commit,
                    target_branch, mode, pid, host, state, started_at, heartbeat_at)
                 VALUES (?1, 'loops/t.kdl', 't', 'loop', 'd', '/r', 'b', 'main', 'auto', 1, 'h',
                    'running', 0, 0)",
                [run],
            )
            .expect("run");
            tx.execute(
                "INSERT INTO events (run, time_ms, event, detail_json)
                 VALUES (?1, 0, 'run.started', ?2)",
                rusqlite::params![
                    run,
                    format!(r#"{{"whole":false,"attempt_only":{attempt_only}}}"#)
                ],
            )
            .expect("event");
        }
        tx.commit().expect("commit");
    }
    let reader = read::Reader::open(&path).expect("a reader migrates an older ledger");
    let runs = reader.runs().expect("runs");
    let mut commands: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| (r.id.as_str(), r.command.as_str()))
        .collect();
    commands.sort_unstable();
    assert_eq!(commands, [("r-apply", "apply"), ("r-attempt", "attempt")]);
    let conn = Connection::open(&path).expect("reopen raw");
    assert_eq!(user_version(&conn), schema::known_version());
}

/// Migration 6 rebuilds `runs` and `tasks` (for the `interrupted` outcome) on a ledger with
/// rows that reference them: every row is kept, the keys hold again afterwards, and a dead
/// attempt run closes with its task and attempt in flight.
#[test]
fn migration_6_keeps_every_row_and_key_and_closes_interrupted_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ledger.db");
    {
        let mut conn = Connection::open(&path).expect("create");
        let tx = conn.transaction().expect("tx");
        for m in &schema::MIGRATIONS[..5] {
            tx.execute_batch(m).expect("an older migration");
        }
        tx.pragma_update(None, "user_version", 5)
            .expect("version 5");
        tx.execute_batch(
            "INSERT INTO programs (digest, ir_json, created_at) VALUES ('d', '{}', 0);
             INSERT INTO runs (id, file, program, kind, program_digest, repo_root, base_commit,
                target_branch, mode, pid, host, state, started_at, heartbeat_at, command)
             VALUES ('r1', 'loops/t.kdl', 't', 'loop', 'd', '/r', 'b', 'main', 'step', 1, 'h',
                'running', 0, 0, 'attempt');
             INSERT INTO tasks (run, name, digest, state, started_at, base)
             VALUES ('r1', 't', 'x', 'running', 0, 'b');
             INSERT INTO task_fields (run, task, field, digest) VALUES ('r1', 't', 'goal', 'g');
             INSERT INTO attempts (run, task, number, rung, agent, branch, worktree, base, state,
                started_at)
             VALUES ('r1', 't', 1, 1, 'bot', 'mvk/r1/t/1', '/w', 'b', 'running', 0);",
        )
        .expect("rows");
        tx.commit().expect("commit");
    }
    let mut ledger = Ledger::open(&path).expect("migrates");
    assert!(ledger.close_interrupted("r1", 130).expect("close"));
    assert!(
        !ledger.close_interrupted("r1", 130).expect("again"),
        "closed once"
    );
    let conn = Connection::open(&path).expect("reopen raw");
    assert_eq!(user_version(&conn), schema::known_version());
    let row: (String, String, i64, String, String) = conn
        .query_row(
            "SELECT r.state, r.outcome, r.exit_code, t.outcome, a.state
               FROM runs r JOIN tasks t ON t.run = r.id JOIN attempts a ON a.run = r.id",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .expect("rows kept");
    assert_eq!(
        row,
        (
            "finished".into(),
            "interrupted".into(),
            130,
            "interrupted".into(),
            "abandoned".into()
        )
    );
    let fields: i64 = conn
        .query_row("SELECT count(*) FROM task_fields", [], |r| r.get(0))
        .expect("fields");
    assert_eq!(fields, 1);
    // The keys hold on the rebuilt tables: a run others reference cannot go.
    conn.pragma_update(None, "foreign_keys", true)
        .expect("keys");
    assert!(conn.execute("DELETE FROM runs", []).is_err());
}
