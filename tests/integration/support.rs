//! What the integration tests share: a temporary repository with the shell-only project (a bug,
//! a sealed test, a loop file) and scripted agents from `tests/agents/` ([`Fixture`]), `mvk`
//! run in it hermetically, and a finished run's exit code and events ([`Run`]).

// The helpers unwrap too: a panic there is the failure report.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

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
const CHECKS: &[(&str, &str)] = &[
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

/// A temporary repository with the project and `loops/t.kdl` committed on `main`, a worktree
/// root, and a state directory outside both for agents to leave notes in.
pub(crate) struct Fixture {
    pub(crate) repo: TempDir,
    pub(crate) worktrees: TempDir,
    pub(crate) state: TempDir,
    /// `main`'s commit before the run.
    pub(crate) base: String,
}

impl Fixture {
    /// Lays out the project with LOOP (`@AGENTS`, `@STATE`, `@REPO`, `@WORKTREES` filled in) and
    /// checks it.
    pub(crate) fn new(loop_text: &str) -> Fixture {
        let repo = tempfile::tempdir().unwrap();
        let worktrees = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let root = repo.path();
        git(root, &["init", "-q", "-b", "main"]);
        git(root, &["config", "user.name", "Test"]);
        git(root, &["config", "user.email", "test@example.com"]);
        git(root, &["config", "commit.gpgsign", "false"]);
        let text = loop_text
            .replace("@AGENTS", agents_dir().to_str().unwrap())
            .replace("@STATE", state.path().to_str().unwrap())
            .replace("@REPO", root.to_str().unwrap())
            .replace("@WORKTREES", worktrees.path().to_str().unwrap());
        let mut files = vec![
            ("src/calc.sh", CALC),
            ("tests/test_calc.sh", TEST_CALC),
            ("loops/t.kdl", text.as_str()),
        ];
        files.extend_from_slice(CHECKS);
        for (path, content) in files {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, content).unwrap();
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "init"]);
        let base = git(root, &["rev-parse", "HEAD"]).trim().to_string();
        let fixture = Fixture {
            repo,
            worktrees,
            state,
            base,
        };
        let check = fixture
            .mvk()
            .args(["check", "loops/t.kdl"])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "mvk check refused the test's loop file:\n{text}\n{}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        fixture
    }

    pub(crate) fn root(&self) -> &Path {
        self.repo.path()
    }

    pub(crate) fn state(&self, name: &str) -> PathBuf {
        self.state.path().join(name)
    }

    pub(crate) fn git(&self, args: &[&str]) -> String {
        git(self.root(), args)
    }

    /// The commit BRANCH points at.
    pub(crate) fn tip(&self, branch: &str) -> String {
        self.git(&["rev-parse", branch]).trim().to_string()
    }

    /// PATH as of REV, or `None` when it is not there.
    pub(crate) fn show(&self, rev: &str, path: &str) -> Option<String> {
        let out = git_output(self.root(), &["show", &format!("{rev}:{path}")]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub(crate) fn mvk(&self) -> Command {
        Command::from_std(self.mvk_std())
    }

    /// `mvk` in the repository, hermetic, as a plain command (to run in the background).
    pub(crate) fn mvk_std(&self) -> StdCommand {
        self.mvk_at(&assert_cmd::cargo::cargo_bin("mvk"))
    }

    /// As [`Fixture::mvk_std`], with the mvk executable at EXE (a copy the test replaces).
    pub(crate) fn mvk_at(&self, exe: &Path) -> StdCommand {
        let mut cmd = StdCommand::new(exe);
        cmd.current_dir(self.root())
            .env("MVK_WORKTREE_ROOT", self.worktrees.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1")
            .env_remove("MVK_REPO");
        // A group of its own, as a shell gives a command: an agent that signals mvk's group
        // must not reach the test harness.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }

    pub(crate) fn apply(&self) -> Run {
        self.apply_with(&[], &[])
    }

    /// Runs `mvk apply loops/t.kdl ARGS…` with ENV added and reads the run's events.
    pub(crate) fn apply_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut all = vec!["apply", "loops/t.kdl"];
        all.extend_from_slice(args);
        self.run_mvk(&all, env)
    }

    /// Runs `mvk ARGS…` (a command that runs a loop and prints its run id first) with ENV
    /// added, and reads the run's events.
    pub(crate) fn run_mvk(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.run_in(self.mvk(), args, env)
    }

    /// `mvk apply loops/t.kdl` with its address space capped at 4 GiB (through `prlimit`) and
    /// killed after SECS: an attack that grows mvk's memory or blocks it for ever fails the
    /// test, not the machine.
    pub(crate) fn apply_bounded(&self, secs: u64) -> Run {
        let mut std = self.mvk_at(Path::new("prlimit"));
        std.args(["--as=4294967296", "--"])
            .arg(assert_cmd::cargo::cargo_bin("mvk"));
        let mut cmd = Command::from_std(std);
        cmd.timeout(std::time::Duration::from_secs(secs));
        self.run_in(cmd, &["apply", "loops/t.kdl"], &[])
    }

    fn run_in(&self, mut cmd: Command, args: &[&str], env: &[(&str, &str)]) -> Run {
        cmd.args(args);
        for (name, value) in env {
            cmd.env(name, value);
        }
        let out = cmd.output().unwrap();
        self.run_of(&out, args.contains(&"--json"))
    }

    /// The run a finished `mvk` command (one that runs a loop and prints its run id first, or
    /// a JSON report with JSON) reported in OUT, with its events.
    pub(crate) fn run_of(&self, out: &std::process::Output, json: bool) -> Run {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let code = out.status.code().unwrap_or(-1);
        let id = if json {
            serde_json::from_str::<Value>(&stdout)
                .ok()
                .and_then(|doc| doc["run"].as_str().map(str::to_string))
        } else {
            stdout.lines().next().map(|line| line.trim().to_string())
        };
        let context = format!("exit code {code}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
        let Some(id) = id.filter(|id| !id.is_empty()) else {
            panic!("no run id on stdout\n{context}");
        };
        let dir = self.root().join(".mvk/runs").join(&id);
        let raw = fs::read_to_string(dir.join("events.jsonl"))
            .unwrap_or_else(|e| panic!("no events.jsonl in {}: {e}\n{context}", dir.display()));
        let events = raw
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("events.jsonl line is not JSON ({e}): {line}"))
            })
            .collect();
        Run {
            code,
            stdout,
            id,
            dir,
            events,
            raw_events: raw,
            context,
        }
    }
}

/// What one `mvk apply` did.
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) id: String,
    /// `.mvk/runs/<run>`.
    pub(crate) dir: PathBuf,
    pub(crate) events: Vec<Value>,
    pub(crate) raw_events: String,
    pub(crate) context: String,
}

impl Run {
    /// Everything worth seeing when an assertion fails.
    pub(crate) fn why(&self) -> String {
        format!("{}\n--- events.jsonl\n{}", self.context, self.raw_events)
    }

    pub(crate) fn expect_code(&self, code: i32) {
        assert_eq!(self.code, code, "wrong exit code\n{}", self.why());
    }

    /// The events called NAME, in order.
    pub(crate) fn named(&self, name: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["event"] == name).collect()
    }

    /// The one event called NAME.
    pub(crate) fn one(&self, name: &str) -> &Value {
        let found = self.named(name);
        assert_eq!(found.len(), 1, "expected one `{name}`\n{}", self.why());
        found[0]
    }

    pub(crate) fn none(&self, name: &str) {
        assert!(
            self.named(name).is_empty(),
            "expected no `{name}`\n{}",
            self.why()
        );
    }

    /// The attempt numbers of the `attempt.started` events.
    pub(crate) fn attempts(&self) -> Vec<u64> {
        self.named("attempt.started")
            .iter()
            .map(|e| e["attempt"].as_u64().unwrap())
            .collect()
    }

    /// `mvk/<run>/t/N`.
    pub(crate) fn branch(&self, attempt: u32) -> String {
        format!("mvk/{}/t/{attempt}", self.id)
    }

    pub(crate) fn attempt_dir(&self, attempt: u32) -> PathBuf {
        self.dir.join("t").join(attempt.to_string())
    }
}

/// Whether PID is a live process (a zombie is dead: it only waits to be reaped).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state letter follows the command name, which is in parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X'))
}

/// Sends SIGKILL to PID (no `kill` binary needed: a fresh machine may lack procps).
pub(crate) fn kill9(pid: u32) {
    if let Some(p) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// Asserts the process whose pid an agent wrote to FILE is gone; kills it if not, so a
/// failing test leaves nothing behind either.
pub(crate) fn assert_gone(file: &Path, run: &Run) {
    let text = fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("{} missing: {e}\n{}", file.display(), run.why()));
    let pid: u32 = text.trim().parse().unwrap();
    if alive(pid) {
        kill9(pid);
        panic!(
            "process {pid} ({}) outlived mvk apply\n{}",
            file.display(),
            run.why()
        );
    }
}

/// The run did not move `main`, and the repository's files still hold the bug.
pub(crate) fn assert_main_unchanged(fixture: &Fixture, run: &Run) {
    assert_eq!(
        fixture.tip("main"),
        fixture.base,
        "main moved\n{}",
        run.why()
    );
    assert_eq!(
        fs::read_to_string(fixture.root().join("src/calc.sh")).unwrap(),
        CALC,
        "the checked-out files changed"
    );
    run.none("merge.done");
}

/// `main` holds the fix, in history and in the checked-out files, and the checkout is clean.
pub(crate) fn assert_main_fixed(fixture: &Fixture, run: &Run) {
    assert_eq!(
        fixture.show("main", "src/calc.sh").as_deref(),
        Some(FIXED),
        "main lacks the fix\n{}",
        run.why()
    );
    assert_eq!(
        fs::read_to_string(fixture.root().join("src/calc.sh")).unwrap(),
        FIXED,
        "the checked-out main was not updated"
    );
    assert_eq!(
        fixture.git(&["status", "--porcelain"]),
        "",
        "the main worktree is not clean after landing"
    );
    assert_eq!(
        fixture.show("main", "tests/test_calc.sh").as_deref(),
        Some(TEST_CALC)
    );
}
