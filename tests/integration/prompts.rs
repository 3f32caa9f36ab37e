//! The stdlib's default maker prompt, as a real run renders it: from the second attempt on it
//! names the scope, the seal, the failing gate, its exit code and counts and the failing line,
//! the previous attempt's diff, excerpts of the files the failure names, the lineage, and the
//! checks' command lines; it fits the loop's context budget by cutting parts in their order.
//! Scripted agents that can succeed only with one part of it prove each part is there and
//! usable; snapshots hold the whole text for a first attempt, a gate failure, a review
//! rejection and a seal breach.

use std::fs;

use crate::support::{FAILURE_LINE, Fixture, Run, TESTS_GATE, agent_def, loop_kdl};

#[test]
fn rework_prompt_names_the_contract_and_the_exact_failure_within_the_context_budget() {
    // 5,000 lines of noise before the test's own output: the tail quoted must be cut to fit. The
    // fixed part alone is some 440 tokens as o200k_base counts (470 as estimated); the rest of
    // the budget holds the output's last lines, the failing one among them.
    let gate = r#"gate tests { sh "seq 1 5000; sh tests/test_calc.sh"; }"#;
    let loop_text = loop_kdl(
        &agent_def("bot", "honest.sh", &["@STATE"]),
        true,
        gate,
        "scope \"src/**\"\n    budget iterations=3 context-tokens=640",
    );
    let fixture = Fixture::new(&loop_text);
    let run = fixture.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());

    let first = fs::read_to_string(run.attempt_dir(1).join("prompt.md")).expect("prompt 1");
    let second = fs::read_to_string(run.attempt_dir(2).join("prompt.md")).expect("prompt 2");
    for prompt in [&first, &second] {
        assert!(
            prompt.contains("Make add() in src/calc.sh return the sum")
                && prompt.contains("`src/**`")
                && prompt.contains("`tests/**`")
                && prompt.contains("- `tests`"),
            "every prompt names the goal, the scope, the seal and the gates:\n{prompt}"
        );
    }
    assert!(
        !first.contains("failed"),
        "attempt 1 has no failure to quote:\n{first}"
    );
    for part in [
        "## Attempt 1 failed",
        "Gate `tests` exited with code 1.",
        "Tests: 2 executed, 1 passed, 1 failed, 0 skipped.",
        FAILURE_LINE,
        "bytes cut to fit the context budget]",
    ] {
        assert!(
            second.contains(part),
            "attempt 2's prompt lacks `{part}`:\n{second}"
        );
    }
    // The size mvk counted is within the budget, and the noise's start is what was cut.
    let built = run.named("prompt.built");
    assert_eq!(built.len(), 2, "{}", run.why());
    let tokens = built[1]["detail"]["tokens"].as_u64().unwrap();
    assert!(tokens <= 640, "{tokens} tokens:\n{second}");
    assert_eq!(built[1]["detail"]["budget"], 640);
    let parts = &built[1]["detail"]["parts"];
    assert_eq!(parts[1]["part"], "failure-output", "{parts}");
    assert_eq!(parts[1]["cut"], true, "{parts}");
    assert!(!second.contains("\n1\n2\n3\n"), "{second}");
    // `mvk log` shows each part's share.
    let log = fixture.mvk().args(["log"]).output().unwrap();
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains(&format!("prompt {tokens}/640 tokens: fixed ")) && log.contains("(cut)"),
        "{log}"
    );
}

#[test]
fn a_task_that_may_change_every_file_gets_no_scope_rule() {
    let loop_text = loop_kdl(
        &agent_def("bot", "honest.sh", &["@STATE"]),
        true,
        r#"gate tests { sh "sh tests/test_calc.sh"; }"#,
        "budget iterations=3",
    );
    let fixture = Fixture::new(&loop_text);
    let run = fixture.apply();
    run.expect_code(0);
    let first = fs::read_to_string(run.attempt_dir(1).join("prompt.md")).expect("prompt 1");
    assert!(
        !first.contains("Change only files matching"),
        "no `scope`: no rule that says nothing:\n{first}"
    );
    assert!(
        first.contains("`tests/**`") && first.contains("## Rules"),
        "the seal's rule stays:\n{first}"
    );
}

/// A gate that runs the sealed test and, when it fails, names the line at fault as compilers do
/// (where `add()` is in the file the attempt left).
const LOCATED_GATE: &str = r#"gate tests { sh "sh tests/test_calc.sh || { echo \"src/calc.sh:$(grep -n 'add()' src/calc.sh | cut -d: -f1): add() is wrong here\"; exit 1; }"; }"#;

#[test]
fn an_agent_that_needs_the_failing_line_itself_gets_it_as_an_excerpt() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "excerpt_fix.sh", &["@STATE"]),
        true,
        LOCATED_GATE,
        "budget iterations=3",
    ));
    let run = fixture.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    let second = fs::read_to_string(fixture.state("prompt-2.md")).unwrap();
    // The excerpt is of the file as attempt 1 left it: the line it named is its line 5 (the
    // base's file has two lines).
    assert!(
        second.contains("`src/calc.sh`, lines 1-5:") && second.contains(">5 | add() {"),
        "{second}"
    );
    let parts = &run.named("prompt.built")[1]["detail"]["parts"];
    assert!(
        parts
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["part"] == "excerpts" && p["tokens"].as_u64().unwrap() > 0),
        "{parts}"
    );
}

#[test]
fn an_agent_that_must_build_on_its_last_try_sees_that_tries_diff() {
    let gate = r#"gate tests { sh "sh tests/test_calc.sh && test -s src/confirm.txt && cmp -s src/token.txt src/confirm.txt"; }"#;
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "diff_memory.sh", &["@STATE"]),
        true,
        gate,
        "budget iterations=3",
    ));
    let run = fixture.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    // The token attempt 1 made up reached main only through attempt 2's prompt.
    let token = fixture.show(&run.branch(1), "src/token.txt").unwrap();
    assert_eq!(fixture.show("main", "src/confirm.txt").unwrap(), token);
    let second = fs::read_to_string(fixture.state("prompt-2.md")).unwrap();
    assert!(
        second.contains("## What attempt 1 changed") && second.contains("src/token.txt | 1 +"),
        "{second}"
    );
}

#[test]
fn an_agent_runs_the_checks_its_prompt_names_before_it_stops() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "self_check.sh", &["@STATE"]),
        true,
        TESTS_GATE,
        "budget iterations=1",
    ));
    let run = fixture.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), [1], "{}", run.why());
    assert_eq!(
        fs::read_to_string(fixture.state("ran")).unwrap(),
        // The test script reads $MVK_NONCE: the line sets it, as the gate's real run does.
        "MVK_NONCE=local-check sh tests/test_calc.sh\n"
    );
    // The wrong fix failed the check, the right one passed it: the agent judged itself.
    assert_eq!(
        fs::read_to_string(fixture.state("ran-codes")).unwrap(),
        "1\n0\n"
    );
}

/// The prompt with what changes from run to run (the repository's place, the run's id,
/// commit ids, diff's index hashes) replaced by names.
fn redacted(fixture: &Fixture, run: &Run, text: &str) -> String {
    let text = text
        .replace(fixture.root().to_str().unwrap(), "[REPO]")
        .replace(&run.id, "[RUN]");
    let hashes = regex::Regex::new(r"\b[0-9a-f]{7,40}\b").unwrap();
    hashes.replace_all(&text, "[HASH]").into_owned()
}

/// Holds PROMPT as snapshot NAME, in `snapshots/prompts/`.
fn snapshot(name: &str, prompt: &str) {
    insta::with_settings!({
        snapshot_path => "snapshots/prompts",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, prompt);
    });
}

/// Runs a loop whose prompts the snapshots hold: first and second attempt's maker prompts.
fn prompts_of(fixture: &Fixture, attempts: &[u64]) -> (Run, Vec<String>) {
    let run = fixture.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), attempts, "{}", run.why());
    let prompts = attempts
        .iter()
        .map(|&n| {
            let text = fs::read_to_string(run.attempt_dir(n as u32).join("prompt.md")).unwrap();
            redacted(fixture, &run, &text)
        })
        .collect();
    (run, prompts)
}

#[test]
fn the_default_prompt_of_a_first_attempt_and_of_a_gate_failure() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "honest.sh", &["@STATE"]),
        true,
        TESTS_GATE,
        "scope \"src/**\"\n    budget iterations=3",
    ));
    let (_, prompts) = prompts_of(&fixture, &[1, 2]);
    snapshot("first_attempt", &prompts[0]);
    snapshot("gate_failure", &prompts[1]);
}

#[test]
fn the_default_prompt_after_a_review_rejection() {
    let fixture = Fixture::new(&loop_kdl(
        &format!(
            "{}{}",
            agent_def("bot", "fix.sh", &[]),
            agent_def("rev", "reviewer.sh", &["@STATE", "reject-then-approve"])
        ),
        true,
        TESTS_GATE,
        "budget iterations=3\n    review agent=rev rounds=2",
    ));
    let (_, prompts) = prompts_of(&fixture, &[1, 2]);
    snapshot("review_rejection", &prompts[1]);
}

#[test]
fn the_default_prompt_after_a_seal_breach() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "tamper_once.sh", &[]),
        true,
        TESTS_GATE,
        "budget iterations=3",
    ));
    let (_, prompts) = prompts_of(&fixture, &[1, 2]);
    snapshot("seal_breach", &prompts[1]);
}

/// What the agent is told to learn; it writes it upper-cased (see `lesson_writer.sh`).
const LESSON: &str = "lesson-7a: the tests run under sh, not bash.";
const LEARNT: &str = "LESSON-7A: THE TESTS RUN UNDER SH, NOT BASH.";

/// The digest of task `t` of FILE, as `mvk plan --json` prints it.
fn digest_of(fixture: &Fixture, file: &str) -> String {
    let out = fixture
        .mvk()
        .args(["plan", "--json", file])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["tasks"][0]["digest"].as_str().unwrap().to_string()
}

#[test]
fn lessons_of_one_run_reach_the_next_run_of_the_loop_and_no_unrelated_loop_nor_any_digest() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def(
            "bot",
            "lesson_writer.sh",
            &["@STATE", "src/calc.sh", LESSON],
        ),
        true,
        TESTS_GATE,
        "scope \"src/**\"\n    lessons \"loops/LESSONS.md\"\n    budget iterations=2",
    ));
    fs::write(
        fixture.root().join("loops/LESSONS.md"),
        "- PINNED-3c: keep add() a one-liner.\n",
    )
    .unwrap();
    let other = loop_kdl(
        &agent_def(
            "bot",
            "lesson_writer.sh",
            &[fixture.state.path().to_str().unwrap(), "docs/notes.md"],
        )
        .replace("@AGENTS", crate::support::agents_dir().to_str().unwrap()),
        true,
        TESTS_GATE,
        "scope \"docs/**\" new=#true",
    )
    .replace("loop t", "loop other");
    fs::write(fixture.root().join("loops/other.kdl"), other).unwrap();
    fixture.git(&["add", "-A"]);
    fixture.git(&["commit", "-q", "-m", "pinned lessons and another loop"]);
    let before = digest_of(&fixture, "loops/t.kdl");

    let first = fixture.apply();
    first.expect_code(0);
    let learned = first.one("lessons.learned");
    assert_eq!(learned["detail"]["author"], "maker");
    let prompt1 = fs::read_to_string(fixture.state("prompt-1.md")).unwrap();
    assert!(prompt1.contains("PINNED-3c"), "{prompt1}");
    assert!(!prompt1.contains(LEARNT), "{prompt1}");
    assert!(
        prompt1.contains("`MVK_LESSONS_FILE`") || prompt1.contains("$MVK_LESSONS_FILE"),
        "{prompt1}"
    );

    // The next run of the same loop is told; the lesson written again is not kept twice.
    let second = fixture.apply();
    second.expect_code(0);
    second.none("lessons.learned");
    let prompt2 = fs::read_to_string(fixture.state("prompt-2.md")).unwrap();
    assert!(
        prompt2.contains("## Lessons from earlier attempts") && prompt2.contains(LEARNT),
        "{prompt2}"
    );

    // A loop whose scope shares nothing with it is not.
    let out = fixture
        .mvk()
        .args(["apply", "loops/other.kdl"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prompt3 = fs::read_to_string(fixture.state("prompt-3.md")).unwrap();
    assert!(!prompt3.contains(LEARNT), "{prompt3}");

    // A lesson is in neither the change nor the digest.
    let grep = fixture.git(&["log", "-p", "--all", "--format=%B"]);
    assert!(!grep.contains(LEARNT), "a lesson reached the repository");
    assert_eq!(digest_of(&fixture, "loops/t.kdl"), before);
    // Nor is a lesson pinned into the loop's lessons file: its text is not drift.
    fs::write(
        fixture.root().join("loops/LESSONS.md"),
        format!("- PINNED-3c: keep add() a one-liner.\n- {LEARNT}\n"),
    )
    .unwrap();
    fixture.git(&["commit", "-q", "-am", "pin a lesson"]);
    assert_eq!(digest_of(&fixture, "loops/t.kdl"), before);
}

#[test]
fn the_pinned_lessons_file_is_sealed() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "lesson_writer.sh", &["@STATE", "loops/LESSONS.md"]),
        true,
        TESTS_GATE,
        "lessons \"loops/LESSONS.md\"\n    budget iterations=1",
    ));
    let run = fixture.apply();
    assert_ne!(run.code, 0, "{}", run.why());
    let breach = run.one("seal.breached");
    assert_eq!(breach["detail"]["breaches"][0]["path"], "loops/LESSONS.md");
}

#[test]
fn check_warns_when_a_first_prompt_alone_is_over_the_context_budget() {
    let long_goal = "Make add() in src/calc.sh return the sum. ".repeat(60);
    let fixture = Fixture::new(
        &loop_kdl(
            &agent_def("bot", "fix.sh", &[]),
            true,
            TESTS_GATE,
            "budget context-tokens=256",
        )
        .replace(
            "Make add() in src/calc.sh return the sum of its arguments.",
            &long_goal,
        ),
    );
    let out = fixture
        .mvk()
        .args(["check", "loops/t.kdl"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning, not an error: {err}");
    assert!(
        err.contains("mvk::prompt-over-budget") && err.contains("before any failure is quoted"),
        "{err}"
    );
    // The same loop with room for its prompt says nothing.
    let roomy = Fixture::new(&loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        TESTS_GATE,
        "budget context-tokens=4000",
    ));
    let out = roomy.mvk().args(["check", "loops/t.kdl"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("prompt-over-budget"));
}

#[test]
fn a_large_flow_warns_of_every_first_prompt_over_budget_in_its_place() {
    // 300 tasks: past the first few, first prompts are checked beside the compile. Every task
    // whose prompt is over its budget is named once, and each warning comes where the task's
    // own checks put it: before the warning of the same task's scope (which is made after it),
    // after those of the tasks before.
    let long_goal = "Make add() in src/calc.sh return the sum. ".repeat(60);
    // 16 and 12 warnings, within the 50 `mvk check` shows; tasks 7, 107 and 207 have both.
    let over = |i: usize| i % 20 == 7 || i == 299;
    let unscoped = |i: usize| i % 25 == 7;
    let mut kdl = agent_def("bot", "fix.sh", &[]);
    kdl.push_str("flow big {\n");
    for i in 0..300 {
        let goal = if over(i) {
            long_goal.as_str()
        } else {
            "Fix add()."
        };
        let scope = if unscoped(i) {
            format!("new{i}/**")
        } else {
            "src/**".to_string()
        };
        kdl.push_str(&format!(
            "  task t{i} {{ goal \"{goal}\"; agent bot; scope \"{scope}\"; {TESTS_GATE}; budget context-tokens=400; }}\n"
        ));
    }
    kdl.push_str("}\n");
    let fixture = Fixture::new(&kdl);
    let out = fixture
        .mvk()
        .args(["check", "loops/t.kdl"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "warnings, not errors: {err}");
    // The order in which the tasks are named, warning by warning.
    let mut named = Vec::new();
    for line in err.lines() {
        if let Some(rest) = line.split("the prompt of `t").nth(1) {
            named.push(format!("prompt t{}", rest.split('`').next().unwrap_or("")));
        }
        if let Some(rest) = line.split("in the scope of `t").nth(1) {
            named.push(format!("scope t{}", rest.split('`').next().unwrap_or("")));
        }
    }
    let mut expected = Vec::new();
    for i in 0..300 {
        if over(i) {
            expected.push(format!("prompt t{i}"));
        }
        if unscoped(i) {
            expected.push(format!("scope t{i}"));
        }
    }
    assert_eq!(named, expected, "{err}");
    assert!(!err.contains("more not shown"), "{err}");
}
