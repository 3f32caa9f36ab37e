//! The independent reviewer end to end: `review agent=… rounds=N` after the gates pass, with a
//! scripted reviewer (`tests/agents/reviewer.sh`) that fails loudly when it sees anything the
//! maker printed, and a maker (`tests/agents/marked_fix.sh`) that prints such a marker.

use std::fs;

use rusqlite::Connection;

use crate::apply::{CALC, FIXED, Fixture, Run, TESTS_GATE, agent_def, loop_kdl};

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
    let finished = run.one("task.finished");
    assert_eq!(finished["detail"]["outcome"], "human");
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
