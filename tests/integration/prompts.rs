//! The stdlib's default maker prompt, as a real run renders it: from the second attempt on it
//! names the scope, the seal, the failing gate, its exit code and counts and the failing line,
//! and it fits the loop's context budget by cutting the gate's output from the front.

use std::fs;

use crate::support::{FAILURE_LINE, Fixture, agent_def, loop_kdl};

#[test]
fn rework_prompt_names_the_contract_and_the_exact_failure_within_the_context_budget() {
    // 5,000 lines of noise before the test's own output: the tail quoted must be cut to fit.
    let gate = r#"gate tests { sh "seq 1 5000; sh tests/test_calc.sh"; }"#;
    let loop_text = loop_kdl(
        &agent_def("bot", "honest.sh", &["@STATE"]),
        true,
        gate,
        "scope \"src/**\"\n    budget iterations=3 context-tokens=512",
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
    // 512 tokens at about four bytes a token; the noise's start is what was cut.
    assert!(second.len() <= 512 * 4, "{} bytes:\n{second}", second.len());
    assert!(!second.contains("\n1\n2\n3\n"), "{second}");
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
