//! Each stdlib gate run against the real tool on a tiny project, passing and failing: the
//! verdict and the evidence counts it gives. The tools come from `tests/tools/install.sh`
//! (`.ci/run` runs it and puts the virtualenv it prints first on PATH): cargo with clippy, rustfmt and nextest; pytest, ruff and mypy; node with
//! vitest, jest, eslint and typescript in a shared npm cache; Debian's Go.

use std::path::{Path, PathBuf};
use std::process::Command;

use mvk::run::judge::evidence::{Counts, GateVerdict};
use mvk::run::judge::gate::{GateContext, GateRun, run_gate};

/// Where `tests/tools/install.sh` installs the npm packages the JavaScript gates run.
fn npm_tools() -> PathBuf {
    let dir = match std::env::var_os("MVK_TEST_TOOLS") {
        Some(dir) => PathBuf::from(dir),
        None => home().join(".cache/mvk-test-tools"),
    };
    dir.join("npm/node_modules")
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
}

/// Fails the test, saying how to install, when a tool is missing: a skipped gate test proves
/// nothing.
pub(crate) fn require(program: &str, args: &[&str]) {
    let ok = Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "`{program} {}` does not run here: install the test tools and put their virtualenv \
         first on PATH, `export PATH=\"$(tests/tools/install.sh):$PATH\"` (.ci/run does)",
        args.join(" ")
    );
}

/// A git repository in a temporary directory with a first commit, the base of every change.
struct Project {
    dir: tempfile::TempDir,
    base: String,
    /// Extra variables for the gates (a shared cargo target directory).
    env: Vec<(String, String)>,
}

impl Project {
    fn new(files: &[(&str, &str)]) -> Project {
        let dir = tempfile::tempdir().expect("tempdir");
        let project = Project {
            dir,
            base: String::new(),
            env: Vec::new(),
        };
        project.git(&["init", "-q", "-b", "main"]);
        project.write(files);
        let base = project.commit("base");
        Project { base, ..project }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(self.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@mvk.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@mvk.invalid")
            .args(args)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn write(&self, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = self.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
        }
    }

    fn commit(&self, message: &str) -> String {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
        self.git(&["rev-parse", "HEAD"])
    }

    /// Makes `node_modules` the shared npm cache's, as `npm install` would have.
    fn link_node_modules(&self) {
        let tools = npm_tools();
        assert!(
            tools.join(".bin").is_dir(),
            "`{}` is missing: install the test tools with tests/tools/install.sh (.ci/run does)",
            tools.display()
        );
        std::os::unix::fs::symlink(&tools, self.path().join("node_modules")).expect("symlink");
        // Keep the link out of the change the diff-based gates see.
        std::fs::write(self.path().join(".gitignore"), "node_modules\n").expect("write");
    }

    /// Compiles `gate checked GATE` in a loop importing `std/gates/LIB.kdl` with `scope`, and
    /// runs that gate here as mvk would after an attempt whose base is the first commit.
    fn gate(&self, lib: &str, gate: &str, scope: &str) -> GateRun {
        let defs = tempfile::tempdir().expect("tempdir");
        let file = defs.path().join("loop.kdl");
        std::fs::write(
            &file,
            format!(
                "import \"std/gates/{lib}.kdl\"\nagent bot {{ run \"true\"; }}\n\
                 loop checked {{\n    goal \"g\"\n    agent bot\n    scope {scope}\n    \
                 gate checked {gate}\n}}\n"
            ),
        )
        .expect("write");
        let compiled = mvk::resolve::compile(&file, &mvk::resolve::Options::default());
        let rendered =
            mvk::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources);
        let program = compiled.program.unwrap_or_else(|| panic!("{rendered}"));
        let task = &program.tasks[0];
        let base = git2::Oid::from_str(&self.base).expect("an oid");
        let mut env = mvk::run::attempt::landing_env(
            "run-test",
            &task.name,
            1,
            base,
            self.path(),
            &task.scope,
        );
        // mvk names itself to its gates; here the gate runs in the test binary, so name mvk.
        env.retain(|(name, _)| name != "MVK_EXE");
        env.push(("MVK_EXE".into(), env!("CARGO_BIN_EXE_mvk").into()));
        env.extend(self.env.iter().cloned());
        let cx = GateContext {
            cwd: self.path(),
            env: &env,
            log: defs.path().join("gate.log"),
            timeout: std::time::Duration::from_secs(600),
            sandbox: None,
            protected: &[],
        };
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let mut run = runtime
            .block_on(run_gate(&task.gates[0], &cx))
            .expect("the gate runs");
        // The log is in `defs`, gone after this: keep its text for the messages.
        run.tail = std::fs::read_to_string(&cx.log).unwrap_or_default();
        run
    }
}

/// Asserts the verdict and the counts (executed is passed + failed), showing the log when wrong.
#[track_caller]
fn expect(run: &GateRun, verdict: GateVerdict, counts: Option<(u64, u64, u64)>) {
    let want = counts.map(|(passed, failed, skipped)| Counts {
        executed: passed + failed,
        passed,
        failed,
        skipped,
    });
    assert!(
        run.verdict == verdict && run.counts() == want,
        "gate `{}`: want {verdict:?} with {want:?}, got {:?} with {:?} ({})\n--- its output:\n{}",
        run.gate,
        run.verdict,
        run.counts(),
        run.reason,
        run.tail
    );
}

const ALL: &str = "\"**\"";

#[test]
fn rust_gates_against_cargo() {
    require("cargo", &["clippy", "--version"]);
    require("cargo", &["fmt", "--version"]);
    require("cargo", &["nextest", "--version"]);
    let mut p = Project::new(&[
        (
            "Cargo.toml",
            "[package]\nname = \"fx\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        ),
        (
            "src/lib.rs",
            "//! Adds.\n\n/// Adds two numbers.\n///\n/// ```\n/// assert_eq!(fx::add(1, 2), 3);\n/// ```\n\
             pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    \
             #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 2), 4);\n    }\n\n    \
             #[test]\n    fn adds_zero() {\n        assert_eq!(super::add(0, 0), 0);\n    }\n\n    \
             #[test]\n    #[ignore = \"slow\"]\n    fn slow() {}\n}\n",
        ),
        (".gitignore", "target\n"),
    ]);
    let target = tempfile::tempdir().expect("tempdir");
    p.env.push((
        "CARGO_TARGET_DIR".into(),
        target.path().display().to_string(),
    ));
    // Two unit tests and the doc test pass; the ignored one is skipped.
    expect(
        &p.gate("rust", "use=cargo-test", ALL),
        GateVerdict::Pass,
        Some((3, 0, 1)),
    );
    expect(
        &p.gate("rust", "use=cargo-test target=\"--lib\"", ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    expect(
        &p.gate("rust", "use=nextest", ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    for gate in ["use=clippy", "use=fmt", "use=doc"] {
        expect(&p.gate("rust", gate, ALL), GateVerdict::Pass, None);
    }

    // Subtraction: `adds` and the doc test fail, `adds_zero` still passes.
    let lib = std::fs::read_to_string(p.path().join("src/lib.rs")).expect("read");
    p.write(&[("src/lib.rs", &lib.replace("a + b", "a - b"))]);
    expect(
        &p.gate("rust", "use=cargo-test", ALL),
        GateVerdict::Fail,
        Some((1, 2, 1)),
    );
    expect(
        &p.gate("rust", "use=nextest", ALL),
        GateVerdict::Fail,
        Some((1, 1, 1)),
    );
    // A lint, a formatting slip and a broken doc link each fail their gate.
    p.write(&[(
        "src/lib.rs",
        &format!("{lib}\n/// Counts.\npub fn count(v: &Vec<i32>) -> usize {{\n    v.len()\n}}\n"),
    )]);
    expect(&p.gate("rust", "use=clippy", ALL), GateVerdict::Fail, None);
    p.write(&[(
        "src/lib.rs",
        &format!("{lib}\npub fn  sub(a:i32,b:i32)->i32{{a-b}}\n"),
    )]);
    expect(&p.gate("rust", "use=fmt", ALL), GateVerdict::Fail, None);
    p.write(&[(
        "src/lib.rs",
        &lib.replace("Adds two numbers.", "Adds, unlike [`Missing`]."),
    )]);
    expect(&p.gate("rust", "use=doc", ALL), GateVerdict::Fail, None);
}

#[test]
fn python_gates_against_pytest_ruff_and_mypy() {
    for module in ["pytest", "ruff", "mypy"] {
        require("python3", &["-m", module, "--version"]);
    }
    let calc = "def add(a: int, b: int) -> int:\n    return a + b\n";
    let p = Project::new(&[
        ("calc.py", calc),
        (
            "tests/test_calc.py",
            "import pytest\n\nfrom calc import add\n\n\ndef test_add() -> None:\n    \
             assert add(2, 2) == 4\n\n\ndef test_zero() -> None:\n    assert add(0, 0) == 0\n\n\n\
             @pytest.mark.skip(reason=\"slow\")\ndef test_slow() -> None:\n    pass\n",
        ),
        (
            "pyproject.toml",
            "[tool.pytest.ini_options]\npythonpath = [\".\"]\n",
        ),
        (
            ".gitignore",
            "__pycache__\n.pytest_cache\n.mypy_cache\n.ruff_cache\n",
        ),
    ]);
    expect(
        &p.gate("python", "use=pytest", ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    expect(
        &p.gate(
            "python",
            "use=pytest target=\"tests/test_calc.py::test_add\"",
            ALL,
        ),
        GateVerdict::Pass,
        Some((1, 0, 0)),
    );
    for gate in ["use=ruff", "use=ruff-format", "use=mypy"] {
        expect(&p.gate("python", gate, ALL), GateVerdict::Pass, None);
    }

    p.write(&[("calc.py", &calc.replace("a + b", "a - b"))]);
    expect(
        &p.gate("python", "use=pytest", ALL),
        GateVerdict::Fail,
        Some((1, 1, 1)),
    );
    // An unused import (ruff), bad layout (ruff format), a wrong return type (mypy).
    p.write(&[("calc.py", &format!("import os\n\n\n{calc}"))]);
    expect(&p.gate("python", "use=ruff", ALL), GateVerdict::Fail, None);
    p.write(&[("calc.py", "def add(a:int,b:int)->int:\n    return a+b\n")]);
    expect(
        &p.gate("python", "use=ruff-format", ALL),
        GateVerdict::Fail,
        None,
    );
    p.write(&[(
        "calc.py",
        "def add(a: int, b: int) -> str:\n    return a + b\n",
    )]);
    expect(&p.gate("python", "use=mypy", ALL), GateVerdict::Fail, None);
}

const NODE_TEST: &str = "const { test } = require('node:test');\nconst assert = require('node:assert');\n\
    const { add } = require('../calc.js');\n\ntest('adds', () => assert.strictEqual(add(2, 2), 4));\n\
    test('adds zero', () => assert.strictEqual(add(0, 0), 0));\ntest('slow', { skip: 'slow' }, () => {});\n";

#[test]
fn node_test_and_npm_test_gates() {
    require("node", &["--version"]);
    require("npm", &["--version"]);
    let calc = "exports.add = (a, b) => a + b;\n";
    let p = Project::new(&[
        ("calc.js", calc),
        ("test/calc.test.js", NODE_TEST),
        (
            "package.json",
            "{\"name\": \"fx\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"node --test\"}}\n",
        ),
    ]);
    expect(
        &p.gate("javascript", "use=node-test", ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    expect(
        &p.gate("javascript", "use=npm-test", ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    p.write(&[("calc.js", &calc.replace("a + b", "a - b"))]);
    expect(
        &p.gate(
            "javascript",
            "use=node-test target=\"test/calc.test.js\"",
            ALL,
        ),
        GateVerdict::Fail,
        Some((1, 1, 1)),
    );
    expect(
        &p.gate("javascript", "use=npm-test", ALL),
        GateVerdict::Fail,
        Some((1, 1, 1)),
    );
}

/// A project with `calc.js` (addition), TEST (two tests and a skipped one) and PACKAGE as its
/// package.json: GATE passes with two tests, then fails one when `calc.js` subtracts.
fn npm_runner_gate(gate: &str, calc: &str, test: &str, package: &str) {
    let p = Project::new(&[
        ("calc.js", calc),
        ("calc.test.js", test),
        ("package.json", package),
    ]);
    p.link_node_modules();
    expect(
        &p.gate("javascript", gate, ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    p.write(&[("calc.js", &calc.replace("a + b", "a - b"))]);
    expect(
        &p.gate("javascript", gate, ALL),
        GateVerdict::Fail,
        Some((1, 1, 1)),
    );
}

#[test]
fn vitest_gate() {
    npm_runner_gate(
        "use=vitest",
        "export const add = (a, b) => a + b;\n",
        "import { test, expect } from 'vitest';\nimport { add } from './calc.js';\n\n\
         test('adds', () => expect(add(2, 2)).toBe(4));\n\
         test('adds zero', () => expect(add(0, 0)).toBe(0));\ntest.skip('slow', () => {});\n",
        "{\"name\": \"fx\", \"type\": \"module\"}\n",
    );
}

#[test]
fn jest_gate() {
    npm_runner_gate(
        "use=jest",
        "exports.add = (a, b) => a + b;\n",
        "const { add } = require('./calc.js');\n\ntest('adds', () => expect(add(2, 2)).toBe(4));\n\
         test('adds zero', () => expect(add(0, 0)).toBe(0));\ntest.skip('slow', () => {});\n",
        "{\"name\": \"fx\"}\n",
    );
}

#[test]
fn tsc_and_eslint_gates() {
    let p = Project::new(&[
        (
            "src/calc.ts",
            "export const add = (a: number, b: number): number => a + b;\n",
        ),
        (
            "tsconfig.json",
            "{\"compilerOptions\": {\"strict\": true, \"target\": \"es2020\", \"module\": \"commonjs\"}, \"include\": [\"src\"]}\n",
        ),
        ("lib/calc.js", "export const add = (a, b) => a + b;\n"),
        (
            "eslint.config.mjs",
            "export default [{ files: ['lib/**/*.js'], rules: { 'no-unused-vars': 'error' } }];\n",
        ),
        ("package.json", "{\"name\": \"fx\", \"type\": \"module\"}\n"),
    ]);
    p.link_node_modules();
    expect(
        &p.gate("javascript", "use=tsc", ALL),
        GateVerdict::Pass,
        None,
    );
    expect(
        &p.gate("javascript", "use=eslint target=\"lib\"", ALL),
        GateVerdict::Pass,
        None,
    );
    p.write(&[
        (
            "src/calc.ts",
            "export const add = (a: number, b: number): string => a + b;\n",
        ),
        (
            "lib/calc.js",
            "const unused = 1;\nexport const add = (a, b) => a + b;\n",
        ),
    ]);
    expect(
        &p.gate("javascript", "use=tsc", ALL),
        GateVerdict::Fail,
        None,
    );
    expect(
        &p.gate("javascript", "use=eslint target=\"lib\"", ALL),
        GateVerdict::Fail,
        None,
    );
}

#[test]
fn go_gates_against_go() {
    require("go", &["version"]);
    let calc = "package calc\n\n// Add adds.\nfunc Add(a, b int) int {\n\treturn a + b\n}\n";
    let mut p = Project::new(&[
        ("go.mod", "module example.com/calc\n\ngo 1.19\n"),
        ("calc.go", calc),
        (
            "calc_test.go",
            "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 2) != 4 {\n\t\t\
             t.Fatal(\"2+2\")\n\t}\n}\n\nfunc TestZero(t *testing.T) {\n\tif Add(0, 0) != 0 {\n\t\t\
             t.Fatal(\"0+0\")\n\t}\n}\n\nfunc TestSlow(t *testing.T) {\n\tt.Skip(\"slow\")\n}\n",
        ),
    ]);
    let cache = tempfile::tempdir().expect("tempdir");
    p.env
        .push(("GOCACHE".into(), cache.path().display().to_string()));
    expect(
        &p.gate("go", "use=go-test", ALL),
        GateVerdict::Pass,
        Some((2, 0, 1)),
    );
    for gate in ["use=go-vet", "use=gofmt"] {
        expect(&p.gate("go", gate, ALL), GateVerdict::Pass, None);
    }
    // gofmt looks where the go tool does: not in vendor/, testdata/, or `.`/`_` names.
    let skipped = [
        "vendor/example.com/dep/dep.go",
        "testdata/bad.go",
        "internal/testdata/bad.go",
        "_scratch/bad.go",
        ".hidden/bad.go",
    ];
    let bad = "package   bad\nfunc  F( ) {  }\n";
    p.write(&skipped.map(|path| (path, bad)));
    expect(&p.gate("go", "use=gofmt", ALL), GateVerdict::Pass, None);
    p.write(&[("internal/bad.go", bad)]);
    let run = p.gate("go", "use=gofmt", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("  internal/bad.go\n") && !run.tail.contains("testdata"),
        "names only the file the go tool reads:\n{}",
        run.tail
    );
    for dir in ["vendor", "testdata", "internal", "_scratch", ".hidden"] {
        std::fs::remove_dir_all(p.path().join(dir)).expect("remove");
    }
    p.write(&[("calc.go", &calc.replace("a + b", "a - b"))]);
    expect(
        &p.gate("go", "use=go-test", ALL),
        GateVerdict::Fail,
        Some((1, 1, 1)),
    );
    // A format string given the wrong type (vet); misplaced layout (gofmt).
    p.write(&[(
        "calc.go",
        &format!("{calc}\n// Show shows.\nfunc Show() string {{\n\treturn fmt.Sprintf(\"%d\", \"x\")\n}}\n")
            .replace("package calc\n", "package calc\n\nimport \"fmt\"\n"),
    )]);
    expect(&p.gate("go", "use=go-vet", ALL), GateVerdict::Fail, None);
    p.write(&[("calc.go", &calc.replace("\treturn", "    return"))]);
    expect(&p.gate("go", "use=gofmt", ALL), GateVerdict::Fail, None);
}

#[test]
fn command_gate_needs_evidence_unless_told_otherwise() {
    let p = Project::new(&[("README", "hello\n")]);
    let proves = r#"use=command script="echo \"MVK_EVIDENCE={\\\"schema\\\":\\\"mvk.evidence.v1\\\",\\\"nonce\\\":\\\"$MVK_NONCE\\\",\\\"executed\\\":3,\\\"passed\\\":3,\\\"failed\\\":0,\\\"skipped\\\":0}\"""#;
    expect(
        &p.gate("generic", proves, ALL),
        GateVerdict::Pass,
        Some((3, 0, 0)),
    );
    // Exit 0 with no evidence proves nothing; with evidence=none the exit code decides.
    expect(
        &p.gate("generic", "use=command script=\"test -f README\"", ALL),
        GateVerdict::Unknown,
        None,
    );
    expect(
        &p.gate(
            "generic",
            "use=command evidence=none script=\"test -f README\"",
            ALL,
        ),
        GateVerdict::Pass,
        None,
    );
    expect(
        &p.gate(
            "generic",
            "use=command evidence=none script=\"test -f MISSING\"",
            ALL,
        ),
        GateVerdict::Fail,
        None,
    );
}

#[test]
fn scope_gate_refuses_files_outside_the_scope() {
    let p = Project::new(&[
        ("src/a.rs", "a\n"),
        ("src/deep/b.rs", "b\n"),
        ("docs/guide.md", "guide\n"),
        ("Cargo.lock", "lock\n"),
    ]);
    p.write(&[("src/deep/b.rs", "b2\n"), ("Cargo.lock", "lock2\n")]);
    p.git(&["rm", "-q", "docs/guide.md"]);
    p.commit("change");
    let run = p.gate("generic", "use=no-changes-outside-scope", "\"src/**\"");
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("  Cargo.lock\n") && run.tail.contains("  docs/guide.md\n"),
        "names every file outside the scope, a deleted one too:\n{}",
        run.tail
    );
    assert!(
        !run.tail.contains("b.rs"),
        "src/deep/b.rs is in scope:\n{}",
        run.tail
    );
    // `*` stays within a directory, as in the loop's own globs: `src/*.rs` is not `src/deep/b.rs`.
    let run = p.gate(
        "generic",
        "use=no-changes-outside-scope also=\"Cargo.lock docs/**\"",
        "\"src/*.rs\"",
    );
    expect(&run, GateVerdict::Fail, None);
    assert!(run.tail.contains("  src/deep/b.rs\n"), "{}", run.tail);
    // As in `seal`, a glob that matches a directory covers what is in it.
    expect(
        &p.gate(
            "generic",
            "use=no-changes-outside-scope also=\"Cargo.lock docs/**\"",
            "\"src/*\"",
        ),
        GateVerdict::Pass,
        None,
    );
    expect(
        &p.gate(
            "generic",
            "use=no-changes-outside-scope also=\"Cargo.lock\"",
            "\"src\" \"docs/**\"",
        ),
        GateVerdict::Pass,
        None,
    );
    expect(
        &p.gate("generic", "use=no-changes-outside-scope", ALL),
        GateVerdict::Pass,
        None,
    );
}

#[test]
fn max_diff_lines_counts_added_and_deleted_lines() {
    let p = Project::new(&[("a.txt", "1\n2\n3\n"), ("Cargo.lock", "x\n")]);
    // Two lines deleted, three added, and a lock file rewritten (two lines).
    p.write(&[("a.txt", "1\n4\n5\n6\n"), ("Cargo.lock", "y\n")]);
    p.commit("change");
    let run = p.gate("generic", "use=max-diff-lines max=\"6\"", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(run.tail.contains("is 7 lines"), "{}", run.tail);
    expect(
        &p.gate("generic", "use=max-diff-lines max=\"7\"", ALL),
        GateVerdict::Pass,
        None,
    );
    expect(
        &p.gate(
            "generic",
            "use=max-diff-lines max=\"5\" exclude=\"Cargo.lock\"",
            ALL,
        ),
        GateVerdict::Pass,
        None,
    );
    let run = p.gate("generic", "use=max-diff-lines max=\"many\"", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert_eq!(run.exit_code, Some(2), "{}", run.tail);
}

#[test]
fn file_exists_gate() {
    let p = Project::new(&[("docs/CHANGELOG.md", "- one\n")]);
    expect(
        &p.gate("generic", "use=file-exists path=\"docs/CHANGELOG.md\"", ALL),
        GateVerdict::Pass,
        None,
    );
    let run = p.gate("generic", "use=file-exists path=\"docs/MIGRATION.md\"", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("`docs/MIGRATION.md` does not exist"),
        "{}",
        run.tail
    );
}

#[test]
fn no_new_todos_gate_names_each_added_marker() {
    let p = Project::new(&[("src/a.rs", "// TODO: old, left alone\nfn a() {}\n")]);
    p.write(&[("src/b.rs", "fn b() {}\n")]);
    p.commit("clean change");
    expect(
        &p.gate("generic", "use=no-new-todos", ALL),
        GateVerdict::Pass,
        None,
    );
    p.write(&[
        (
            "src/a.rs",
            "// TODO: old, left alone\nfn a() {}\n// FIXME: new\n",
        ),
        // An added line starting `++ ` shows as `+++ …` in the diff: not a file header.
        ("b.txt", "++ TODO sneaky\nplain\n"),
        ("notes/plan.md", "XXX later\n"),
    ]);
    p.commit("markers");
    let run = p.gate("generic", "use=no-new-todos", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("  src/a.rs:3: // FIXME: new\n")
            && run.tail.contains("  b.txt:1: ++ TODO sneaky\n")
            && run.tail.contains("  notes/plan.md:1: XXX later\n")
            && !run.tail.contains("old, left alone"),
        "{}",
        run.tail
    );
    // Narrowed to `XXX` in src/, the note's marker is out of reach and src/ adds none.
    let run = p.gate(
        "generic",
        "use=no-new-todos markers=\"XXX\" paths=\"src/**\"",
        ALL,
    );
    expect(&run, GateVerdict::Pass, None);
}

/// Regression: git's `:(glob)` pathspecs know no `{a,b}`, so the gates once refused a change in
/// `src/{a,b}/**` scope, ignored such an `exclude` and looked nowhere for such `paths`. They
/// match as `scope` does now.
#[test]
fn generic_gates_match_brace_alternatives_as_scope_does() {
    let p = Project::new(&[
        ("src/a/x.rs", "x\n"),
        ("src/b/y.rs", "y\n"),
        ("src/c/z.rs", "z\n"),
        ("Cargo.lock", "lock\n"),
        ("docs/guide.md", "guide\n"),
    ]);
    p.write(&[
        ("src/a/x.rs", "x\n// TODO: in a\n"),
        ("src/b/y.rs", "y2\n"),
        ("Cargo.lock", "l\no\nc\nk\n"),
    ]);
    p.commit("in a and b");
    let scope = "use=no-changes-outside-scope";
    expect(
        &p.gate("generic", scope, "\"src/{a,b}/**\" \"Cargo.lock\""),
        GateVerdict::Pass,
        None,
    );
    expect(
        &p.gate(
            "generic",
            &format!("{scope} also=\"{{Cargo,Gemfile}}.lock\""),
            "\"src/{a,b}/**\"",
        ),
        GateVerdict::Pass,
        None,
    );
    let run = p.gate("generic", scope, "\"src/{a,c}/**\" \"Cargo.lock\"");
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("  src/b/y.rs\n") && !run.tail.contains("x.rs"),
        "{}",
        run.tail
    );

    // Lines added plus deleted: five in Cargo.lock, one in x.rs, two in y.rs.
    let lines = "use=max-diff-lines max=\"2\"";
    expect(&p.gate("generic", lines, ALL), GateVerdict::Fail, None);
    expect(
        &p.gate(
            "generic",
            &format!("{lines} exclude=\"{{Cargo.lock,docs/**}}\""),
            ALL,
        ),
        GateVerdict::Fail,
        None,
    );
    let run = p.gate(
        "generic",
        &format!("{lines} exclude=\"{{Cargo.lock,src/b/**}}\""),
        ALL,
    );
    expect(&run, GateVerdict::Pass, None);
    assert!(run.tail.contains("is 1 lines"), "{}", run.tail);

    let todos = "use=no-new-todos";
    let run = p.gate("generic", &format!("{todos} paths=\"src/{{a,b}}/**\""), ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("  src/a/x.rs:2: // TODO: in a\n"),
        "{}",
        run.tail
    );
    // Names git writes differently in a diff's header: with a space (a tab follows), quoted.
    p.write(&[
        ("src/a/with space.rs", "// TODO: spaced\n"),
        ("src/a/q\"uote.rs", "// TODO: quoted\n"),
    ]);
    p.commit("odd names");
    let run = p.gate("generic", &format!("{todos} paths=\"src/{{a,b}}/**\""), ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail
            .contains("  src/a/with space.rs:1: // TODO: spaced\n")
            && run
                .tail
                .contains("  \"src/a/q\\\"uote.rs\":1: // TODO: quoted\n"),
        "{}",
        run.tail
    );
    expect(
        &p.gate(
            "generic",
            &format!("{todos} paths=\"src/{{b,c}}/** docs\""),
            ALL,
        ),
        GateVerdict::Pass,
        None,
    );
    // A glob mvk cannot read fails the gate, saying why, rather than matching nothing.
    let run = p.gate("generic", &format!("{todos} paths=\"src/{{a\""), ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("__glob-match: invalid glob `src/{a`"),
        "{}",
        run.tail
    );
}

/// Writes an executable shell script with BODY at PATH.
fn write_script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}")).expect("write");
    let mut perms = std::fs::metadata(path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(path, perms).expect("chmod");
}

/// Runs TEST twice, handing it how to make a project: once with this machine's git, once with a
/// git without `--attr-source` (before 2.40), a wrapper first on `PATH` that refuses the option,
/// as git then did, and runs the real one otherwise.
fn on_each_git(test: impl Fn(&dyn Fn(&[(&str, &str)]) -> Project)) {
    let old_git = tempfile::tempdir().expect("tempdir");
    let real = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .expect("sh runs");
    let real = String::from_utf8_lossy(&real.stdout).trim().to_owned();
    write_script(
        &old_git.path().join("git"),
        &format!(
            "case \"$1\" in --attr-source*) echo \"unknown option: $1\" >&2; exit 129 ;; esac\n\
             exec '{real}' \"$@\"\n"
        ),
    );
    let path = format!(
        "{}:{}",
        old_git.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    test(&|files| Project::new(files));
    test(&|files| {
        let mut p = Project::new(files);
        p.env.push(("PATH".into(), path.clone()));
        p
    });
}

/// Asserts that both diff gates see the change and fail: `max-diff-lines` at MAX, counting
/// LINES (`is N lines`), and `no-new-todos` with PATHS, naming FOUND (`path:line: text`).
#[track_caller]
fn diff_gates_see(p: &Project, max: &str, lines: &str, paths: &str, found: &str) {
    let run = p.gate("generic", &format!("use=max-diff-lines max=\"{max}\""), ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(run.tail.contains(lines), "{:?}\n{}", p.env, run.tail);
    let run = p.gate("generic", &format!("use=no-new-todos {paths}"), ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains(&format!("  {found}\n")),
        "{:?}\n{}",
        p.env,
        run.tail
    );
}

/// Regression: git takes a file's attributes from the worktree, which the change controls, so a
/// `.gitattributes` saying `* -diff` (committed in the change, or left untracked in the root by an
/// earlier gate running the agent's code) made every file binary: `max-diff-lines` counted no
/// line and `no-new-todos` saw none. The gates take attributes from the base now (git 2.40+) and
/// read every file as text on any git.
#[test]
fn diff_gates_see_through_gitattributes_the_change_writes() {
    on_each_git(|project| {
        // Committed inside the scope: three lines in b.rs, one in the attributes file.
        let p = project(&[("src/a.rs", "fn a() {}\n")]);
        p.write(&[
            ("src/.gitattributes", "* -diff\n"),
            ("src/b.rs", "// TODO: hidden\nfn b() {}\nfn c() {}\n"),
        ]);
        p.commit("blind the diff");
        diff_gates_see(
            &p,
            "3",
            "is 4 lines",
            "paths=\"src/**\"",
            "src/b.rs:1: // TODO: hidden",
        );

        // Untracked in the root: not in the change, but in the worktree git reads attributes from.
        let p = project(&[("src/a.rs", "fn a() {}\n")]);
        p.write(&[("src/b.rs", "// FIXME: hidden\nfn b() {}\n")]);
        p.commit("change");
        p.write(&[(".gitattributes", "* -diff\n")]);
        diff_gates_see(&p, "1", "is 2 lines", "", "src/b.rs:1: // FIXME: hidden");
    });
}

/// Regression: with `--attr-source` (git 2.40+) the gates still let git decide what is binary,
/// so a NUL byte hid a file's lines (git judges by content), and so did `* -diff` in the
/// repository's own `info/attributes` or in a `core.attributesFile` its configuration names:
/// `--attr-source` replaces only the worktree's and index's `.gitattributes`, and an earlier gate
/// running the agent's code could write either. The gates read every file as text now, on any
/// git, so every line counts; the way to leave a file out is `exclude`.
#[test]
fn diff_gates_read_every_file_as_text() {
    on_each_git(|project| {
        // A NUL byte makes the file binary to git, the TODO before it unseen.
        let p = project(&[("a.txt", "a\n")]);
        p.write(&[("a.txt", "a\n// TODO: x\n\0\n")]);
        p.commit("nul");
        diff_gates_see(&p, "1", "is 2 lines", "", "a.txt:2: // TODO: x");

        // A new file of 1000 lines that starts with one.
        let p = project(&[("a.txt", "a\n")]);
        p.write(&[("big.txt", &format!("\0{}", "x\n".repeat(1000)))]);
        p.commit("big");
        let run = p.gate("generic", "use=max-diff-lines max=\"999\"", ALL);
        expect(&run, GateVerdict::Fail, None);
        assert!(
            run.tail.contains("is 1000 lines"),
            "{:?}\n{}",
            p.env,
            run.tail
        );

        // `* -diff` where `--attr-source` does not reach: the common directory's
        // `info/attributes`, then a `core.attributesFile` the repository's configuration names.
        let p = project(&[("src/a.rs", "fn a() {}\n")]);
        p.write(&[("src/b.rs", "// FIXME: hidden\nfn b() {}\n")]);
        p.commit("change");
        let common = p.path().join(p.git(&["rev-parse", "--git-common-dir"]));
        let info = common.join("info/attributes");
        std::fs::create_dir_all(common.join("info")).expect("mkdir");
        std::fs::write(&info, "* -diff\n").expect("write");
        diff_gates_see(&p, "1", "is 2 lines", "", "src/b.rs:1: // FIXME: hidden");
        std::fs::remove_file(&info).expect("rm");
        let attributes = common.join("blind");
        std::fs::write(&attributes, "* -diff\n").expect("write");
        p.git(&[
            "config",
            "core.attributesFile",
            &attributes.display().to_string(),
        ]);
        diff_gates_see(&p, "1", "is 2 lines", "", "src/b.rs:1: // FIXME: hidden");
    });

    // Whatever the base's own attributes say, a binary file's lines count, as git splits them at
    // newlines: three in logo.bin, three in the lock file (`-diff` in the base), one in a.txt.
    let p = Project::new(&[("Cargo.lock", "x\n"), (".gitattributes", "*.lock -diff\n")]);
    p.write(&[
        ("logo.bin", "\0\u{1}\n\0\n\0\n"),
        ("Cargo.lock", "y\nz\n"),
        ("a.txt", "a\n"),
    ]);
    p.commit("binaries");
    let run = p.gate("generic", "use=max-diff-lines max=\"6\"", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(run.tail.contains("is 7 lines"), "{}", run.tail);
    let run = p.gate(
        "generic",
        "use=max-diff-lines max=\"4\" exclude=\"Cargo.lock\"",
        ALL,
    );
    expect(&run, GateVerdict::Pass, None);
    assert!(run.tail.contains("is 4 lines"), "{}", run.tail);
}

/// Regression: common user git settings made `no-new-todos` pass silently and could skew
/// `max-diff-lines`: `diff.noprefix` broke the file names it reads from the patch (with `paths`,
/// every file was skipped), `diff.external` replaced the patch with a tool's output, colour
/// wrapped lines in escapes. The gates pin git's options now.
#[test]
fn diff_gates_ignore_the_users_git_configuration() {
    let config = tempfile::tempdir().expect("tempdir");
    let external = config.path().join("difftool.sh");
    write_script(&external, "echo \"a difftastic view of $1\"\n");
    let gitconfig = config.path().join("gitconfig");
    std::fs::write(
        &gitconfig,
        format!(
            "[diff]\n\tnoprefix = true\n\tmnemonicPrefix = true\n\texternal = {}\n\
             \tinterHunkContext = 10\n\tcontext = 5\n\trenames = copies\n\
             [color]\n\tui = always\n\tdiff = always\n",
            external.display()
        ),
    )
    .expect("write");
    let mut p = Project::new(&[
        ("src/a.rs", "fn a() {}\n1\n2\n3\n4\n"),
        ("docs/guide.md", "guide\n"),
    ]);
    p.env
        .push(("GIT_CONFIG_GLOBAL".into(), gitconfig.display().to_string()));
    p.write(&[
        (
            "src/a.rs",
            "// TODO: one\nfn a() {}\n1\n2\n3\n4\n// XXX: two\n",
        ),
        ("docs/guide.md", "guide\nmore\n"),
    ]);
    p.commit("change");
    let run = p.gate("generic", "use=no-new-todos paths=\"src/**\"", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(
        run.tail.contains("  src/a.rs:1: // TODO: one\n")
            && run.tail.contains("  src/a.rs:7: // XXX: two\n")
            && !run.tail.contains("guide"),
        "{}",
        run.tail
    );
    let run = p.gate("generic", "use=max-diff-lines max=\"2\"", ALL);
    expect(&run, GateVerdict::Fail, None);
    assert!(run.tail.contains("is 3 lines"), "{}", run.tail);
    expect(
        &p.gate(
            "generic",
            "use=max-diff-lines max=\"2\" exclude=\"docs/**\"",
            ALL,
        ),
        GateVerdict::Pass,
        None,
    );
    let run = p.gate("generic", "use=no-changes-outside-scope", "\"src/**\"");
    expect(&run, GateVerdict::Fail, None);
    assert!(run.tail.contains("  docs/guide.md\n"), "{}", run.tail);
}

/// Through `mvk apply`, in a sandbox: mvk names itself to the gates (`MVK_EXE`), so the generic
/// gates' matcher runs in a real loop; a `{a,b}` scope that covers the fix lands it, one that
/// does not fails the one attempt allowed (the budget ran out: exit 3), naming the file. The
/// sandbox is required, as in `sandbox.rs`: on a kernel that cannot confine, mvk refuses to run
/// and this fails, rather than passing unconfined.
#[test]
fn scope_gate_under_mvk_apply_in_a_sandbox() {
    use crate::support::{Fixture, TESTS_GATE, agent_def, loop_kdl};
    for (scope, code) in [("\"{src,docs}/**\"", 0), ("\"{lib,docs}/**\"", 3)] {
        let defs = format!(
            "import \"std/gates/generic.kdl\"\n{}",
            agent_def("bot", "fix.sh", &["@STATE"])
        );
        let gates = format!("{TESTS_GATE}\n    gate in-scope use=no-changes-outside-scope");
        let extra =
            format!("scope {scope}\n    budget iterations=1\n    sandbox required=#true {{ }}");
        let fixture = Fixture::new(&loop_kdl(&defs, true, &gates, &extra));
        let run = fixture.apply();
        run.expect_code(code);
        let scoped: Vec<_> = run
            .named("gate.finished")
            .into_iter()
            .filter(|e| e["detail"]["gate"] == "in-scope")
            .collect();
        assert_eq!(scoped.len(), 1, "{}", run.why());
        let verdict = if code == 0 { "pass" } else { "fail" };
        assert_eq!(scoped[0]["detail"]["verdict"], verdict, "{}", run.why());
        if code != 0 {
            let log =
                std::fs::read_to_string(scoped[0]["detail"]["log"].as_str().expect("a log path"))
                    .expect("read the gate's log");
            assert!(log.contains("  src/calc.sh\n"), "{log}");
        }
    }
}
