//! `mvk apply` against agents that try to get past the oracle by the side doors: a file git
//! ignores, a process that escapes its group, a file named like mvk's own directory; and a
//! ladder whose human rung must be reached even when the iterations are spent.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

const CALC: &str = "add() { echo $(( $1 - $2 )); }\n";
// The sealed test; like a conftest.py, it lets a file next to it change how it runs.
const TEST: &str = r#"[ -f tests/override.sh ] && . tests/override.sh
. ./src/calc.sh
r=$(add 2 3)
if [ "$r" = 5 ]; then p=1; f=0; else p=0; f=1; echo "FAIL: add 2 3 gave $r, expected 5"; fi
echo "MVK_EVIDENCE={\"schema\":\"mvk.evidence.v1\",\"nonce\":\"$MVK_NONCE\",\"executed\":1,\"passed\":$p,\"failed\":$f,\"skipped\":0}"
[ $f = 0 ]
"#;

/// Runs git with no user or system configuration; shared with the other integration tests.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Repo {
    dir: TempDir,
    worktrees: TempDir,
    state: TempDir,
}

impl Repo {
    /// A repository whose loop runs `agent` (a script under tests/agents/hardening) with LADDER.
    fn new(agent: &str, ladder: &str) -> Repo {
        let repo = Repo {
            dir: tempfile::tempdir().unwrap(),
            worktrees: tempfile::tempdir().unwrap(),
            state: tempfile::tempdir().unwrap(),
        };
        let root = repo.dir.path();
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/agents/hardening")
            .join(agent);
        let kdl = format!(
            "agent bot timeout=\"20s\" {{\n    run \"sh\" \"{}\" \"{}\"\n}}\n\
             loop t {{\n    goal \"Make add add.\"\n    {ladder}\n    scope \"src/**\"\n    seal \"tests/**\"\n\
             gate tests evidence=nonce {{\n        run \"sh\" \"tests/test_calc.sh\"\n    }}\n}}\n",
            script.display(),
            repo.state.path().display()
        );
        git(root, &["init", "-q", "-b", "main"]);
        git(root, &["config", "user.name", "T"]);
        git(root, &["config", "user.email", "t@example.com"]);
        for (path, text) in [
            ("src/calc.sh", CALC),
            ("tests/test_calc.sh", TEST),
            (".gitignore", "tests/override.sh\n"),
            ("loops/t.kdl", kdl.as_str()),
        ] {
            let p = root.join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        git(root, &["add", "-A"]);
        git(root, &["commit", "-qm", "init"]);
        repo
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `mvk apply loops/t.kdl`; returns its exit code and standard output.
    fn apply(&self) -> (i32, String) {
        let out = assert_cmd::Command::cargo_bin("mvk")
            .unwrap()
            .args(["apply", "loops/t.kdl"])
            .current_dir(self.root())
            .env("MVK_WORKTREE_ROOT", self.worktrees.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        (
            out.status.code().unwrap_or(-1),
            format!("{stdout}\n{stderr}"),
        )
    }

    fn main_file(&self, path: &str) -> String {
        git(self.root(), &["show", &format!("main:{path}")])
    }

    fn state(&self, name: &str) -> PathBuf {
        self.state.path().join(name)
    }
}

#[test]
fn an_ignored_file_that_fools_the_test_is_not_in_the_gates_checkout() {
    let repo = Repo::new("ignored_override.sh", "agent bot\n    budget iterations=1");
    let (code, out) = repo.apply();
    // The gate runs on the captured commit, which has no override: the bug is still there.
    assert_ne!(code, 0, "{out}");
    assert_eq!(repo.main_file("src/calc.sh"), CALC);
}

#[test]
fn a_process_that_escapes_its_group_is_killed_before_the_gates() {
    let repo = Repo::new("escapee.sh", "agent bot\n    budget iterations=1");
    let (code, out) = repo.apply();
    assert_eq!(code, 0, "{out}");
    // The escapee would have touched its marker 2 s after the agent ended.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(
        !repo.state("escaped").exists(),
        "an escaped process outlived the attempt"
    );
}

#[test]
fn a_committed_dot_mvk_file_is_a_seal_breach_and_the_ledger_survives() {
    let repo = Repo::new("mvk_file.sh", "agent bot\n    budget iterations=1");
    let (code, out) = repo.apply();
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(".mvk"), "{out}");
    assert!(repo.root().join(".mvk/ledger.db").is_file());
    assert_eq!(repo.main_file("src/calc.sh"), CALC);
}

#[test]
fn the_human_rung_is_reached_when_the_iterations_are_spent() {
    let repo = Repo::new(
        "wrong.sh",
        "ladder {\n        rung agent=bot attempts=1\n        rung human\n    }\n    budget iterations=1",
    );
    let (code, out) = repo.apply();
    assert_eq!(code, 4, "{out}");
    let runs = fs::read_dir(repo.root().join(".mvk/runs")).unwrap();
    let run = runs.flatten().next().unwrap().path();
    let handoff = fs::read_to_string(run.join("HANDOFF.md")).unwrap();
    assert!(handoff.contains("attempt 1"), "{handoff}");
}
