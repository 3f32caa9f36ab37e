//! The independent reviewer end to end: `review agent=… rounds=N` after the gates pass, with a
//! scripted reviewer (`tests/agents/reviewer.sh`) that fails loudly when it sees anything the
//! maker printed, and a maker (`tests/agents/marked_fix.sh`) that prints such a marker.

use std::fs;

use rusqlite::Connection;

use crate::support::{CALC, FIXED, Fixture, Run, TESTS_GATE, agent_def, loop_kdl};

/// The defs of maker `bot` and reviewer `rev` answering as MODE.
fn maker_and_reviewer(mode: &str) -> String {
    format!(
        "{}{}",
        agent_def("bot", "marked_fix.sh", &["@STATE"]),
        agent_def("rev", "reviewer.sh", &["@STATE", mode])
    )
}

/// A loop whose maker fixes the bug and whose reviewer answers as MODE, with ROUNDS of rework.
fn reviewed(mode: &str, rounds: u32, extra: &str) -> Fixture {
    let defs = format!(
        "{}{}",
        agent_def("bot", "marked_fix.sh", &["@STATE"]),
        agent_def("rev", "reviewer.sh", &["@STATE", mode])
    );
    Fixture::new(&loop_kdl(
        &defs,
        true,
        TESTS_GATE,
        &format!("review agent=rev rounds={rounds}\n    {extra}"),
    ))
}

fn ledger(f: &Fixture) -> Connection {
    Connection::open(f.root().join(".mvk/ledger.db")).unwrap()
}

/// The reviews of the run, in order: (attempt number, verdict).
fn reviews(f: &Fixture) -> Vec<(u32, String)> {
    let db = ledger(f);
    let mut stmt = db
        .prepare(
            "SELECT a.number, r.verdict FROM reviews r JOIN attempts a ON a.id = r.attempt_id
             ORDER BY r.id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn assert_no_leak(f: &Fixture, run: &Run) {
    assert!(
        !f.state("leak").exists(),
        "the reviewer saw the maker's output\n{}",
        run.why()
    );
}

#[test]
fn a_rejection_blocks_the_merge_and_its_blockers_reach_the_maker_and_the_next_reviewer() {
    let f = reviewed("reject-then-approve", 2, "");
    let run = f.apply();
    run.expect_code(0);
    assert_no_leak(&f, &run);
    assert_eq!(run.attempts(), vec![1, 2]);
    assert_eq!(
        reviews(&f),
        vec![(1, "reject".to_string()), (2, "approve".to_string())]
    );
    // Attempt 1 was not merged: the one landing is attempt 2's.
    let merges = run.named("merge.done");
    assert_eq!(merges.len(), 1, "{}", run.why());
    assert_eq!(merges[0]["attempt"], 2);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    let failed = run.one("attempt.failed");
    assert_eq!(failed["detail"]["kind"], "review", "{}", run.why());
    // The maker's second prompt carries the blocker; the reviewer's first prompt the diff.
    let maker2 = fs::read_to_string(f.state("maker-prompt-2.md")).unwrap();
    assert!(
        maker2.contains("add() ignores negative operands (review 1)")
            && maker2.contains("src/calc.sh:2"),
        "{maker2}"
    );
    let review1 = fs::read_to_string(f.state("review-prompt-1.md")).unwrap();
    assert!(
        review1.contains("+add() { echo $(($1 + $2)); }"),
        "{review1}"
    );
    assert!(
        review1.contains("`tests`: pass (2 executed, 2 passed"),
        "{review1}"
    );
    // The reviewer's notes are follow-ups, listed by `mvk followups`.
    let out = f.mvk().args(["followups", "--json"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes: Vec<&str> = doc["followups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["note"].as_str().unwrap())
        .collect();
    assert_eq!(
        notes,
        vec![
            "consider a test for negatives",
            "document add() in the README"
        ]
    );
}

#[test]
fn rejections_past_the_rounds_stop_for_a_person_and_never_merge() {
    let f = reviewed("always-reject", 1, "");
    let run = f.apply();
    run.expect_code(4);
    assert_no_leak(&f, &run);
    assert_eq!(run.attempts(), vec![1, 2], "one rework, then a person");
    assert_eq!(f.tip("main"), f.base, "main moved\n{}", run.why());
    run.none("merge.started");
    let handoff = run.one("human.handoff");
    assert_eq!(
        handoff["detail"]["blockers"][0]["evidence"],
        "add() is still wrong (review 2)"
    );
    let text = fs::read_to_string(run.dir.join("HANDOFF.md")).unwrap();
    assert!(text.contains("add() is still wrong (review 2)"), "{text}");
    // The progress on stderr says what the reviewer found and that the run waits.
    assert!(
        run.context.contains(
            "t #1: review: reject; (correctness) src/calc.sh:2: add() is still wrong (review 1)"
        ),
        "{}",
        run.context
    );
    assert!(
        run.context.contains(
            "t #2: waiting for a person (review): the reviewer rejected attempt 2 after 1 round of rework (2 rejections in all): (correctness) src/calc.sh:2: add() is still wrong (review 2); approve to land attempt 2"
        ),
        "{}",
        run.context
    );
    let waiting = run.one("checkpoint.waiting");
    assert_eq!(waiting["detail"]["kind"], "review");
    assert_eq!(waiting["attempt"], 2);
    run.one("run.paused");
    run.none("task.finished");
    assert_eq!(run_state(&f, &run.id), "paused");
    // `mvk status` says who it waits for, since when, and how to answer.
    let out = f
        .mvk()
        .args(["status", &run.id, "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = &status["waiting_for"];
    assert_eq!(w["kind"], "decision", "{status}");
    assert_eq!(w["checkpoint"], "review");
    assert_eq!(
        (w["task"].as_str(), w["attempt"].as_u64()),
        (Some("t"), Some(2))
    );
    assert!(w["since"].as_str().unwrap().starts_with("20"), "{w}");
    assert_eq!(w["approve"], format!("mvk approve {} t", run.id));
    assert_eq!(status["tasks"][0]["waiting_for"], *w);
    assert_eq!(status["phase"], "waiting-human");
    // Resuming without an answer refuses, still waiting.
    let out = f.mvk().args(["resume", &run.id]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("mvk approve"));
    assert_eq!(f.tip("main"), f.base);
}

// Guards against the same-failure brake ending a review disagreement as "stuck" (exit 2): a
// reviewer that rejects with the same blocker every time is bounded by its rounds, then a
// person decides (exit 4), whatever the brake's count.
#[test]
fn the_same_rejection_again_and_again_goes_to_a_person_never_to_the_brake() {
    for rounds in [1_u32, 2] {
        let f = reviewed("same-reject", rounds, "budget iterations=10 same-failure=2");
        let run = f.apply();
        run.expect_code(4);
        let made: Vec<u64> = (1..=u64::from(rounds) + 1).collect();
        assert_eq!(
            run.attempts(),
            made,
            "rounds={rounds}: {rounds} of rework, then a person\n{}",
            run.why()
        );
        run.none("task.stuck");
        assert_eq!(f.tip("main"), f.base, "main moved\n{}", run.why());
        let waiting = run.one("checkpoint.waiting");
        assert_eq!(waiting["detail"]["kind"], "review", "rounds={rounds}");
        let handoff = run.one("human.handoff");
        assert_eq!(
            handoff["detail"]["blockers"][0]["evidence"], "add() must not use shell arithmetic",
            "rounds={rounds}"
        );
        let text = fs::read_to_string(run.dir.join("HANDOFF.md")).unwrap();
        assert!(
            text.contains("add() must not use shell arithmetic")
                && text.contains(
                    "  - gate `tests`: pass (2 executed, 2 passed, 0 failed, 0 skipped; evidence: nonce)"
                ),
            "rounds={rounds}: the handoff carries the blocker and the evidence\n{text}"
        );
        assert_eq!(run_state(&f, &run.id), "paused", "rounds={rounds}");
    }
}

// Guards against a disagreement ending without a person when the ladder's rungs run out
// before the review's rounds do: it was "every rung's attempts were used", exit 1.
#[test]
fn rungs_used_up_on_a_rejection_go_to_a_person() {
    let f = Fixture::new(&loop_kdl(
        &maker_and_reviewer("same-reject"),
        false,
        TESTS_GATE,
        "ladder { rung agent=bot attempts=2; }\n    review agent=rev rounds=3",
    ));
    let run = f.apply();
    run.expect_code(4);
    assert_eq!(run.attempts(), vec![1, 2], "{}", run.why());
    let waiting = run.one("checkpoint.waiting");
    assert_eq!(waiting["detail"]["kind"], "review");
    assert_eq!(waiting["attempt"], 2);
    assert_eq!(f.tip("main"), f.base);
    // Approving lands what the reviewer rejected, as past the rounds.
    let approved = f.run_mvk(&["approve", &run.id, "t"], &[]);
    approved.expect_code(0);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

// Guards against a crash between recording a rejection past the rounds and opening its
// checkpoint: the resume made one more attempt than the rounds allow.
#[test]
fn a_rejection_past_the_rounds_cut_short_by_a_crash_still_goes_to_a_person() {
    let f = reviewed("same-reject", 0, "");
    let crashed = f.run_mvk(
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", "review-rejected")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    crashed.none("checkpoint.waiting");
    let resumed = f.run_mvk(&["resume"], &[]);
    resumed.expect_code(4);
    assert_eq!(
        resumed.attempts(),
        vec![1],
        "no attempt past the rounds\n{}",
        resumed.why()
    );
    let waiting = resumed.one("checkpoint.waiting");
    assert_eq!(waiting["detail"]["kind"], "review");
    assert_eq!(waiting["attempt"], 1);
    assert_eq!(f.tip("main"), f.base);
}

/// The attempt numbers started since the run was last resumed (the trail holds the whole run).
fn new_attempts(run: &Run) -> Vec<u64> {
    let last = run
        .events
        .iter()
        .rposition(|e| e["event"] == "run.resumed")
        .unwrap_or(0);
    run.events[last..]
        .iter()
        .filter(|e| e["event"] == "attempt.started")
        .map(|e| e["attempt"].as_u64().unwrap())
        .collect()
}

fn run_state(f: &Fixture, run: &str) -> String {
    ledger(f)
        .query_row("SELECT state FROM runs WHERE id = ?1", [run], |r| r.get(0))
        .unwrap()
}

/// A person approves, from another process, what the reviewer kept rejecting: it lands.
#[test]
fn approving_past_the_rounds_lands_the_attempt_the_reviewer_rejected() {
    let f = reviewed("always-reject", 0, "");
    let run = f.apply();
    run.expect_code(4);
    assert_eq!(run.attempts(), vec![1]);
    let approved = f.run_mvk(&["approve", &run.id], &[]);
    approved.expect_code(0);
    assert_eq!(approved.id, run.id);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(approved.named("merge.done").len(), 1, "{}", approved.why());
    assert_eq!(
        approved.one("checkpoint.answered")["detail"]["decision"],
        "approve"
    );
    assert_eq!(run_state(&f, &run.id), "finished");
    let decided: String = ledger(&f)
        .query_row("SELECT decision FROM checkpoints", [], |r| r.get(0))
        .unwrap();
    assert_eq!(decided, "approve");
    // Answered once: a second answer is refused.
    let again = f.mvk().args(["approve", &run.id]).output().unwrap();
    assert_eq!(again.status.code(), Some(64));
}

/// A person's rejection goes into the next attempt's prompt; the reviewer still stops it.
#[test]
fn a_person_rejecting_sends_the_reason_to_the_next_attempt() {
    let f = reviewed("always-reject", 0, "");
    let run = f.apply();
    run.expect_code(4);
    let rejected = f.run_mvk(
        &[
            "reject",
            &run.id,
            "t",
            "--reason",
            "also handle overflow, says Ada",
        ],
        &[],
    );
    rejected.expect_code(4);
    assert_eq!(new_attempts(&rejected), vec![2], "{}", rejected.why());
    let prompt = fs::read_to_string(f.state("maker-prompt-2.md")).unwrap();
    assert!(
        prompt.contains("also handle overflow, says Ada"),
        "{prompt}"
    );
    // Regression: the person's reason replaced the reviewer's blockers in the next prompt.
    assert!(
        prompt.contains("add() is still wrong (review 1)"),
        "{prompt}"
    );
    assert_eq!(f.tip("main"), f.base);
    let kinds: Vec<String> = {
        let db = ledger(&f);
        let mut stmt = db
            .prepare("SELECT COALESCE(decision, '-') FROM checkpoints ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(kinds, vec!["reject", "-"]);
}

/// `--mode step` stops after each attempt; `--mode batch` before each landing.
#[test]
fn step_mode_stops_after_each_attempt_and_approval_goes_on() {
    let f = Fixture::new(&crate::support::simple_loop("honest.sh", ""));
    let run = f.apply_with(&["--mode", "step"], &[]);
    run.expect_code(4);
    assert_eq!(run.attempts(), vec![1]);
    assert_eq!(run.one("checkpoint.waiting")["detail"]["lands"], false);
    assert_eq!(run.one("attempt.failed")["detail"]["kind"], "gate");
    // Attempt 1 failed its gate: approving goes on to attempt 2, which passes and stops again.
    let second = f.run_mvk(&["approve", &run.id], &[]);
    second.expect_code(4);
    assert_eq!(new_attempts(&second), vec![2]);
    let waits = second.named("checkpoint.waiting");
    assert_eq!(waits.len(), 2);
    assert_eq!(waits[1]["detail"]["lands"], true);
    assert_eq!(f.tip("main"), f.base);
    let third = f.run_mvk(&["approve", &run.id], &[]);
    third.expect_code(0);
    assert_eq!(new_attempts(&third), Vec::<u64>::new());
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

#[test]
fn batch_mode_stops_before_landing_and_a_rejection_makes_another_attempt() {
    let f = Fixture::new(&crate::support::simple_loop("fix.sh", ""));
    let run = f.apply_with(&["--mode", "batch"], &[]);
    run.expect_code(4);
    run.none("merge.started");
    assert_eq!(run.one("checkpoint.waiting")["detail"]["kind"], "batch");
    let again = f.run_mvk(&["reject", &run.id, "--reason", "squash the comments"], &[]);
    again.expect_code(4);
    assert_eq!(new_attempts(&again), vec![2]);
    let prompt = fs::read_to_string(again.attempt_dir(2).join("prompt.md")).unwrap();
    assert!(
        prompt.contains("a person rejected attempt 1: squash the comments"),
        "{prompt}"
    );
    assert_eq!(f.tip("main"), f.base);
    let done = f.run_mvk(&["approve", &run.id], &[]);
    done.expect_code(0);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

/// An approval whose continuation dies before landing is finished by `mvk resume`, once.
#[test]
fn a_run_resumed_after_a_person_answered_follows_the_answer() {
    let f = Fixture::new(&crate::support::simple_loop("fix.sh", ""));
    let run = f.apply_with(&["--mode", "batch"], &[]);
    run.expect_code(4);
    let out = f
        .mvk()
        .args(["approve", &run.id])
        .env("MVK_FAILPOINT", "merge-intent")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(f.tip("main"), f.base);
    let resumed = f.run_mvk(&["resume", &run.id], &[]);
    resumed.expect_code(0);
    assert_eq!(new_attempts(&resumed), Vec::<u64>::new());
    assert_eq!(resumed.named("merge.done").len(), 1);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    let landings = f.git(&["rev-list", "--count", &format!("{}..main", f.base)]);
    assert_eq!(landings.trim(), "1");
}

#[test]
fn a_malformed_verdict_is_unknown_never_approval() {
    let f = reviewed("garbage", 2, "");
    let run = f.apply();
    run.expect_code(2);
    assert_eq!(f.tip("main"), f.base, "main moved\n{}", run.why());
    assert_eq!(
        fs::read_to_string(f.root().join("src/calc.sh")).unwrap(),
        CALC
    );
    run.none("merge.started");
    assert!(
        reviews(&f).iter().all(|(_, v)| v == "unknown"),
        "{:?}",
        reviews(&f)
    );
    assert_eq!(run.one("task.finished")["detail"]["outcome"], "unknown");
}

/// Independence: `mvk check` warns when the reviewer is a maker rung's agent with its model.
#[test]
fn check_warns_when_the_reviewer_is_a_maker() {
    let def = "agent bot timeout=\"30s\" {\n    param model default=\"small\"\n    run \"sh\" \"@AGENTS/fix.sh\" \"{{model}}\"\n}\n";
    let check = |review: &str| {
        let f = Fixture::new(&loop_kdl(
            def,
            false,
            TESTS_GATE,
            &format!("ladder {{\n        rung agent=bot model=big\n    }}\n    {review}"),
        ));
        let out = f.mvk().args(["check", "loops/t.kdl"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let same = check("review agent=bot model=big");
    assert!(same.contains("mvk::reviewer-not-independent"), "{same}");
    assert!(
        same.contains("the reviewer is the same agent as a maker: `bot (model=big)`"),
        "{same}"
    );
    let other = check("review agent=bot model=other");
    assert!(!other.contains("reviewer-not-independent"), "{other}");
}

/// A rate-limited reviewer is not a verdict: the review is made again after the wait.
#[test]
fn a_rate_limited_reviewer_reviews_again_after_the_wait() {
    let defs = format!(
        "{}agent rev timeout=\"30s\" {{\n    run \"sh\" \"@AGENTS/reviewer.sh\" \"@STATE\" \"limited-then-approve\"\n    rate-limit \"RATE LIMITED\"\n}}\n",
        agent_def("bot", "marked_fix.sh", &["@STATE"])
    );
    let f = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "review agent=rev"));
    let run = f.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), vec![1]);
    let limited = run.one("review.rate-limited");
    assert_eq!(limited["detail"]["wait_ms"], 1000);
    assert_eq!(limited["detail"]["gave_up"], false);
    assert_eq!(reviews(&f), vec![(1, "approve".to_string())]);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

// Regression: mvk dying after a reviewer's rejection was recorded made the resume ask the
// reviewer again, and a second answer could approve what had been rejected.
#[test]
fn a_recorded_rejection_stands_after_a_crash() {
    let f = reviewed("reject-then-approve", 2, "budget iterations=3");
    let crashed = f.run_mvk(
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", "review-recorded")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    let resumed = f.run_mvk(&["resume"], &[]);
    let start = resumed
        .events
        .iter()
        .rposition(|e| e["event"] == "run.resumed")
        .unwrap();
    let after: Vec<&str> = resumed.events[start..]
        .iter()
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert!(after.contains(&"review.recalled"), "{}", resumed.why());
    // The recalled rejection sends the maker back; its second review approves.
    resumed.expect_code(0);
    assert_eq!(
        reviews(&f).iter().filter(|(n, _)| *n == 1).count(),
        1,
        "attempt 1 was reviewed once: {:?}",
        reviews(&f)
    );
}
