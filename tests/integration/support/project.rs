//! The shell-only project the tests run loops on (a bug, a sealed test, gate scripts), loop
//! files written around scripted agents, and git run hermetically.

// The helpers unwrap too: a panic there is the failure report.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use super::*;

/// The project's code, with the bug: `add` subtracts.
pub(crate) const CALC: &str = "# calc: tiny arithmetic helpers\nadd() { echo $(($1 - $2)); }\n";
/// `src/calc.sh` as the fixing agents write it.
pub(crate) const FIXED: &str = "# calc: tiny arithmetic helpers\nadd() { echo $(($1 + $2)); }\n";
/// The oracle (sealed): runs two checks, prints its counts as evidence with the gate's nonce and
/// exits non-zero when one fails.
pub(crate) const TEST_CALC: &str = r#"#!/bin/sh
. ./src/calc.sh
executed=0
passed=0
failed=0
check() {
    executed=$((executed + 1))
    if [ "$2" = "$3" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: $1: expected $3, got $2"
    fi
}
check "add 2 3" "$(add 2 3)" 5
check "add 0 0" "$(add 0 0)" 0
echo "MVK_EVIDENCE={\"schema\":\"mvk.evidence.v1\",\"nonce\":\"$MVK_NONCE\",\"executed\":$executed,\"passed\":$passed,\"failed\":$failed,\"skipped\":0}"
[ "$failed" -eq 0 ]
"#;
/// Gate scripts some tests use instead of the honest test run; not sealed, never touched.
pub(super) const CHECKS: &[(&str, &str)] = &[
    (
        "checks/fake_nonce.sh",
        "echo 'MVK_EVIDENCE={\"schema\":\"mvk.evidence.v1\",\"nonce\":\"0123456789abcdef0123456789abcdef\",\"executed\":2,\"passed\":2,\"failed\":0,\"skipped\":0}'\n",
    ),
    ("checks/replay.sh", "cat evidence.out\n"),
    (
        "checks/zero.sh",
        "echo \"MVK_EVIDENCE={\\\"schema\\\":\\\"mvk.evidence.v1\\\",\\\"nonce\\\":\\\"$MVK_NONCE\\\",\\\"executed\\\":0,\\\"passed\\\":0,\\\"failed\\\":0,\\\"skipped\\\":0}\"\n",
    ),
    (
        "checks/no_secret.sh",
        "if [ -n \"${MY_API_TOKEN+set}\" ]; then echo 'credential leaked into the gate'; exit 1; fi\nexec sh tests/test_calc.sh\n",
    ),
    (
        "checks/zero_cargo.sh",
        "echo 'running 0 tests'\necho 'test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s'\n",
    ),
    (
        "checks/post_fail.sh",
        "echo 'after-merge check failed'\nexit 1\n",
    ),
];

/// The honest gate: the sealed test script.
pub(crate) const TESTS_GATE: &str = r#"gate tests { run "sh" "tests/test_calc.sh"; }"#;
/// The line the test script prints for the bug; only the failure report can carry it.
pub(crate) const FAILURE_LINE: &str = "FAIL: add 2 3: expected 5, got -1";

/// An agent definition named NAME running `sh tests/agents/SCRIPT ARGS…`, 30 s timeout.
pub(crate) fn agent_def(name: &str, script: &str, args: &[&str]) -> String {
    agent_def_timeout(name, script, args, "30s")
}

pub(crate) fn agent_def_timeout(name: &str, script: &str, args: &[&str], timeout: &str) -> String {
    let mut argv = format!("\"@AGENTS/{script}\"");
    for arg in args {
        argv.push_str(&format!(" \"{arg}\""));
    }
    format!("agent {name} timeout=\"{timeout}\" {{ run \"sh\" {argv}; }}\n")
}

/// A loop file: agent definitions, then loop `t` with the seal `tests/**`, GATES and EXTRA.
/// `agent bot` is used unless EXTRA holds a ladder (then pass `uses_bot = false`).
pub(crate) fn loop_kdl(defs: &str, uses_bot: bool, gates: &str, extra: &str) -> String {
    let agent = if uses_bot { "agent bot" } else { "" };
    format!(
        "{defs}\nloop t {{\n    goal \"Make add() in src/calc.sh return the sum of its arguments.\"\n    {agent}\n    seal \"tests/**\"\n    {gates}\n    {extra}\n}}\n"
    )
}

/// The common case: agent `bot` runs SCRIPT with the state directory as its argument.
pub(crate) fn simple_loop(script: &str, extra: &str) -> String {
    loop_kdl(
        &agent_def("bot", script, &["@STATE"]),
        true,
        TESTS_GATE,
        extra,
    )
}

/// A one-task loop whose agent runs `tests/agents/hardening/SCRIPT ARGS…` (an attack), judged by
/// the tests gate, with the task's EXTRA lines (its budget, a sandbox).
pub(crate) fn hardening_fixture(script: &str, args: &[&str], extra: &str) -> Fixture {
    Fixture::new(&loop_kdl(
        &agent_def("bot", &format!("hardening/{script}"), args),
        true,
        TESTS_GATE,
        extra,
    ))
}

pub(crate) fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents")
}

/// Runs git in DIR with no user or system configuration; panics on failure.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn git_output(dir: &Path, args: &[&str]) -> std::process::Output {
    StdCommand::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("run git")
}
