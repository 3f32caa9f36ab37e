//! [`Fixture`]: a temporary repository holding the project, a worktree root and a state
//! directory, with `mvk` run in it hermetically.

// The helpers unwrap too: a panic there is the failure report.
#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use assert_cmd::Command;
use serde_json::Value;
use tempfile::TempDir;

use super::*;

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
