//! `mvk init` end to end: real temporary project directories of each kind, the files written,
//! the loop checked and planned by `mvk` itself, and the refusal to overwrite.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::git;

/// `mvk ARGS…` with its working directory in DIR; (exit code, stdout, stderr).
pub(crate) fn mvk(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(assert_cmd::cargo::cargo_bin("mvk"))
        .current_dir(dir)
        .args(args)
        .env("NO_COLOR", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("MVK_REPO")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `mvk init project` beside a project holding MANIFEST (if any), checks and plans the
/// loop it wrote, and returns the loop's one gate as `mvk plan --json` gives it.
fn init_project(manifest: Option<&str>) -> Value {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    fs::create_dir_all(&project).unwrap();
    if let Some(name) = manifest {
        fs::write(project.join(name), "").unwrap();
    }
    // Run from outside the project, so that DIR is what decides.
    let (code, stdout, stderr) = mvk(tmp.path(), &["init", "project"]);
    assert_eq!(code, 0, "mvk init failed\n{stdout}\n{stderr}");
    assert_eq!(
        stdout,
        "wrote project/loops/fix-tests.kdl\nwrote project/loops/agents.kdl\nwrote project/loops/prompts/maker.hbs\n",
        "paths as seen from where mvk was started"
    );
    assert!(
        stderr.contains("`mvk check project/loops/fix-tests.kdl`"),
        "{stderr}"
    );
    for file in [
        "loops/fix-tests.kdl",
        "loops/agents.kdl",
        "loops/prompts/maker.hbs",
    ] {
        assert!(project.join(file).is_file(), "{file} was not written");
    }
    let (code, stdout, stderr) = mvk(
        &project,
        &["check", "loops/fix-tests.kdl", "loops/agents.kdl"],
    );
    assert_eq!(
        code, 0,
        "the written loop does not check\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("ok: loops/fix-tests.kdl (loop `fix-tests`)"),
        "{stderr}"
    );
    let (code, stdout, stderr) = mvk(&project, &["plan", "loops/fix-tests.kdl", "--json"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let plan: Value = serde_json::from_str(&stdout).unwrap();
    let task = &plan["tasks"][0];
    assert!(
        task["seal"].as_array().is_some_and(|s| !s.is_empty()),
        "{task}"
    );
    let gates = task["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 1, "{task}");
    gates[0].clone()
}

fn argv(gate: &Value) -> Vec<&str> {
    gate["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}

#[test]
fn a_rust_project_gets_cargo_test_from_the_stdlib() {
    let gate = init_project(Some("Cargo.toml"));
    assert_eq!(argv(&gate), ["cargo", "test", "--no-fail-fast"]);
    assert_eq!(gate["evidence"], "cargo-test");
}

#[test]
fn a_python_project_gets_pytest() {
    let gate = init_project(Some("pyproject.toml"));
    assert_eq!(argv(&gate), ["python3", "-m", "pytest"]);
    assert_eq!(gate["evidence"], "pytest");
}

#[test]
fn a_node_project_gets_npm_test() {
    let gate = init_project(Some("package.json"));
    assert_eq!(argv(&gate), ["npm", "run", "test"]);
    assert_eq!(gate["evidence"], "auto");
}

#[test]
fn a_go_project_gets_go_test() {
    let gate = init_project(Some("go.mod"));
    assert_eq!(argv(&gate), ["go", "test", "-v", "./..."]);
    assert_eq!(gate["evidence"], "go-test");
}

#[test]
fn a_project_without_a_manifest_gets_a_command_gate() {
    let gate = init_project(None);
    assert_eq!(argv(&gate), ["sh", "-c", "make test"]);
    assert_eq!(gate["evidence"], "none");
}

#[test]
fn init_refuses_to_overwrite_and_names_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let agents = tmp.path().join("loops/agents.kdl");
    fs::create_dir_all(agents.parent().unwrap()).unwrap();
    fs::write(&agents, "// mine\n").unwrap();
    let (code, stdout, stderr) = mvk(tmp.path(), &["init"]);
    assert_eq!(code, 64, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("error: `loops/agents.kdl` already exists in `.`; nothing was written"),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(&agents).unwrap(), "// mine\n");
    assert!(
        !tmp.path().join("loops/fix-tests.kdl").exists(),
        "a file was written beside the existing one"
    );
    // A file where the project's directory should be.
    let (code, _, stderr) = mvk(tmp.path(), &["init", "loops/agents.kdl"]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.contains("error: `loops/agents.kdl` is not a directory"),
        "{stderr}"
    );
}

#[test]
fn the_book_shows_the_files_init_writes() {
    // The starter loop and agent of a Rust project, as `book/src/starting.md` shows them.
    let book =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/starting.md"))
            .unwrap();
    for (path, text) in mvk::scaffold::files(mvk::scaffold::ProjectKind::Rust) {
        if path.ends_with(".kdl") {
            assert!(
                book.contains(&text),
                "book/src/starting.md does not show `{path}` as `mvk init` writes it:\n{text}"
            );
        }
    }
}

const BUGGY: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n";
const FIXED: &str = "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n";

#[test]
fn the_rust_starter_loop_runs_to_an_accepted_change() {
    // A crate whose sealed test fails; `mvk init`; only the agent's command is replaced (by a
    // script that fixes the bug); then `mvk apply` of the written loop, as is.
    let tmp = tempfile::tempdir().unwrap();
    let worktrees = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    let files = [
        (
            "Cargo.toml",
            "[package]\nname = \"adder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        ("src/lib.rs", BUGGY),
        (
            "tests/add.rs",
            "#[test]\nfn two_and_three_make_five() {\n    assert_eq!(adder::add(2, 3), 5);\n}\n",
        ),
        (".gitignore", "/target\nCargo.lock\n"),
    ];
    for (path, text) in files {
        let path = repo.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    let (code, stdout, stderr) = mvk(repo, &["init"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    fs::write(
        repo.join("fix.sh"),
        format!("cat > src/lib.rs <<'RUST'\n{FIXED}RUST\n"),
    )
    .unwrap();
    fs::write(
        repo.join("loops/agents.kdl"),
        "agent coder timeout=\"2m\" { run \"sh\" \"fix.sh\"; }\n",
    )
    .unwrap();
    git(repo, &["init", "-q", "-b", "main"]);
    git(repo, &["config", "user.name", "T"]);
    git(repo, &["config", "user.email", "t@example.com"]);
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "init"]);
    let out = Command::new(assert_cmd::cargo::cargo_bin("mvk"))
        .current_dir(repo)
        .args(["apply", "loops/fix-tests.kdl"])
        .env("NO_COLOR", "1")
        .env("MVK_WORKTREE_ROOT", worktrees.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("MVK_REPO")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "mvk apply of the starter loop\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The gate really ran the crate's test: `cargo test`'s summary is the evidence.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let run = stdout.lines().next().unwrap().trim();
    let events = fs::read_to_string(repo.join(".mvk/runs").join(run).join("events.jsonl")).unwrap();
    let gate: Value = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "gate.finished")
        .unwrap_or_else(|| panic!("no gate.finished in\n{events}"));
    assert_eq!(gate["detail"]["verdict"], "pass", "{gate}");
    assert_eq!(gate["detail"]["counts"]["executed"], 1, "{gate}");
    assert_eq!(gate["detail"]["counts"]["passed"], 1, "{gate}");
    assert_eq!(git(repo, &["show", "main:src/lib.rs"]), FIXED);
}

// Regression: a failure midway left the first files behind, and a second `mvk init` refused.
#[test]
fn a_failed_init_keeps_nothing_and_can_be_run_again() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    fs::create_dir_all(project.join("loops")).unwrap();
    // `loops/prompts` is a file, so the third file cannot be written.
    fs::write(project.join("loops/prompts"), "in the way").unwrap();
    let (code, _, stderr) = mvk(tmp.path(), &["init", "project"]);
    assert_eq!(code, 70, "{stderr}");
    assert!(stderr.contains("nothing was kept"), "{stderr}");
    assert!(!project.join("loops/fix-tests.kdl").exists());
    assert!(!project.join("loops/agents.kdl").exists());
    fs::remove_file(project.join("loops/prompts")).unwrap();
    let (code, _, stderr) = mvk(tmp.path(), &["init", "project"]);
    assert_eq!(code, 0, "{stderr}");
}

/// The starter seal holds the test patterns that find a file of the project (a seal that
/// matches nothing guards nothing, and `mvk apply` stops on it); with no test yet, `tests/**`
/// is kept, marked as to appear, and the loop still checks and applies its rules quietly.
#[test]
fn the_starter_seal_names_only_test_files_the_project_has() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("py");
    fs::create_dir_all(project.join("tests")).unwrap();
    fs::write(project.join("pyproject.toml"), "").unwrap();
    fs::write(project.join("tests/test_x.py"), "").unwrap();
    let (code, _, stderr) = mvk(tmp.path(), &["init", "py"]);
    assert_eq!(code, 0, "{stderr}");
    let text = fs::read_to_string(project.join("loops/fix-tests.kdl")).unwrap();
    assert!(
        text.contains("seal \"tests/**\" \"**/test_*.py\" \"loops/**\"\n"),
        "{text}"
    );

    let bare = tmp.path().join("bare");
    fs::create_dir_all(&bare).unwrap();
    fs::write(bare.join("pyproject.toml"), "").unwrap();
    let (code, _, stderr) = mvk(tmp.path(), &["init", "bare"]);
    assert_eq!(code, 0, "{stderr}");
    let text = fs::read_to_string(bare.join("loops/fix-tests.kdl")).unwrap();
    assert!(
        text.contains("seal \"tests/**\" \"loops/**\" new=#true\n"),
        "{text}"
    );
    git(&bare, &["init", "-q", "-b", "main"]);
    git(&bare, &["add", "-A"]);
    git(
        &bare,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "x",
        ],
    );
    let (code, _, stderr) = mvk(&bare, &["check", "loops/fix-tests.kdl"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("matches-nothing"), "{stderr}");
}
