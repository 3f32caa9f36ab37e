//! The `human` rung through the binary: a ladder that climbs to it stops at a checkpoint (exit
//! 4, a `HANDOFF.md`, the run paused); `mvk reject --reason` buys one more attempt on the last
//! agent rung, told the reason; `mvk approve` judges the attempt's branch as the person left
//! it (seal, gates), as attempt N+1 made by a person, and lands it only when it passes, else
//! asks again.

use std::fs;

use rusqlite::Connection;

use super::apply::{FIXED, Fixture, Run, TESTS_GATE, agent_def, git, loop_kdl};

/// A loop whose ladder is one attempt of `guided.sh`, then `human`; run until it stops there.
fn at_the_human_rung() -> (Fixture, Run) {
    let defs = agent_def("guided", "guided.sh", &[]);
    let ladder = "ladder {\n        rung agent=guided attempts=1\n        rung human\n    }";
    let f = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let run = f.apply();
    run.expect_code(4);
    run.one("human.handoff");
    let waiting = run.one("checkpoint.waiting");
    assert_eq!(waiting["detail"]["kind"], "human", "{}", run.why());
    assert_eq!(state(&f, &run.id), "paused");
    assert!(run.dir.join("HANDOFF.md").exists());
    (f, run)
}

fn state(f: &Fixture, run: &str) -> String {
    Connection::open(f.root().join(".mvk/ledger.db"))
        .unwrap()
        .query_row("SELECT state FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .unwrap()
}

/// Decisions of the run's checkpoints, in order (`-` for one not answered).
fn decisions(f: &Fixture) -> Vec<(String, String)> {
    let db = Connection::open(f.root().join(".mvk/ledger.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT kind, COALESCE(decision, '-') FROM checkpoints ORDER BY id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn started(run: &Run) -> Vec<u64> {
    run.attempts()
}

#[test]
fn a_person_rejecting_at_the_human_rung_buys_one_more_attempt_told_the_reason() {
    let (f, run) = at_the_human_rung();
    let answered = f.run_mvk(&["reject", &run.id, "--reason", "use + in add, not -"], &[]);
    answered.expect_code(0);
    // The same run went on with attempt 2 on the `guided` rung, which the reason fixed.
    assert_eq!(answered.id, run.id);
    assert_eq!(started(&answered), [1, 2], "{}", answered.why());
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(decisions(&f), [("human".to_string(), "reject".to_string())]);
    assert_eq!(state(&f, &run.id), "finished");
}

#[test]
fn a_rejected_attempt_that_fails_again_goes_back_to_the_person() {
    let (f, run) = at_the_human_rung();
    let answered = f.run_mvk(&["reject", &run.id, "--reason", "try harder"], &[]);
    answered.expect_code(4);
    assert_eq!(started(&answered), [1, 2], "{}", answered.why());
    assert_eq!(f.tip("main"), f.base, "nothing landed");
    assert_eq!(
        decisions(&f),
        [
            ("human".to_string(), "reject".to_string()),
            ("human".to_string(), "-".to_string())
        ]
    );
    let prompt = fs::read_to_string(answered.attempt_dir(2).join("prompt.md")).unwrap();
    assert!(prompt.contains("try harder"), "{prompt}");
}

#[test]
fn approving_lands_the_branch_a_person_finished_once_its_gates_pass() {
    let (f, run) = at_the_human_rung();
    // The person finishes the work on the attempt's branch, in a checkout of their own.
    let desk = tempfile::tempdir().unwrap();
    let desk = desk.path().join("desk");
    f.git(&[
        "worktree",
        "add",
        "-q",
        desk.to_str().unwrap(),
        &run.branch(1),
    ]);
    fs::write(desk.join("src/calc.sh"), FIXED).unwrap();
    git(&desk, &["commit", "-q", "-am", "fix add by hand"]);
    f.git(&["worktree", "remove", "--force", desk.to_str().unwrap()]);

    let answered = f.run_mvk(&["approve", &run.id], &[]);
    answered.expect_code(0);
    // The person's branch is attempt 2, made by a person and judged like any other.
    assert_eq!(started(&answered), [1, 2], "{}", answered.why());
    assert_eq!(
        answered.named("attempt.started")[1]["detail"]["agent"],
        "person"
    );
    assert_eq!(
        answered.named("gate.finished").last().unwrap()["detail"]["exit_code"],
        0,
        "{}",
        answered.why()
    );
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(state(&f, &run.id), "finished");
}

#[test]
fn approving_a_branch_that_still_fails_lands_nothing_and_asks_again() {
    let (f, run) = at_the_human_rung();
    let answered = f.run_mvk(&["approve", &run.id], &[]);
    // Not stuck (exit 2) on the same failure twice: the person is asked again.
    answered.expect_code(4);
    assert_eq!(started(&answered), [1, 2], "{}", answered.why());
    assert_eq!(f.tip("main"), f.base, "a failing change never lands");
    assert_eq!(
        decisions(&f),
        [
            ("human".to_string(), "approve".to_string()),
            ("human".to_string(), "-".to_string())
        ]
    );
}
