//! No crash leaves a knot in the worktree pool: a slot a killed mvk left on an attempt's branch
//! never keeps a resume from making that branch again, a worktree error stops no run for good,
//! and `mvk resume` continues every run whose tasks did not all end — each to the result an
//! uninterrupted run has (every change on main once, one commit per task, a clean checkout).

use std::fs;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::flows::{task, worker};
use crate::resume::{crash, resume, spawn_apply, task_outcomes, the_run};
use crate::support::Fixture;

/// Four tasks side by side: `a` and `d` (after `a`) quick, `b` and `c` working until the state
/// file `go` exists.
fn four() -> Fixture {
    let mut text = worker("quick", "0.1", &[]);
    text.push_str(&worker("slow", "file:@STATE/go", &[]));
    text.push_str("flow t {\n    parallel 3\n");
    text.push_str(&task("a", "quick", "out/a.txt", ""));
    text.push_str(&task("b", "slow", "out/b.txt", ""));
    text.push_str(&task("c", "slow", "out/c.txt", ""));
    text.push_str(&task("d", "quick", "out/d.txt", "after a"));
    text.push_str("}\n");
    Fixture::new(&text)
}

/// Starts of each task's agent in the agents' log.
fn starts(f: &Fixture, name: &str) -> usize {
    fs::read_to_string(f.state("log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().take(2).eq(["start", name]))
        .count()
}

/// Starts `mvk apply` and kills it (SIGKILL) once the agents of `b` and `c` are both working.
fn killed_mid_attempt(f: &Fixture) -> String {
    let mut child = spawn_apply(f, &[]);
    let start = Instant::now();
    while starts(f, "b") == 0 || starts(f, "c") == 0 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "mvk ended before `b` and `c` started"
        );
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "`b` or `c` never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    crash(&mut child, None);
    the_run(f)
}

/// What an uninterrupted run of [`four`] leaves: each task accepted, its file on main once, one
/// commit per task, a clean main checkout, no agent run more than once after the crash.
fn uninterrupted(f: &Fixture, run: &str, context: &str) {
    for name in ["a", "b", "c", "d"] {
        assert_eq!(
            f.show("main", &format!("out/{name}.txt")).as_deref(),
            Some(format!("{name}\n").as_str()),
            "out/{name}.txt on main\n{context}"
        );
        assert!(
            starts(f, name) <= 2,
            "{name} ran more than once again\n{context}"
        );
    }
    let landed = f.git(&["log", "--format=%s", &format!("{}..main", f.base)]);
    assert_eq!(
        landed.lines().count(),
        4,
        "one commit per task:\n{landed}\n{context}"
    );
    assert_eq!(f.git(&["status", "--porcelain"]), "", "{context}");
    let outcomes = task_outcomes(f, run);
    assert_eq!(outcomes.len(), 4, "{outcomes:?}\n{context}");
    assert!(
        outcomes.iter().all(|(_, o)| o == "accepted"),
        "{outcomes:?}\n{context}"
    );
}

/// The `runs` row of RUN: its state and outcome.
pub(crate) fn run_row(f: &Fixture, run: &str) -> (String, Option<String>) {
    Connection::open(f.root().join(".mvk/ledger.db"))
        .unwrap()
        .query_row(
            "SELECT state, outcome FROM runs WHERE id = ?1",
            [run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
}

/// Waits (up to a minute) until the run's trail holds an event called NAME.
fn wait_for_event(f: &Fixture, run: &str, name: &str, child: &mut Child, log: &str) {
    let events = f.root().join(".mvk/runs").join(run).join("events.jsonl");
    let needle = format!("\"event\":\"{name}\"");
    let start = Instant::now();
    while !fs::read_to_string(&events)
        .unwrap_or_default()
        .contains(&needle)
    {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "mvk resume ended ({status}) before `{name}`\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no `{name}`");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_slot_a_crash_left_on_a_branch_whose_lock_another_process_holds_delays_the_resume_and_knots_nothing()
 {
    let f = four();
    let run = killed_mid_attempt(&f);
    // The slot the dead mvk leased for `c`'s attempt: its HEAD and its lock file still name the
    // attempt's branch, which the resume makes again. Its lock is now held by someone else, as
    // it was by a sibling task starting to lease the slot in the report this reproduces.
    let events =
        fs::read_to_string(f.root().join(".mvk/runs").join(&run).join("events.jsonl")).unwrap();
    let slot = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event"] == "attempt.started" && e["task"] == "c")
        .and_then(|e| e["detail"]["worktree"].as_str().map(str::to_string))
        .expect("c's attempt.started names its worktree");
    let branch = format!("mvk/{run}/c/1");
    let lock_path = format!("{slot}.lock");
    assert_eq!(fs::read_to_string(&lock_path).unwrap(), branch);
    let held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&lock_path)
        .unwrap();
    held.lock().unwrap();
    fs::write(f.state("go"), "").unwrap();
    let log = f.state("resume.log");
    let out = fs::File::create(&log).unwrap();
    let mut child = f
        .mvk_std()
        .args(["resume", &run])
        .stdout(Stdio::from(out.try_clone().unwrap()))
        .stderr(Stdio::from(out))
        .spawn()
        .unwrap();
    let log_text = || fs::read_to_string(&log).unwrap_or_default();
    // The resume waits for the slot's holder rather than stopping, then goes on once it lets go.
    wait_for_event(
        &f,
        &run,
        "worktree.retry",
        &mut child,
        log.to_str().unwrap(),
    );
    drop(held);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", log_text());
    assert_eq!(
        run_row(&f, &run),
        ("finished".into(), Some("accepted".into()))
    );
    uninterrupted(&f, &run, &log_text());
}

#[test]
fn a_worktree_error_leaves_the_run_unfinished_and_a_resume_carries_it_to_its_end() {
    let f = four();
    fs::write(f.state("go"), "").unwrap();
    // Every worktree mvk asks for fails, as a broken disk or git would make it.
    let stopped = f.apply_with(&[], &[("MVK_FAILPOINT", "worktree-acquire")]);
    stopped.expect_code(70);
    assert!(
        stopped.named("worktree.retry").len() >= 5,
        "tried again before giving up\n{}",
        stopped.why()
    );
    stopped.one("run.stopped");
    stopped.none("run.finished");
    assert_eq!(
        run_row(&f, &stopped.id),
        ("running".into(), None),
        "not recorded finished while its tasks run\n{}",
        stopped.why()
    );
    assert_eq!(f.tip("main"), f.base);
    let r = resume(&f, &[]);
    r.expect_code(0);
    assert_eq!(r.id, stopped.id);
    uninterrupted(&f, &r.id, &r.why());
    for name in ["a", "b", "c", "d"] {
        assert_eq!(starts(&f, name), 1, "{name}\n{}", r.why());
    }
}

#[test]
fn a_run_an_earlier_mvk_recorded_finished_on_its_error_with_tasks_running_is_resumed() {
    let f = four();
    let run = killed_mid_attempt(&f);
    // What an earlier mvk wrote when a worktree error stopped it with tasks under way.
    Connection::open(f.root().join(".mvk/ledger.db"))
        .unwrap()
        .execute(
            "UPDATE runs SET state = 'finished', outcome = 'error', exit_code = 70,
                    finished_at = heartbeat_at WHERE id = ?1",
            [&run],
        )
        .unwrap();
    fs::write(f.state("go"), "").unwrap();
    let r = resume(&f, &[&run]);
    r.expect_code(0);
    assert!(
        r.context.contains("recorded finished on mvk's own error"),
        "{}",
        r.why()
    );
    uninterrupted(&f, &run, &r.why());
    // A run that really finished is still refused.
    let again = f.mvk().args(["resume", &run]).output().unwrap();
    assert_eq!(again.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already finished"));
}

// Guards against a kill inside libgit2's write of an attempt's branch: the `.lock` file it
// leaves beside the ref made every later reset of that branch fail as `Locked`, exit 70, on
// every resume. Only the run's own mvk writes those refs, so the resume removes such files.
#[test]
fn a_lock_a_killed_mvk_left_on_its_attempts_branch_is_removed_by_the_resume() {
    let f = four();
    let run = killed_mid_attempt(&f);
    let refs = f.root().join(".git/refs/heads/mvk").join(&run);
    let stale = refs.join("c/1.lock");
    assert!(refs.join("c/1").exists(), "c's branch is a loose ref");
    fs::write(&stale, "0000000000000000000000000000000000000000\n").unwrap();
    fs::write(f.state("go"), "").unwrap();
    let resumed = resume(&f, &[&run]);
    resumed.expect_code(0);
    assert!(!stale.exists(), "the stale ref lock is gone");
    let event = resumed.one("run.resumed");
    assert_eq!(
        event["detail"]["ref_locks_removed"][0].as_str(),
        Some(stale.to_str().unwrap()),
        "{event}"
    );
    uninterrupted(&f, &run, &resumed.why());
}
