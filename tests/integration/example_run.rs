//! The README's first command: the example project laid out in a temporary repository and run.
//! `examples/run.sh slugify` with this build's mvk: the scripted agent's first edit fails the
//! sealed test, its second (made from the failure in its prompt) passes and lands on main.

use std::path::{Path, PathBuf};
use std::process::Command;

pub(crate) fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The one run's directory under `.mvk/runs/`.
pub(crate) fn run_dir(repo: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(repo.join(".mvk/runs"))
        .expect("list .mvk/runs")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    runs.into_iter().next().expect("one run")
}

pub(crate) fn events(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .expect("read events.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an event is one JSON object a line"))
        .collect()
}

pub(crate) fn find<'a>(
    events: &'a [serde_json::Value],
    name: &str,
    attempt: u64,
) -> &'a serde_json::Value {
    events
        .iter()
        .find(|e| e["event"] == name && e["attempt"] == attempt)
        .unwrap_or_else(|| panic!("no {name} for attempt {attempt} in {events:#?}"))
}

/// Runs `examples/run.sh NAME` with this build's mvk, laying the example out in DIR; asserts it
/// was accepted (exit 0) and returns what it printed and the repository it made.
pub(crate) fn run_example(name: &str, dir: &Path) -> (String, PathBuf) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("bash")
        .arg(root.join("examples/run.sh"))
        .arg(name)
        .env("MVK_BIN", env!("CARGO_BIN_EXE_mvk"))
        .env("MVK_EXAMPLE_DIR", dir)
        .env("NO_COLOR", "1")
        .output()
        .expect("run examples/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let repo = dir.canonicalize().expect("canonical temp dir").join("repo");
    (stdout, repo)
}

#[test]
fn slugify_is_fixed_on_the_second_attempt_from_the_first_ones_failure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example_lib = root.join("examples/slugify/src/lib.rs");
    let buggy = std::fs::read_to_string(&example_lib).expect("read the example's src/lib.rs");
    let tmp = tempfile::tempdir().expect("tempdir");
    let (stdout, repo) = run_example("slugify", tmp.path());
    assert!(
        stdout
            .lines()
            .any(|l| l == format!("repo: {}", repo.display())),
        "run.sh names the repository it laid out: {stdout}"
    );

    // The trail: attempt 1 failed on the gate, attempt 2 passed, the run was accepted.
    let run = run_dir(&repo);
    let events = events(&run);
    let failed = find(&events, "attempt.failed", 1);
    assert_eq!(failed["detail"]["kind"], "gate", "{failed}");
    assert_eq!(failed["detail"]["gate"], "tests", "{failed}");
    find(&events, "attempt.passed", 2);
    let finished = events
        .iter()
        .find(|e| e["event"] == "run.finished")
        .expect("run.finished");
    assert_eq!(finished["detail"]["outcome"], "accepted", "{finished}");
    assert_eq!(finished["detail"]["exit_code"], 0, "{finished}");
    assert!(
        !events
            .iter()
            .any(|e| e["event"] == "attempt.started" && e["attempt"] == 3),
        "two attempts were enough"
    );

    // The failure fed the next attempt: only attempt 2's prompt names the failing test.
    let prompt = |n: u32| {
        std::fs::read_to_string(run.join(format!("slugify/{n}/prompt.md"))).expect("read prompt")
    };
    let failing_test = "punctuation_and_spaces_collapse_to_one_dash";
    assert!(!prompt(1).contains(failing_test), "{}", prompt(1));
    assert!(prompt(2).contains(failing_test), "{}", prompt(2));

    // What the run printed says so too: its summary line and the STATUS.md run.sh shows.
    assert!(
        stdout.matches("accepted on attempt 2").count() >= 2,
        "{stdout}"
    );

    // main holds the fix, as one squashed commit on top of the example's; its work tree too.
    let fixed = git(&repo, &["show", "main:src/lib.rs"]);
    assert!(fixed.contains("let mut gap = false;"), "{fixed}");
    assert_eq!(
        std::fs::read_to_string(repo.join("src/lib.rs")).expect("read src/lib.rs"),
        fixed,
        "main is checked out, so its files are updated"
    );
    let log = git(&repo, &["log", "--format=%s", "main"]);
    let subjects: Vec<&str> = log.lines().collect();
    assert_eq!(subjects.len(), 2, "{log}");
    assert!(subjects[0].starts_with("mvk: slugify: "), "{log}");
    assert_eq!(
        git(&repo, &["diff", "--name-only", "main~1", "main"]).trim(),
        "src/lib.rs",
        "only the scoped file changed"
    );

    // The example in mvk's checkout is left as it was, still with its bug.
    assert_eq!(
        std::fs::read_to_string(&example_lib).expect("read the example's src/lib.rs"),
        buggy
    );
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "nothing left over in the laid-out repository"
    );
}
