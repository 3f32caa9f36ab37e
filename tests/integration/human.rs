//! The `human` rung through the binary: a ladder that climbs to it stops at a checkpoint (exit
//! 4, a `HANDOFF.md`, the run paused); `mvk reject --reason` buys one more attempt on the last
//! agent rung, told the reason; `mvk approve` judges the attempt's branch as the person left
//! it (seal, gates), as attempt N+1 made by a person, and lands it only when it passes, else
//! asks again.

use std::fs;

use rusqlite::Connection;

use super::support::{FIXED, Fixture, Run, TESTS_GATE, agent_def, git, loop_kdl};

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
pub(crate) fn decisions(f: &Fixture) -> Vec<(String, String)> {
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

#[test]
fn each_rejection_at_the_human_rung_buys_one_more_attempt() {
    let (f, run) = at_the_human_rung();
    let first = f.run_mvk(&["reject", &run.id, "--reason", "try harder"], &[]);
    first.expect_code(4);
    let second = f.run_mvk(&["reject", &run.id, "--reason", "use + in add, not -"], &[]);
    second.expect_code(0);
    assert_eq!(started(&second), [1, 2, 3], "{}", second.why());
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

#[test]
fn in_step_mode_the_last_attempt_before_the_human_rung_asks_once() {
    let defs = agent_def("guided", "guided.sh", &[]);
    let ladder = "ladder {\n        rung agent=guided attempts=1\n        rung human\n    }";
    let f = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let run = f.apply_with(&["--mode", "step"], &[]);
    run.expect_code(4);
    assert_eq!(
        decisions(&f),
        [("human".to_string(), "-".to_string())],
        "one question about attempt 1, at the human rung"
    );
    let answered = f.run_mvk(&["reject", &run.id, "--reason", "use + in add"], &[]);
    // Step mode stops after attempt 2 too (it passed): approving lands it.
    answered.expect_code(4);
    let landed = f.run_mvk(&["approve", &run.id], &[]);
    landed.expect_code(0);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

#[test]
fn two_tasks_of_a_flow_at_the_human_rung_each_keep_their_handoff() {
    let defs = agent_def("guided", "guided.sh", &[]);
    let task = |name: &str, file: &str| {
        format!(
            "    task {name} {{\n        goal \"Fix {file}.\"\n        scope \"{file}\"\n        seal \"tests/**\"\n        {TESTS_GATE}\n        ladder {{\n            rung agent=guided attempts=1\n            rung human\n        }}\n    }}\n"
        )
    };
    let text = format!(
        "{defs}flow t {{\n    parallel 2\n{}{}}}\n",
        task("one", "a.txt"),
        task("two", "b.txt")
    );
    let f = Fixture::new(&text);
    let run = f.apply();
    run.expect_code(4);
    assert_eq!(run.named("checkpoint.waiting").len(), 2, "{}", run.why());
    let all = fs::read_to_string(run.dir.join("HANDOFF.md")).unwrap();
    for name in ["one", "two"] {
        assert!(
            all.contains(&format!("task `{name}`")),
            "HANDOFF.md lost `{name}`:\n{all}"
        );
        assert!(run.dir.join(name).join("HANDOFF.md").is_file());
    }
}

#[test]
fn a_rejection_stands_when_mvk_dies_during_the_attempt_it_bought() {
    use super::resume::{crash, resume, wait_for};
    let defs = agent_def("guided", "guided_pause.sh", &["@STATE"]);
    let ladder = "ladder {\n        rung agent=guided attempts=1\n        rung human\n    }";
    let f = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let run = f.apply();
    run.expect_code(4);
    let mut child = f
        .mvk_std()
        .args(["reject", &run.id, "--reason", "use + in add"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&f.state("started"), &mut child);
    crash(&mut child, None);
    fs::write(f.state("go"), "").unwrap();
    let resumed = resume(&f, &[]);
    // The person's reason is followed again: attempt 2 is made anew with it, and lands.
    resumed.expect_code(0);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    let prompt = fs::read_to_string(resumed.attempt_dir(2).join("prompt.md")).unwrap();
    assert!(prompt.contains("use + in add"), "{prompt}");
}
