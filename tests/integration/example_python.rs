//! The Python examples run end to end through `examples/run.sh` with this build's mvk:
//! `wordcount` (a package fixed on the second attempt from the first one's pytest failure) and
//! `textkit` (a flow: two fixes in files of their own, then a feature built on both).

use std::path::Path;

use crate::example_run::{events, find, git, run_dir, run_example};
use crate::stdlib_gates::require;

#[test]
fn wordcount_is_fixed_on_the_second_attempt_from_pytests_failure() {
    require("python3", &["-m", "pytest", "--version"]);
    require("python3", &["-m", "ruff", "--version"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (stdout, repo) = run_example("wordcount", tmp.path());
    assert!(stdout.contains("accepted on attempt 2"), "{stdout}");

    let run = run_dir(&repo);
    let events = events(&run);
    let failed = find(&events, "attempt.failed", 1);
    assert_eq!(failed["detail"]["gate"], "tests", "{failed}");
    // pytest's own summary is the evidence: 4 tests, 2 of them failing.
    let counts = events
        .iter()
        .find(|e| e["event"] == "gate.finished" && e["attempt"] == 1)
        .map(|e| e["detail"]["counts"].clone())
        .expect("attempt 1 ran the tests gate");
    assert_eq!(
        counts,
        serde_json::json!({"executed": 4, "passed": 2, "failed": 2, "skipped": 0})
    );
    find(&events, "attempt.passed", 2);

    // Only the second prompt names the test that failed, and that made the fix.
    let prompt = |n: u32| {
        std::fs::read_to_string(run.join(format!("wordcount/{n}/prompt.md"))).expect("prompt")
    };
    let failing = "test_runs_of_whitespace_separate_words";
    assert!(!prompt(1).contains(failing), "{}", prompt(1));
    assert!(prompt(2).contains(failing), "{}", prompt(2));
    let fixed = git(&repo, &["show", "main:src/wordcount/__init__.py"]);
    assert!(fixed.contains("text.lower().split():"), "{fixed}");
    assert_eq!(
        git(&repo, &["diff", "--name-only", "main~1", "main"]).trim(),
        "src/wordcount/__init__.py"
    );
}

#[test]
fn textkit_flow_lands_each_task_and_builds_the_last_on_the_first_two() {
    require("python3", &["-m", "pytest", "--version"]);
    let tmp = tempfile::tempdir().expect("tempdir");
    let (stdout, repo) = run_example("textkit", tmp.path());
    let run = run_dir(&repo);
    let events = events(&run);
    let position = |event: &str, task: &str| {
        events
            .iter()
            .position(|e| e["event"] == event && e["task"] == task)
            .unwrap_or_else(|| panic!("no {event} of {task}:\n{stdout}"))
    };

    // Each task landed one commit touching only the file its scope names.
    for (task, file) in [
        ("slug", "src/textkit/slug.py"),
        ("initials", "src/textkit/initials.py"),
        ("byline", "src/textkit/byline.py"),
    ] {
        let finished = &events[position("task.finished", task)];
        assert_eq!(finished["detail"]["outcome"], "accepted", "{finished}");
        let commit = finished["detail"]["merged"]
            .as_str()
            .expect("a merged commit");
        let parent = format!("{commit}~1");
        assert_eq!(
            git(&repo, &["diff", "--name-only", &parent, commit]).trim(),
            file,
            "{task}"
        );
    }

    // byline waited for both (`after slug initials`): it started from a base holding both fixes,
    // whatever order or parallelism the first two ran in.
    let started = position("task.started", "byline");
    assert!(started > position("task.finished", "slug"));
    assert!(started > position("task.finished", "initials"));
    let base = events[started]["detail"]["base"]
        .as_str()
        .expect("a base commit");
    let at_base = |file: &str| git(&repo, &["show", &format!("{base}:{file}")]);
    assert!(at_base("src/textkit/slug.py").contains("re.findall"));
    assert!(at_base("src/textkit/initials.py").contains(".upper()"));

    // The whole suite passes on main, as byline's `all` gate saw.
    let all = events
        .iter()
        .find(|e| {
            e["event"] == "gate.finished" && e["task"] == "byline" && e["detail"]["gate"] == "all"
        })
        .expect("byline ran its `all` gate");
    assert_eq!(all["detail"]["counts"]["passed"], 5, "{all}");
    let finished = events
        .iter()
        .find(|e| e["event"] == "run.finished")
        .expect("run.finished");
    assert_eq!(finished["detail"]["exit_code"], 0, "{finished}");
    assert!(Path::new(&repo.join("src/textkit/byline.py")).exists());
}

/// An example whose tools are missing says so before anything is built or run (a missing ruff
/// would otherwise show only as a failing gate, attempts later), naming what to install.
#[test]
fn an_example_whose_tools_are_missing_says_so_before_it_starts() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    // A python3 without pytest or ruff.
    let python = bin.join("python3");
    std::fs::write(
        &python,
        "#!/bin/sh\necho 'No module named pytest' >&2\nexit 1\n",
    )
    .expect("write");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("bash")
        .arg(root.join("examples/run.sh"))
        .arg("wordcount")
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("MVK_BIN", assert_cmd::cargo::cargo_bin("mvk"))
        .env("MVK_EXAMPLE_DIR", tmp.path().join("laid-out"))
        .output()
        .expect("run examples/run.sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("examples/wordcount needs `python3 -m pytest --version`")
            && err.contains("pip install pytest ruff"),
        "{err}"
    );
    assert!(
        !tmp.path().join("laid-out/repo").exists(),
        "nothing was laid out"
    );
}
