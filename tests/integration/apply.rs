//! `mvk apply` end to end on real temporary git repositories with scripted agents: in go a
//! shell-only project with a bug and a sealed test, a loop file and an agent script from
//! `tests/agents/`; each test asserts the exit code, the target branch's contents and the
//! run's events (`.mvk/runs/<run>/events.jsonl`).

// Its helpers unwrap too, not only #[test] bodies: a panic there is the failure report.
#![allow(clippy::unwrap_used)]

use std::fs;

use serde_json::Value;

use crate::support::*;

// ---------------------------------------------------------------------------------------------
// Accepting an honest change

#[test]
fn honest_agent_fixes_on_second_attempt_from_the_failure_in_its_prompt() {
    let fixture = Fixture::new(&simple_loop("honest.sh", ""));
    let run = fixture.apply();
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());

    let failed = run.one("attempt.failed");
    assert_eq!(failed["attempt"], 1, "{}", run.why());
    assert_eq!(failed["detail"]["kind"], "gate", "{}", run.why());
    assert_eq!(failed["detail"]["gate"], "tests", "{}", run.why());

    let gates = run.named("gate.finished");
    assert_eq!(gates.len(), 2, "{}", run.why());
    assert_eq!(gates[0]["attempt"], 1);
    assert_eq!(gates[0]["detail"]["verdict"], "fail", "{}", run.why());
    assert_eq!(gates[0]["detail"]["counts"]["executed"], 2, "{}", run.why());
    assert_eq!(gates[0]["detail"]["counts"]["failed"], 1, "{}", run.why());
    assert_eq!(gates[1]["attempt"], 2);
    assert_eq!(gates[1]["detail"]["verdict"], "pass", "{}", run.why());

    // The agent only fixed the bug because the second prompt quoted the failure.
    let first = fs::read_to_string(run.attempt_dir(1).join("prompt.md")).unwrap();
    let second = fs::read_to_string(run.attempt_dir(2).join("prompt.md")).unwrap();
    assert!(
        !first.contains(FAILURE_LINE),
        "attempt 1's prompt:\n{first}"
    );
    assert!(
        second.contains(FAILURE_LINE),
        "attempt 2's prompt:\n{second}"
    );

    assert_eq!(
        run.one("merge.done")["detail"]["into"],
        "main",
        "{}",
        run.why()
    );
    let finished = run.one("run.finished");
    assert_eq!(finished["detail"]["outcome"], "accepted", "{}", run.why());
    assert_eq!(finished["detail"]["exit_code"], 0, "{}", run.why());
}

// ---------------------------------------------------------------------------------------------
// The seal

/// Runs `tamper.sh MODE` (which also fixes the bug, so only the seal can refuse it) with one
/// iteration: the run is rejected, nothing lands, no gate runs, and the breach names the test
/// with one of KINDS. Returns the fixture and the breaches for further checks.
pub(crate) fn tampering(mode: &str, kinds: &[&str]) -> (Fixture, Vec<Value>) {
    let defs = agent_def("bot", "tamper.sh", &[mode]);
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
    let run = fixture.apply();
    run.expect_code(1);
    assert_main_unchanged(&fixture, &run);
    assert_eq!(
        fixture.show("main", "tests/test_calc.sh").as_deref(),
        Some(TEST_CALC)
    );
    run.none("gate.finished");
    run.none("seal.passed");
    assert_eq!(
        run.one("attempt.failed")["detail"]["kind"],
        "seal",
        "{}",
        run.why()
    );
    let breaches = breaches_of_the_test(&run, kinds);
    // The rejected work is kept on the attempt's branch.
    fixture.git(&["rev-parse", "--verify", &run.branch(1)]);
    (fixture, breaches)
}

/// The breaches the run's one `seal.breached` event lists, one of which is of
/// `tests/test_calc.sh` with one of KINDS.
pub(crate) fn breaches_of_the_test(run: &Run, kinds: &[&str]) -> Vec<Value> {
    let breaches = run.one("seal.breached")["detail"]["breaches"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        breaches
            .iter()
            .any(|b| b["path"] == "tests/test_calc.sh"
                && kinds.iter().any(|k| b["kind"]["type"] == *k)),
        "no {kinds:?} breach of tests/test_calc.sh\n{}",
        run.why()
    );
    breaches
}

/// Some breach names the agent's commit "agent: adjust the test" as the one that made it.
fn names_the_agents_commit(fixture: &Fixture, breaches: &[Value]) {
    let subjects: Vec<String> = breaches
        .iter()
        .filter_map(|b| b["commit"].as_str())
        .map(|c| {
            fixture
                .git(&["log", "-1", "--format=%s", c])
                .trim()
                .to_string()
        })
        .collect();
    assert!(
        subjects.iter().any(|s| s == "agent: adjust the test"),
        "no breach names the agent's commit: {breaches:?} (subjects {subjects:?})"
    );
}

#[test]
fn seal_refuses_an_edited_test() {
    tampering("edit", &["modified"]);
}

#[test]
fn seal_refuses_a_deleted_test() {
    tampering("delete", &["deleted"]);
}

#[test]
fn seal_refuses_a_renamed_test() {
    // Moved out of the sealed directory with its content unchanged: the sealed side is named.
    let (_, breaches) = tampering("rename", &["renamed"]);
    let breach = breaches
        .iter()
        .find(|b| b["kind"]["type"] == "renamed")
        .unwrap();
    assert_eq!(breach["kind"]["from"], "tests/test_calc.sh", "{breach}");
    assert_eq!(breach["kind"]["to"], "src/test_calc.sh", "{breach}");
}

#[test]
fn seal_refuses_a_committed_edit() {
    let (fixture, breaches) = tampering("commit", &["modified"]);
    names_the_agents_commit(&fixture, &breaches);
}

#[test]
fn seal_refuses_an_edit_committed_then_reverted() {
    // The net change leaves the test as it was, but the attempt's history changed the oracle.
    let (fixture, breaches) = tampering("commit-revert", &["modified"]);
    names_the_agents_commit(&fixture, &breaches);
}

#[test]
fn seal_refuses_a_test_replaced_by_a_symlink() {
    tampering("symlink", &["symlink_replaced"]);
}

#[test]
fn seal_refuses_a_chmodded_test() {
    let (_, breaches) = tampering("chmod", &["mode_changed"]);
    let breach = breaches
        .iter()
        .find(|b| b["kind"]["type"] == "mode_changed")
        .unwrap();
    assert_eq!(breach["kind"]["old"], 0o100644, "{breach}");
    assert_eq!(breach["kind"]["new"], 0o100755, "{breach}");
}

// ---------------------------------------------------------------------------------------------
// Evidence

/// The fixing agent AGENT against GATE_SCRIPT (which exits 0 with bad evidence): the gate's
/// verdict is unknown, never pass, and nothing lands.
pub(crate) fn unknown_evidence(agent: &str, gate_script: &str, extra: &str) -> Run {
    unknown_evidence_kept(agent, gate_script, extra).1
}

/// [`unknown_evidence`], keeping the fixture (and the run's files) for more checks.
pub(crate) fn unknown_evidence_kept(agent: &str, gate_script: &str, extra: &str) -> (Fixture, Run) {
    let defs = agent_def("bot", agent, &["@STATE"]);
    let gate = format!("gate tests {{ run \"sh\" \"{gate_script}\"; }}");
    let fixture = Fixture::new(&loop_kdl(&defs, true, &gate, extra));
    let run = fixture.apply();
    run.expect_code(2);
    assert_main_unchanged(&fixture, &run);
    let gates = run.named("gate.finished");
    assert!(!gates.is_empty(), "{}", run.why());
    for gate in &gates {
        assert_eq!(gate["detail"]["verdict"], "unknown", "{}", run.why());
        assert_eq!(gate["detail"]["exit_code"], 0, "{}", run.why());
    }
    for failed in run.named("attempt.failed") {
        assert_eq!(failed["detail"]["kind"], "unknown", "{}", run.why());
    }
    run.none("attempt.passed");
    (fixture, run)
}

#[test]
fn fake_evidence_with_a_wrong_nonce_is_unknown() {
    let run = unknown_evidence("fix.sh", "checks/fake_nonce.sh", "budget iterations=1");
    assert_eq!(run.attempts(), [1], "{}", run.why());
}

#[test]
fn stale_evidence_written_by_the_agent_is_unknown() {
    let run = unknown_evidence(
        "stale_evidence.sh",
        "checks/replay.sh",
        "budget iterations=1",
    );
    assert_eq!(run.attempts(), [1], "{}", run.why());
}

#[test]
fn zero_executed_tests_are_unknown_and_repeat_into_stuck() {
    // Default budget: same-failure=2 stops it after the second identical unknown.
    let run = unknown_evidence("fix.sh", "checks/zero.sh", "");
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    let failed = run.named("attempt.failed");
    assert_eq!(failed.len(), 2, "{}", run.why());
    assert_eq!(
        failed[0]["detail"]["signature"],
        failed[1]["detail"]["signature"]
    );
}

// ---------------------------------------------------------------------------------------------
// Misbehaving agents

#[test]
fn an_agent_that_changes_nothing_is_stuck() {
    let fixture = Fixture::new(&simple_loop("noop.sh", "budget same-failure=2"));
    let run = fixture.apply();
    run.expect_code(2);
    assert_main_unchanged(&fixture, &run);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    let failed = run.named("attempt.failed");
    assert_eq!(failed.len(), 2, "{}", run.why());
    for f in &failed {
        assert_eq!(f["detail"]["kind"], "gate", "{}", run.why());
    }
    assert_eq!(
        failed[0]["detail"]["signature"],
        failed[1]["detail"]["signature"],
        "{}",
        run.why()
    );
    assert_eq!(
        run.one("run.finished")["detail"]["outcome"],
        "stuck",
        "{}",
        run.why()
    );
}

#[test]
fn a_hanging_agent_times_out_and_leaves_no_process() {
    let defs = agent_def_timeout("bot", "hang.sh", &["@STATE"], "2s");
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
    let run = fixture.apply();
    // The only iteration failed on the agent: the budget ran out.
    run.expect_code(3);
    assert_main_unchanged(&fixture, &run);
    let finished = run.one("agent.finished");
    assert_eq!(finished["detail"]["timed_out"], true, "{}", run.why());
    assert_eq!(
        run.one("attempt.failed")["detail"]["kind"],
        "agent",
        "{}",
        run.why()
    );
    run.none("gate.finished");
    assert_gone(&fixture.state("agent.pid"), &run);
    assert_gone(&fixture.state("child.pid"), &run);
}

#[test]
fn a_child_outliving_its_agent_is_ended_and_does_not_hold_the_run() {
    // The child keeps the agent's stdout and stderr open; the agent itself exits at once.
    let defs = agent_def_timeout("bot", "orphan.sh", &["@STATE"], "20s");
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
    let run = fixture.apply();
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    let finished = run.one("agent.finished");
    assert_eq!(finished["detail"]["timed_out"], false, "{}", run.why());
    assert_eq!(finished["detail"]["exit_code"], 0, "{}", run.why());
    assert_gone(&fixture.state("child.pid"), &run);
}

#[test]
fn a_loud_agent_is_logged_to_disk_and_the_run_completes() {
    // 200 MiB rather than the issue's 1 GiB keeps this test a few seconds on a 2-core CI box;
    // it is already far past any in-memory tail. Peak memory for 1 GiB is the benchmark's job.
    const MIB: u64 = 200;
    let defs = agent_def("bot", "loud.sh", &[&MIB.to_string()]);
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
    let run = fixture.apply();
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    let out = run.attempt_dir(1).join("agent.out");
    let len = fs::metadata(&out)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", out.display(), run.why()))
        .len();
    assert!(len >= MIB * 1024 * 1024, "agent.out holds {len} bytes");
}

#[test]
fn a_rate_limited_agent_is_retried_as_the_same_attempt() {
    let defs = "agent bot timeout=\"30s\" {\n    run \"sh\" \"@AGENTS/rate_limited.sh\" \"@STATE\"\n    rate-limit \"RATE LIMITED\"\n}\n"
        .to_string();
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, ""));
    let run = fixture.apply();
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    let limited = run.one("agent.rate-limited");
    assert_eq!(limited["attempt"], 1, "{}", run.why());
    // "retry after 1 seconds" in the message sets the wait.
    assert_eq!(limited["detail"]["wait_ms"], 1000, "{}", run.why());
    assert!(
        limited["detail"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("RATE LIMITED")),
        "{}",
        run.why()
    );
    run.none("attempt.failed");
    assert!(run.attempts().iter().all(|&a| a == 1), "{}", run.why());
    assert_eq!(
        fs::read_to_string(fixture.state("attempts")).unwrap(),
        "1\n1\n",
        "MVK_ATTEMPT of each run of the agent"
    );
}

// ---------------------------------------------------------------------------------------------
// Budgets

/// Exit 3 with one `budget.exhausted` naming BUDGET; nothing lands.
fn exhausted(fixture: &Fixture, run: &Run, budget: &str) {
    run.expect_code(3);
    assert_main_unchanged(fixture, run);
    assert_eq!(
        run.one("budget.exhausted")["detail"]["budget"],
        budget,
        "{}",
        run.why()
    );
    assert_eq!(
        run.one("run.finished")["detail"]["exit_code"],
        3,
        "{}",
        run.why()
    );
}

#[test]
fn iterations_run_out() {
    // same-failure above iterations, so the budget stops it before the brake does.
    let fixture = Fixture::new(&simple_loop(
        "noop.sh",
        "budget iterations=2 same-failure=3",
    ));
    let run = fixture.apply();
    exhausted(&fixture, &run, "iterations");
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
}

#[test]
fn tokens_run_out() {
    // One attempt reports 1200 tokens against a limit of 1000.
    let fixture = Fixture::new(&simple_loop(
        "usage.sh",
        "budget tokens=1000 same-failure=5 iterations=5",
    ));
    let run = fixture.apply();
    exhausted(&fixture, &run, "tokens");
    assert_eq!(run.attempts(), [1], "{}", run.why());
    let budget = run.one("budget.exhausted");
    assert_eq!(budget["detail"]["spent"], 1200, "{}", run.why());
    assert_eq!(budget["detail"]["limit"], 1000, "{}", run.why());
    assert_eq!(
        run.one("agent.finished")["detail"]["tokens"],
        1200,
        "{}",
        run.why()
    );
}

#[test]
fn usd_runs_out() {
    // $0.60 per attempt against $1.00: the second attempt crosses it.
    let fixture = Fixture::new(&simple_loop(
        "usage.sh",
        "budget usd=1.0 same-failure=5 iterations=5",
    ));
    let run = fixture.apply();
    exhausted(&fixture, &run, "usd");
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
}

#[test]
fn wall_time_runs_out() {
    // Each attempt takes two seconds; the loop may take three.
    let fixture = Fixture::new(&simple_loop(
        "slow.sh",
        "budget wall=\"3s\" same-failure=10 iterations=10",
    ));
    let run = fixture.apply();
    exhausted(&fixture, &run, "wall");
    assert!(run.attempts().len() <= 2, "{}", run.why());
}

// ---------------------------------------------------------------------------------------------
// The ladder

#[test]
fn the_ladder_climbs_to_the_next_rung() {
    let defs = agent_def("idle", "noop.sh", &[]) + &agent_def("fixer", "fix.sh", &[]);
    let ladder =
        "ladder {\n        rung agent=idle attempts=1\n        rung agent=fixer attempts=1\n    }";
    let fixture = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let run = fixture.apply();
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    let climbed = run.one("rung.climbed");
    assert_eq!(climbed["detail"]["from"], 1, "{}", run.why());
    assert_eq!(climbed["detail"]["to"], 2, "{}", run.why());
    let started = run.named("attempt.started");
    assert_eq!(started.len(), 2, "{}", run.why());
    assert_eq!(started[0]["detail"]["rung"], 1, "{}", run.why());
    assert_eq!(started[0]["detail"]["agent"], "idle", "{}", run.why());
    assert_eq!(started[1]["attempt"], 2, "{}", run.why());
    assert_eq!(started[1]["detail"]["rung"], 2, "{}", run.why());
    assert_eq!(started[1]["detail"]["agent"], "fixer", "{}", run.why());
}

#[test]
fn the_ladder_ends_with_a_human_handoff() {
    let defs = agent_def("idle", "noop.sh", &[]);
    let ladder = "ladder {\n        rung agent=idle attempts=1\n        rung human\n    }";
    let fixture = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let run = fixture.apply();
    run.expect_code(4);
    assert_main_unchanged(&fixture, &run);
    assert_eq!(run.attempts(), [1], "{}", run.why());
    run.one("human.handoff");
    let handoff = run.dir.join("HANDOFF.md");
    let text = fs::read_to_string(&handoff)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", handoff.display(), run.why()));
    assert!(
        text.contains(&run.branch(1)),
        "HANDOFF.md does not name attempt 1's branch:\n{text}"
    );
    assert!(
        text.contains(FAILURE_LINE),
        "HANDOFF.md does not show the last failure:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Landing

#[test]
fn a_conflict_with_main_keeps_both_sides_and_retries_from_the_new_tip() {
    let defs = agent_def("bot", "conflict.sh", &["@REPO", "@STATE"]);
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, ""));
    let run = fixture.apply();
    run.expect_code(0);
    let main_tip = fs::read_to_string(fixture.state("main_tip"))
        .unwrap()
        .trim()
        .to_string();

    let conflict = run.one("merge.conflict");
    assert_eq!(conflict["attempt"], 1, "{}", run.why());
    assert!(
        conflict["detail"]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "src/calc.sh"),
        "{}",
        run.why()
    );
    let failed = run.one("attempt.failed");
    assert_eq!(failed["attempt"], 1);
    assert_eq!(failed["detail"]["kind"], "merge", "{}", run.why());
    let started = run.named("attempt.started");
    assert_eq!(started.len(), 2, "{}", run.why());
    assert_eq!(
        started[1]["detail"]["base"],
        main_tip.as_str(),
        "{}",
        run.why()
    );

    // main keeps the change made meanwhile and gains attempt 2's note.
    let calc = fixture.show("main", "src/calc.sh").unwrap();
    assert!(
        calc.contains("fixed on main"),
        "main's src/calc.sh:\n{calc}"
    );
    assert!(fixture.show("main", "NOTES.md").is_some(), "{}", run.why());
    let ancestry = git_output(
        fixture.root(),
        &["merge-base", "--is-ancestor", &main_tip, "main"],
    );
    assert!(
        ancestry.status.success(),
        "main lost the commit made meanwhile"
    );
    // Attempt 1's work is still on its branch.
    let kept = fixture.show(&run.branch(1), "src/calc.sh").unwrap();
    assert!(
        kept.contains("fixed by the agent"),
        "attempt 1's branch:\n{kept}"
    );
}

/// An accepted run of `commit_fix.sh` (the agent commits "agent: fix add") with STRATEGY.
fn landed(strategy: &str) -> (Fixture, Run, String) {
    let defs = agent_def("bot", "commit_fix.sh", &[]);
    let merge = format!("merge into=main strategy={strategy}");
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, &merge));
    let run = fixture.apply();
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    let done = run.one("merge.done");
    assert_eq!(done["detail"]["strategy"], strategy, "{}", run.why());
    let tip = fixture.tip("main");
    assert_eq!(done["detail"]["commit"], tip.as_str(), "{}", run.why());
    let head = run.one("attempt.passed")["detail"]["head"]
        .as_str()
        .unwrap()
        .to_string();
    (fixture, run, head)
}

fn parents(fixture: &Fixture, rev: &str) -> Vec<String> {
    fixture
        .git(&["log", "-1", "--format=%P", rev])
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn subjects(fixture: &Fixture, rev: &str) -> String {
    fixture.git(&["log", "--format=%s", rev])
}

#[test]
fn strategy_ff_moves_main_to_the_attempt() {
    let (fixture, run, head) = landed("ff");
    assert_eq!(fixture.tip("main"), head, "{}", run.why());
    assert!(subjects(&fixture, "main").contains("agent: fix add"));
}

#[test]
fn strategy_merge_makes_a_merge_commit() {
    let (fixture, run, head) = landed("merge");
    assert_eq!(
        parents(&fixture, "main"),
        [fixture.base.clone(), head],
        "{}",
        run.why()
    );
}

#[test]
fn strategy_squash_makes_one_commit_with_trailers() {
    let (fixture, run, head) = landed("squash");
    assert_eq!(
        parents(&fixture, "main"),
        std::slice::from_ref(&fixture.base),
        "{}",
        run.why()
    );
    assert!(
        !subjects(&fixture, "main").contains("agent: fix add"),
        "the agent's own commit reached main"
    );
    assert_eq!(
        fixture.tip("main^{tree}"),
        fixture.tip(&format!("{head}^{{tree}}"))
    );
    let message = fixture.git(&["log", "-1", "--format=%B", "main"]);
    assert!(message.starts_with("mvk: t: "), "message:\n{message}");
    let lines: Vec<&str> = message.lines().map(str::trim).collect();
    for trailer in [
        format!("Mvk-Run: {}", run.id),
        "Mvk-Task: t".to_string(),
        "Mvk-Attempt: 1".to_string(),
    ] {
        assert!(
            lines.contains(&trailer.as_str()),
            "no `{trailer}` in:\n{message}"
        );
    }
    assert!(
        lines.iter().any(|l| l
            .strip_prefix("Mvk-Digest: ")
            .is_some_and(|d| !d.is_empty())),
        "no Mvk-Digest trailer in:\n{message}"
    );
}

#[test]
fn a_failing_after_merge_gate_keeps_main_where_it_was() {
    let defs = agent_def("bot", "fix.sh", &[]);
    let merge =
        "merge {\n        gate post evidence=none { run \"sh\" \"checks/post_fail.sh\"; }\n    }";
    let fixture = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, merge));
    let run = fixture.apply();
    run.expect_code(1);
    assert_main_unchanged(&fixture, &run);
    assert_eq!(
        run.one("merge.failed")["detail"]["gate"],
        "post",
        "{}",
        run.why()
    );
}

// ---------------------------------------------------------------------------------------------
// The trail and the environment

#[test]
fn json_output_is_one_document_matching_the_run() {
    let fixture = Fixture::new(&simple_loop("fix.sh", ""));
    let run = fixture.apply_with(&["--json"], &[]);
    run.expect_code(0);
    let doc: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(doc["schema"], "mvk.apply.v1");
    assert_eq!(doc["run"], run.id.as_str());
    assert_eq!(doc["outcome"], "accepted");
    assert_eq!(doc["exit_code"], 0);
    let tasks = doc["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{doc}");
    let task = &tasks[0];
    assert_eq!(task["name"], "t");
    assert_eq!(task["outcome"], "accepted");
    assert_eq!(task["attempts"], 1);
    assert_eq!(task["merged"], fixture.tip("main").as_str());
    assert_eq!(task["branch"], run.branch(1).as_str());
    assert!(task["usd"].is_number(), "{doc}");
    assert!(task["tokens"].is_number(), "{doc}");
}

#[test]
fn the_trail_is_written() {
    let fixture = Fixture::new(&simple_loop("fix.sh", ""));
    let run = fixture.apply();
    run.expect_code(0);
    assert!(
        run.stdout.lines().count() >= 2,
        "no summary line\n{}",
        run.why()
    );

    let first = run.events.first().unwrap();
    let last = run.events.last().unwrap();
    assert_eq!(first["event"], "run.started", "{}", run.why());
    assert_eq!(
        first["detail"]["base"],
        fixture.base.as_str(),
        "{}",
        run.why()
    );
    assert_eq!(last["event"], "run.finished", "{}", run.why());
    assert_eq!(last["detail"]["outcome"], "accepted", "{}", run.why());
    for event in &run.events {
        assert_eq!(event["run"], run.id.as_str(), "{event}");
        assert!(
            event["time"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{event}"
        );
    }
    assert_eq!(
        run.one("task.started")["detail"]["base"],
        fixture.base.as_str()
    );
    for name in [
        "seal.passed",
        "attempt.passed",
        "merge.started",
        "task.finished",
    ] {
        run.one(name);
    }

    let attempt = run.attempt_dir(1);
    for file in ["prompt.md", "agent.out", "agent.err", "gate-tests.log"] {
        assert!(
            attempt.join(file).is_file(),
            "no {file} in {}",
            attempt.display()
        );
    }
    let log = fs::read_to_string(attempt.join("gate-tests.log")).unwrap();
    assert!(log.contains("MVK_EVIDENCE="), "gate log:\n{log}");

    let mvk = fixture.root().join(".mvk");
    assert!(mvk.join("ledger.db").is_file());
    let status = fs::read_to_string(mvk.join("STATUS.md")).unwrap();
    assert!(!status.trim().is_empty());
    let state: Value =
        serde_json::from_str(&fs::read_to_string(mvk.join("loop_state.json")).unwrap()).unwrap();
    assert!(state["phase"].is_string(), "loop_state.json: {state}");
    let exclude = fs::read_to_string(fixture.root().join(".git/info/exclude")).unwrap();
    assert!(
        exclude
            .lines()
            .any(|l| matches!(l.trim(), ".mvk/" | "/.mvk/" | ".mvk" | "/.mvk")),
        ".git/info/exclude:\n{exclude}"
    );
    assert_eq!(fixture.git(&["status", "--porcelain"]), "");
}

#[test]
fn gates_do_not_see_credentials_the_agent_sees() {
    let defs = agent_def("bot", "env_check.sh", &["@STATE"]);
    let gate = r#"gate tests { run "sh" "checks/no_secret.sh"; }"#;
    let fixture = Fixture::new(&loop_kdl(&defs, true, gate, "budget iterations=1"));
    let run = fixture.apply_with(&[], &[("MY_API_TOKEN", "secret")]);
    run.expect_code(0);
    assert_main_fixed(&fixture, &run);
    assert_eq!(
        fs::read_to_string(fixture.state("agent_token")).unwrap(),
        "secret\n",
        "the agent should inherit the caller's credentials"
    );
    let log = fs::read_to_string(run.attempt_dir(1).join("gate-tests.log")).unwrap();
    assert!(!log.contains("leaked"), "gate log:\n{log}");
}
