//! The invalid-input corpus: every file in `tests/fixtures/invalid/` (but `lib/`, which holds the
//! helper files the cases import) has one mistake, must not compile, must report the diagnostic
//! named on its `// expect: mvk::…` line, and its rendered diagnostics are snapshots.

use std::path::{Path, PathBuf};

const DIR: &str = "tests/fixtures/invalid";

/// The case files, sorted, as paths relative to the crate root so rendered names are stable.
fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<PathBuf> = std::fs::read_dir(root.join(DIR))
        .expect("list the invalid fixtures")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "kdl"))
        .map(|p| Path::new(DIR).join(p.file_name().expect("a file name")))
        .collect();
    out.sort();
    out
}

/// The code on the `// expect: mvk::…` line (the file's second line).
fn expected_code(text: &str, path: &Path) -> String {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    assert!(
        first.starts_with("// "),
        "{}: the first line must be a comment saying what is wrong",
        path.display()
    );
    let second = lines.next().unwrap_or_default();
    second
        .strip_prefix("// expect: ")
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|| panic!("{}: line 2 must be `// expect: mvk::code`", path.display()))
}

#[test]
fn corpus_is_large_enough() {
    let n = cases().len();
    assert!(n >= 45, "expected at least 45 invalid cases, found {n}");
}

#[test]
fn invalid_inputs_fail_with_the_expected_diagnostic() {
    // Cargo runs integration tests from the crate root; the fixtures' names depend on it.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert_eq!(
        std::env::current_dir()
            .expect("current dir")
            .canonicalize()
            .ok(),
        root.canonicalize().ok(),
        "run from the crate root so rendered paths are relative"
    );
    let renderer = mvk::diag::Renderer::plain(80);
    let options = mvk::resolve::Options {
        repo_root: None,
        ..Default::default()
    };
    let abs = root.to_string_lossy();
    // Every case is checked and snapshotted before any failure is reported.
    let mut problems = Vec::new();
    for path in cases() {
        let text = std::fs::read_to_string(&path).expect("read case");
        let expect = expected_code(&text, &path);
        let compiled = mvk::resolve::compile(&path, &options);
        let shown = path.display();
        let rendered = renderer.render_all(&compiled.diags, &compiled.sources);
        let codes: Vec<&str> = compiled.diags.iter().map(|d| d.code).collect();
        if compiled.program.is_some() || !compiled.diags.has_errors() {
            problems.push(format!("{shown} compiled, but it has a mistake"));
        }
        if !codes.contains(&expect.as_str()) {
            problems.push(format!("{shown}: expected {expect}, got {codes:?}"));
        }
        if rendered.contains(abs.as_ref()) || rendered.contains("/tmp") {
            problems.push(format!(
                "{shown}: rendered diagnostics hold an absolute path"
            ));
        }
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a file stem")
            .to_string();
        insta::with_settings!({
            snapshot_path => "snapshots/invalid",
            prepend_module_to_snapshot => false,
            description => text.lines().next().unwrap_or_default(),
            omit_expression => true,
        }, {
            insta::assert_snapshot!(name, rendered);
        });
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A file of stray characters is one syntax error per byte; `mvk check` shows the first fifty and
/// counts the rest (rendering each one reads the file from the start: thousands took minutes).
#[test]
fn thousands_of_syntax_errors_are_counted_after_the_first_fifty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stray.kdl");
    std::fs::write(&path, format!("a\n{}", ")".repeat(6_000))).expect("write");
    let out = assert_cmd::Command::cargo_bin("mvk")
        .expect("the mvk binary is built")
        .arg("check")
        .arg(&path)
        .env("NO_COLOR", "1")
        .output()
        .expect("run mvk check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(65), "{stderr}");
    assert_eq!(
        stderr.matches("mvk::kdl-syntax").count(),
        mvk::diag::SHOWN,
        "{stderr}"
    );
    assert!(
        stderr.contains("… and 5950 more not shown (5950 errors, 0 warnings)"),
        "{stderr}"
    );
    assert!(stderr.contains(": 6000 errors"), "{stderr}");
}

/// Review r8e: a loop file is read no further than what tells it too large, so `/dev/zero`
/// (or a file of gigabytes) named as one is refused without filling memory.
#[test]
fn a_loop_file_that_never_ends_is_refused_as_too_large() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("zero.kdl");
    std::os::unix::fs::symlink("/dev/zero", &path).expect("symlink");
    let (out, stderr) = check(&path);
    assert_eq!(out.status.code(), Some(65), "{stderr}");
    assert!(
        stderr.contains("mvk::too-large") && stderr.contains("at least 67108868 bytes"),
        "{stderr}"
    );
}

/// A FIFO named as a loop file is refused at once: opening it for reading would wait for a
/// writer for good.
#[test]
fn a_fifo_named_as_a_loop_file_is_refused_without_waiting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pipe.kdl");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let (out, stderr) = check(&path);
    assert!(out.status.code().is_some_and(|c| c != 0), "{stderr}");
    assert!(stderr.contains("FIFO or socket"), "{stderr}");
}

/// `mvk check PATH` (at most a minute): its output and its standard error as text.
fn check(path: &std::path::Path) -> (std::process::Output, String) {
    let out = assert_cmd::Command::cargo_bin("mvk")
        .expect("the mvk binary is built")
        .arg("check")
        .arg(path)
        .env("NO_COLOR", "1")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .expect("run mvk check");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

/// A seal or scope that matches no file git tracks (`test/**` where the folder is `tests/`) is
/// a warning at `check` with the path meant, stops `apply` before any attempt, and makes
/// `verify` say unknown, never untouched; `new=#true` says the paths are to appear.
#[test]
fn a_path_that_matches_nothing_is_caught_before_money_is_spent() {
    use crate::support::{Fixture, TESTS_GATE, agent_def, loop_kdl};
    let text = loop_kdl(&agent_def("bot", "fix.sh", &[]), true, TESTS_GATE, "")
        .replace("seal \"tests/**\"", "seal \"test/**\"");
    let f = Fixture::new(&text);
    let out = f.mvk().args(["check", "loops/t.kdl"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning: {err}");
    assert!(
        err.contains("mvk::matches-nothing") && err.contains("did you mean `tests/**`?"),
        "{err}"
    );
    let apply = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    assert_eq!(apply.status.code(), Some(64));
    assert!(!f.root().join(".mvk/runs").exists(), "no run was started");
    std::fs::write(f.root().join("tests/test_calc.sh"), "exit 0\n").unwrap();
    let verify = f
        .mvk()
        .args(["verify", "loops/t.kdl", "--base", "main"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(
        verify.status.code(),
        Some(2),
        "unknown, never untouched: {text}"
    );
    assert!(text.contains("matches no file at the base"), "{text}");

    // `./tests` is `tests/`; a scope of a new place near an existing name is advice, not a stop.
    let near = loop_kdl(&agent_def("bot", "fix.sh", &[]), true, TESTS_GATE, "").replace(
        "seal \"tests/**\"",
        "seal \"./tests\"\n    scope \"src-tauri/**\"",
    );
    let h = Fixture::new(&near);
    let out = h.mvk().args(["check", "loops/t.kdl"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("mvk::matches-nothing"), "{err}");
    assert!(err.contains("mvk::scope-matches-nothing"), "{err}");

    let declared = loop_kdl(&agent_def("bot", "fix.sh", &[]), true, TESTS_GATE, "").replace(
        "seal \"tests/**\"",
        "seal \"tests/**\"\n    scope \"src/new/**\" new=#true",
    );
    let g = Fixture::new(&declared);
    let out = g.mvk().args(["check", "loops/t.kdl"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("matches-nothing"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A flow whose only fan-out matches no file has nothing to run: `apply` says so, where it
/// failed saying the target branch `HEAD` did not exist.
#[test]
fn a_flow_whose_fan_out_matches_nothing_is_refused_with_the_reason() {
    use crate::support::Fixture;
    let text = concat!(
        "agent bot timeout=\"30s\" { run \"sh\" \"-c\" \"true\"; }\n",
        "flow t {\n    task port each=\"items/*.txt\" {\n        goal \"Port {{item}}.\"\n",
        "        agent bot\n        scope \"{{item}}\"\n",
        "        gate ported evidence=none { run \"true\"; }\n    }\n}\n",
    );
    let f = Fixture::new(text);
    let out = f.mvk().args(["apply", "loops/t.kdl"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("has no task to run: its fan-outs"), "{err}");
}
