//! `mvk mcp` driven by a real MCP client nobody here wrote: the Python `mcp` SDK from PyPI
//! (`.ci/run` installs it), through `tests/mcp/client.py`, which runs the steps it is given and
//! prints what came back; the assertions are here. Also `mvk verify` and `mvk attempt`, the
//! commands the server's `verify` and `run_attempt` share their implementation with.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::{FIXED, Fixture, TESTS_GATE, agent_def, loop_kdl, simple_loop};

/// Runs the Python client against `mvk mcp` in the fixture's repository with STEPS; the
/// client's document (`server`, `instructions`, `steps`).
fn client(f: &Fixture, steps: &Value) -> Value {
    client_in(f, f.root(), &["mcp"], steps)
}

/// Runs the Python client against `mvk SERVER_ARGS…` started in DIR with STEPS; once it
/// returns, the client has ended and so has the server (the SDK kills its process group).
fn client_in(f: &Fixture, dir: &Path, server_args: &[&str], steps: &Value) -> Value {
    client_of(
        &assert_cmd::cargo::cargo_bin("mvk"),
        f,
        dir,
        server_args,
        steps,
    )
}

/// As [`client_in`], with the server run from the mvk executable at EXE.
fn client_of(exe: &Path, f: &Fixture, dir: &Path, server_args: &[&str], steps: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let mut cmd = Command::new("python3");
    cmd.arg(&script)
        .arg(exe)
        .arg(dir)
        .args(server_args)
        .current_dir(dir)
        .env("MVK_WORKTREE_ROOT", f.worktrees.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("NO_COLOR", "1")
        .env_remove("MVK_REPO")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .expect("python3 runs (`.ci/run` installs the `mcp` package)");
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(steps.to_string().as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP client failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"))
}

/// A commit on a new branch NAME from `main` writing FILES; `main` checked out again.
fn branch(f: &Fixture, name: &str, files: &[(&str, &str)]) -> String {
    f.git(&["checkout", "-q", "-b", name, "main"]);
    for (path, text) in files {
        std::fs::write(f.root().join(path), text).unwrap();
    }
    f.git(&["commit", "-q", "-am", name]);
    let id = f.tip(name);
    f.git(&["checkout", "-q", "main"]);
    id
}

fn structured<'a>(step: &'a Value, what: &str) -> &'a Value {
    assert!(
        step.get("error").is_none() && step["is_error"] == false,
        "{what} failed: {step:#}"
    );
    &step["structured"]
}

fn error<'a>(step: &'a Value, what: &str) -> &'a str {
    step["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{what} did not fail: {step:#}"))
}

#[test]
fn a_real_client_lists_the_tools_plans_verifies_and_makes_one_attempt_that_lands_nothing() {
    let f = Fixture::new(&simple_loop("fix.sh", "budget iterations=2"));
    std::fs::write(
        f.root().join("loops/broken.kdl"),
        "loop b {\n    goal \"x\"\n    agent nobody\n}\n",
    )
    .unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-q", "-m", "a broken loop"]);
    let base = f.tip("main");
    branch(&f, "honest", &[("src/calc.sh", FIXED)]);
    let tampered = branch(&f, "tampered", &[("tests/test_calc.sh", "exit 0\n")]);
    let doc = client(
        &f,
        &json!([
            {"list": true},
            {"tool": "plan", "arguments": {"file": "loops/t.kdl"}},
            {"tool": "plan", "arguments": {"file": "loops/broken.kdl"}},
            {"tool": "verify", "arguments": {"file": "loops/t.kdl", "base": "main", "head": "honest"}},
            {"tool": "verify", "arguments": {"file": "loops/t.kdl", "base": "main", "head": "tampered"}},
            {"tool": "verify", "arguments": {"file": "loops/t.kdl", "base": "main", "head": "no-such-branch"}},
            // An attempt to weaken the contract: an argument no schema has is refused.
            {"tool": "run_attempt", "arguments": {"file": "loops/t.kdl", "seal": false}},
            {"tool": "run_attempt", "arguments": {"file": "loops/t.kdl"}},
            {"tool": "status", "arguments": {}},
            {"tool": "reject", "arguments": {"run": "any", "reason": "  "}},
        ]),
    );
    assert_eq!(doc["server"], "mvk");
    let steps = doc["steps"].as_array().unwrap();

    // The tools, each with an input schema that refuses unknown arguments and a result schema.
    let tools = steps[0]["tools"].as_array().unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "apply",
            "approve",
            "plan",
            "reject",
            "resume",
            "run_attempt",
            "status",
            "verify"
        ]
    );
    for t in tools {
        assert_eq!(t["input_schema"]["type"], "object", "{t:#}");
        assert_eq!(t["input_schema"]["additionalProperties"], false, "{t:#}");
        assert_eq!(t["output_schema"]["type"], "object", "{t:#}");
        assert!(
            t["description"]
                .as_str()
                .unwrap()
                .contains("cannot be weakened"),
            "{t:#}"
        );
    }
    // Clients may call the read-only tools freely; landing tools say they change things.
    let hints = |name: &str| &tools.iter().find(|t| t["name"] == name).unwrap()["annotations"];
    for name in ["plan", "verify", "status"] {
        assert_eq!(hints(name)["read_only_hint"], true, "{name}");
    }
    // `reject` continues the run, whose next attempt may land: destructive too.
    for name in ["apply", "resume", "approve", "reject"] {
        assert_eq!(hints(name)["destructive_hint"], true, "{name}");
    }
    assert_eq!(hints("run_attempt")["destructive_hint"], false);
    let verify = tools.iter().find(|t| t["name"] == "verify").unwrap();
    let required: Vec<&str> = verify["input_schema"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(required, ["file", "base"]);

    // plan: the DAG, digests and the worst case.
    let plan = structured(&steps[1], "plan");
    assert_eq!(plan["schema"], "mvk.plan.v1");
    assert_eq!(plan["tasks"][0]["name"], "t");
    assert_eq!(plan["tasks"][0]["digest"].as_str().unwrap().len(), 64);
    assert_eq!(plan["worst_case"]["attempts"], 2);
    // A file that does not compile: an MCP error carrying the diagnostic.
    let broken = error(&steps[2], "plan of a broken file");
    assert!(
        broken.contains("is not a valid loop definition"),
        "{broken}"
    );
    assert!(broken.contains("nobody"), "{broken}");
    assert_eq!(steps[2]["error"]["data"]["exit_code"], 65);

    // verify: untouched, then changed with the breach named, then a usage error.
    let honest = structured(&steps[3], "verify honest");
    assert_eq!(honest["verdict"], "untouched", "{honest:#}");
    assert_eq!(honest["base"], base.as_str());
    let bad = structured(&steps[4], "verify tampered");
    assert_eq!(bad["verdict"], "changed", "{bad:#}");
    assert_eq!(bad["head"], tampered.as_str());
    let breach = &bad["tasks"][0]["breaches"][0];
    assert_eq!(breach["path"], "tests/test_calc.sh");
    assert_eq!(breach["kind"]["type"], "modified");
    assert_eq!(breach["commit"], tampered.as_str());
    let unknown_rev = error(&steps[5], "verify of an unknown revision");
    assert!(
        unknown_rev.contains("`no-such-branch` names no commit"),
        "{unknown_rev}"
    );
    assert_eq!(steps[5]["error"]["data"]["exit_code"], 64);

    // The unknown argument was refused before anything ran (rmcp answers a call whose
    // arguments do not fit the schema with a tool error the caller can correct).
    assert_eq!(steps[6]["is_error"], true, "{:#}", steps[6]);
    let refused = steps[6]["text"][0].as_str().unwrap();
    assert!(refused.contains("unknown field `seal`"), "{refused}");

    // run_attempt: one evidenced attempt, passed, counted, and not landed.
    let a = structured(&steps[7], "run_attempt");
    assert_eq!(a["schema"], "mvk.attempt.v1");
    assert_eq!(a["verdict"], "passed", "{a:#}");
    assert_eq!(a["outcome"], "skipped");
    assert_eq!(a["counts"]["executed"], 2);
    assert_eq!(a["counts"]["passed"], 2);
    assert_eq!(a["gates"][0]["name"], "tests");
    assert_eq!(a["gates"][0]["verdict"], "pass");
    assert!(a["failure"].is_null());
    let events: Vec<&str> = a["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    for expected in [
        "run.started",
        "attempt.started",
        "gate.finished",
        "attempt.passed",
        "run.finished",
    ] {
        assert!(events.contains(&expected), "{expected} missing: {events:?}");
    }
    assert!(a["events"][0]["id"].as_i64().unwrap() > 0);
    assert_eq!(f.tip("main"), base, "run_attempt landed something");
    let head = a["head"].as_str().unwrap();
    assert_eq!(f.show(head, "src/calc.sh").as_deref(), Some(FIXED));
    // Its change is on its branch only, so `mvk gc` keeps the branch.
    let gc = f.mvk().arg("gc").output().unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert_eq!(f.tip(a["branch"].as_str().unwrap()), head);
    // status: the attempt's run, finished, read from the ledger.
    let status = structured(&steps[8], "status");
    assert_eq!(status["schema"], "mvk.status.v1");
    assert_eq!(status["run"], a["run"]);
    assert_eq!(status["state"], "finished");
    // reject without a reason: refused as the command line refuses it.
    let refused = error(&steps[9], "reject without a reason");
    assert!(refused.contains("`--reason` is empty"), "{refused}");
    assert_eq!(steps[9]["error"]["data"]["exit_code"], 64);
}

#[test]
fn run_attempt_reports_a_tampered_seal_and_a_batch_run_started_in_the_background_lands_once_approved()
 {
    let defs = agent_def("bot", "tamper.sh", &["edit"]);
    let f = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
    let honest = simple_loop("fix.sh", "");
    std::fs::write(
        f.root().join("loops/fix.kdl"),
        honest
            .replace("loop t", "loop fix")
            .replace("@AGENTS", crate::support::agents_dir().to_str().unwrap())
            .replace("@STATE", f.state.path().to_str().unwrap()),
    )
    .unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-q", "-m", "the honest loop"]);
    let base = f.tip("main");
    let doc = client(
        &f,
        &json!([
            {"tool": "run_attempt", "arguments": {"file": "loops/t.kdl"}},
            // Stops for a person before landing; `approve` lands it, in the background.
            {"tool": "apply", "arguments": {"file": "loops/fix.kdl", "mode": "batch"}},
            {"tool": "status", "arguments": {}, "until": ["paused", "finished"], "seconds": 60},
            {"tool": "approve", "arguments": {"run": "no-such-run"}},
            {"tool": "approve", "arguments": {"run": "@RUN"}},
            {"tool": "status", "arguments": {}, "until": ["finished"], "seconds": 60},
            {"tool": "resume", "arguments": {"run": "@RUN"}},
        ]),
    );
    let steps = doc["steps"].as_array().unwrap();
    // The seal holds exactly as from the command line: the tampering fails the attempt before
    // any gate runs, whatever the gate would have said.
    let a = structured(&steps[0], "run_attempt");
    assert_eq!(a["verdict"], "failed", "{a:#}");
    assert_eq!(a["outcome"], "rejected");
    assert_eq!(a["exit_code"], 1);
    assert_eq!(a["failure"]["kind"], "seal");
    assert_eq!(a["failure"]["breaches"][0]["path"], "tests/test_calc.sh");
    assert_eq!(a["failure"]["signature"].as_str().unwrap().len(), 16);
    assert!(a["gates"].as_array().unwrap().is_empty(), "{a:#}");
    assert_eq!(a["base"], base.as_str());
    assert_eq!(
        f.show("main", "tests/test_calc.sh").as_deref(),
        Some(crate::support::TEST_CALC)
    );

    // apply: the run id at once; status follows the run to its checkpoint.
    let started = structured(&steps[1], "apply");
    let run = started["run"].as_str().unwrap();
    assert!(!run.is_empty());
    assert_eq!(started["command"], "mvk apply loops/fix.kdl --mode batch");
    let status = structured(&steps[2], "status");
    assert_eq!(status["run"], run);
    assert_eq!(status["state"], "paused", "{status:#}");
    assert_eq!(status["waiting_for"]["kind"], "decision", "{status:#}");
    assert!(
        status["tasks"][0]["merged"].is_null(),
        "a batch run landed before anyone approved: {status:#}"
    );
    // approve of a run that does not exist: the command's own error, as an MCP error.
    let refused = error(&steps[3], "approve of an unknown run");
    assert!(refused.contains("no-such-run"), "{refused}");
    assert_eq!(steps[3]["error"]["data"]["exit_code"], 64);
    // approve: the run goes on in the background and lands the fix.
    let approved = structured(&steps[4], "approve");
    assert_eq!(approved["run"], run);
    let status = structured(&steps[5], "status");
    assert_eq!(status["state"], "finished", "{status:#}");
    assert_eq!(status["outcome"], "accepted", "{status:#}");
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    // The run's output is kept where the result says.
    let out_file = Path::new(started["stdout"].as_str().unwrap());
    let out = std::fs::read_to_string(out_file).unwrap();
    assert!(out.starts_with(run), "{out}");
    assert!(
        out_file
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(run),
        "{}",
        out_file.display()
    );
    // The run is over: `mvk gc` removes its output with its branches.
    let gc = f.mvk().arg("gc").output().unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(!out_file.exists(), "{} kept", out_file.display());
    // resume of a finished run: refused, with the command's reason.
    let refused = error(&steps[6], "resume of a finished run");
    assert!(refused.contains(run), "{refused}");
    assert_eq!(steps[6]["error"]["data"]["exit_code"], 64);
}

#[test]
fn mvk_verify_exits_by_the_contract_and_sees_uncommitted_work() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    branch(&f, "honest", &[("src/calc.sh", FIXED)]);
    branch(&f, "tampered", &[("tests/test_calc.sh", "exit 0\n")]);
    let verify = |args: &[&str]| {
        let out = f
            .mvk()
            .args(["verify", "loops/t.kdl"])
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = verify(&["--base", "main", "--head", "honest"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("seal untouched"), "{out}");
    let (code, out, err) = verify(&["--base", "main", "--head", "tampered"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("sealed path `tests/test_calc.sh` modified"),
        "{out}"
    );
    // A head that does not descend from the base: the seal cannot certify it.
    let (code, out, err) = verify(&["--base", "honest", "--head", "main", "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["verdict"], "unknown");
    // Without `--head`: the checkout, its uncommitted work included.
    let (code, ..) = verify(&["--base", "main"]);
    assert_eq!(code, 0);
    std::fs::write(f.root().join("tests/new_test.sh"), "exit 0\n").unwrap();
    let (code, out, err) = verify(&["--base", "main"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("sealed path `tests/new_test.sh` added"),
        "{out}"
    );
    let (code, _, err) = verify(&["--base", "nope"]);
    assert_eq!(code, 64, "{err}");
}

/// The session a process leads or belongs to (field 6 of `/proc/PID/stat`), while it lives.
fn session_of(pid: u64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(3)?.parse().ok()
}

/// `mvk status --json` of RUN (default: the latest run), polled until its state is `finished`
/// (or a minute).
fn finished_status(f: &Fixture, run: Option<&str>) -> Value {
    let start = std::time::Instant::now();
    loop {
        let out = f
            .mvk()
            .args(["status", "--json"])
            .args(run)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if doc["state"] == "finished" || start.elapsed() > std::time::Duration::from_secs(60) {
            return doc;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Regression: files in tool calls were read relative to the directory the server was started
/// in, not the repository `--repo` names; and a detached run was only put in a process group of
/// its own, not a session, while the docs promised one.
#[test]
fn files_are_the_repositorys_and_a_detached_run_outlives_the_server_and_its_client_in_a_session_of_its_own()
 {
    let f = Fixture::new(&simple_loop("go_fix.sh", "budget iterations=1"));
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(elsewhere.path().join("loops")).unwrap();
    // A decoy where a path relative to the server's own directory would lead.
    std::fs::write(
        elsewhere.path().join("loops/t.kdl"),
        "loop decoy {\n    goal \"x\"\n    agent nobody\n}\n",
    )
    .unwrap();
    let repo = f.root().to_str().unwrap();
    let tampered = branch(&f, "tampered", &[("tests/test_calc.sh", "exit 0\n")]);
    let absolute = f.root().join("loops/t.kdl");
    let doc = client_in(
        &f,
        elsewhere.path(),
        &["--repo", repo, "mcp"],
        &json!([
            {"tool": "plan", "arguments": {"file": "loops/t.kdl"}},
            {"tool": "plan", "arguments": {"file": absolute.to_str().unwrap()}},
            {"tool": "verify", "arguments": {"file": "loops/t.kdl", "base": "main", "head": "tampered"}},
            {"tool": "apply", "arguments": {"file": "loops/t.kdl"}},
        ]),
    );
    let steps = doc["steps"].as_array().unwrap();
    let plan = structured(&steps[0], "plan of a repository-relative file");
    assert_eq!(plan["tasks"][0]["name"], "t", "{plan:#}");
    let plan = structured(&steps[1], "plan of an absolute file");
    assert_eq!(plan["tasks"][0]["name"], "t", "{plan:#}");
    let verified = structured(&steps[2], "verify");
    assert_eq!(verified["verdict"], "changed", "{verified:#}");
    assert_eq!(verified["head"], tampered.as_str());
    let started = structured(&steps[3], "apply");
    assert_eq!(started["command"], "mvk apply loops/t.kdl");
    let pid = started["pid"].as_u64().unwrap();
    // The client is gone and took the server with it; the run goes on, waiting in its agent.
    let start = std::time::Instant::now();
    while !f.state("started").exists() {
        assert!(start.elapsed().as_secs() < 60, "the agent never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(
        session_of(pid),
        Some(pid),
        "the detached run leads a session of its own"
    );
    std::fs::write(f.state("go"), "").unwrap();
    let status = finished_status(&f, None);
    assert_eq!(status["run"], started["run"], "{status:#}");
    assert_eq!(status["state"], "finished", "{status:#}");
    assert_eq!(status["outcome"], "accepted", "{status:#}");
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    // Its output went where the result says, in the repository, not the server's directory.
    let out = std::fs::read_to_string(started["stdout"].as_str().unwrap()).unwrap();
    assert!(out.starts_with(started["run"].as_str().unwrap()), "{out}");
    assert!(!elsewhere.path().join(".mvk").exists());
}

/// Regression: `mvk gc` kept the output of a command `mvk mcp` started when its files still
/// had their first name, `<stamp>-<command>.out` (one dot).
#[test]
fn gc_removes_the_output_of_mcp_commands_under_either_name() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    let r = f.apply();
    r.expect_code(0);
    let dir = f.root().join(".mvk/mcp");
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap();
        dir.join(name)
    };
    // Named by its first line only (renaming failed): the run is over, so they go.
    let unnamed = [
        write(
            "20261203T100000-aaaa-apply.out",
            &format!("{}\nsummary\n", r.id),
        ),
        write("20261203T100000-aaaa-apply.err", "progress\n"),
    ];
    // Only the `.err` kept its first name; the `.out` was renamed by the run.
    let half = [
        write(&format!("{}.20261203T100001-bbbb-resume.out", r.id), &r.id),
        write("20261203T100001-bbbb-resume.err", ""),
    ];
    // Named no run: kept while the command may still name one, removed once it is too old to.
    let fresh = write("20261203T100002-cccc-apply.err", "compiling\n");
    let stale = write("20261203T100003-dddd-apply.err", "error\n");
    let touched = std::process::Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(&stale)
        .status()
        .unwrap();
    assert!(touched.success());
    // A run the ledger does not know: its output stays.
    let unknown = write("20261203T100004-eeee-apply.out", "19990101T000000-zzzz\n");
    let gc = f.mvk().arg("gc").output().unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    for gone in unnamed.iter().chain(&half).chain([&stale]) {
        assert!(!gone.exists(), "{} kept", gone.display());
    }
    for kept in [&fresh, &unknown] {
        assert!(kept.exists(), "{} removed", kept.display());
    }
}

/// `mvk verify` in DIR (not the fixture's root): its exit code and what it printed.
fn verify_in(f: &Fixture, dir: &Path, args: &[&str]) -> (i32, String) {
    let out = f
        .mvk()
        .current_dir(dir)
        .args(["verify", "loops/t.kdl"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Regression: `verify` in a linked worktree (where an agent works) checked the main checkout,
/// so a sealed file tampered with in the worktree was `untouched` — from the CLI and the tool.
#[test]
fn verify_in_a_linked_worktree_checks_that_worktree() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    let outside = tempfile::tempdir().unwrap();
    let wt = outside.path().join("agent");
    f.git(&[
        "worktree",
        "add",
        "-q",
        "-b",
        "agent",
        wt.to_str().unwrap(),
        "main",
    ]);
    std::fs::write(wt.join("tests/test_calc.sh"), "exit 0\n").unwrap();
    // The main checkout is clean: it is not what is judged.
    assert_eq!(verify_in(&f, f.root(), &["--base", "main"]).0, 0);
    let (code, out) = verify_in(&f, &wt, &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("sealed path `tests/test_calc.sh` modified"),
        "{out}"
    );
    // `--repo` naming the worktree, from anywhere.
    let out = f
        .mvk()
        .current_dir(outside.path())
        .args(["--repo", wt.to_str().unwrap(), "verify", "--base", "main"])
        .arg(wt.join("loops/t.kdl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // Committed there, with no head named: the worktree's own HEAD.
    f.git(&["-C", wt.to_str().unwrap(), "commit", "-q", "-am", "tamper"]);
    let (code, out) = verify_in(&f, &wt, &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    let doc = client_in(
        &f,
        &wt,
        &["mcp"],
        &json!([
            {"tool": "verify", "arguments": {"file": "loops/t.kdl", "base": "main"}},
        ]),
    );
    let verified = structured(&doc["steps"][0], "verify in the worktree");
    assert_eq!(verified["verdict"], "changed", "{verified:#}");
    assert_eq!(verified["head"], f.tip("agent").as_str(), "{verified:#}");
}

/// Regression: a sealed file marked `assume-unchanged` or `skip-worktree` in the index was
/// reported unmodified whatever it held, so `verify` of uncommitted work said `untouched`.
#[test]
fn verify_sees_sealed_files_hidden_by_index_flags() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    for (flag, edit) in [
        ("--assume-unchanged", "content"),
        ("--skip-worktree", "content"),
        ("--skip-worktree", "delete"),
        ("--assume-unchanged", "mode"),
    ] {
        let file = f.root().join("tests/test_calc.sh");
        f.git(&["update-index", flag, "tests/test_calc.sh"]);
        match edit {
            "content" => std::fs::write(&file, "exit 0\n").unwrap(),
            "delete" => std::fs::remove_file(&file).unwrap(),
            _ => {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::metadata(&file).unwrap().permissions().mode() ^ 0o111;
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
        let status = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(f.root())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&status.stdout).trim(),
            "",
            "git itself sees nothing ({flag}, {edit})"
        );
        let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
        assert_eq!(code, 1, "{flag} {edit}: {out}");
        assert!(out.contains("tests/test_calc.sh"), "{out}");
        // Back as it was; the flag off again.
        f.git(&[
            "update-index",
            &flag.replace("--", "--no-"),
            "tests/test_calc.sh",
        ]);
        f.git(&["checkout", "-q", "--", "tests/test_calc.sh"]);
        assert_eq!(
            verify_in(&f, f.root(), &["--base", "main"]).0,
            0,
            "{flag} {edit} restored"
        );
    }
}

/// Regression: the tools took any path, so `/etc/passwd` or `../x` (or a link out of the
/// repository) was read and shown in the diagnostics of a file that does not compile. Every
/// file argument must now lie inside the repository once resolved.
#[test]
fn file_arguments_outside_the_repository_are_refused() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    // Outside the repository, next to it: what `../` reaches.
    let outside = f.state("outside.kdl");
    std::fs::write(&outside, "secret-outside-the-repository\n").unwrap();
    let escape = format!(
        "../{}/outside.kdl",
        f.state.path().file_name().unwrap().to_str().unwrap()
    );
    assert!(f.root().join(&escape).exists(), "{escape}");
    std::os::unix::fs::symlink("/etc/passwd", f.root().join("loops/link.kdl")).unwrap();
    let doc = client(
        &f,
        &json!([
            {"tool": "plan", "arguments": {"file": "/etc/passwd"}},
            {"tool": "plan", "arguments": {"file": escape}},
            {"tool": "plan", "arguments": {"file": "loops/link.kdl"}},
            {"tool": "verify", "arguments": {"file": "/etc/passwd", "base": "main"}},
            {"tool": "verify", "arguments": {"file": escape, "base": "main"}},
            {"tool": "run_attempt", "arguments": {"file": "/etc/passwd"}},
            {"tool": "run_attempt", "arguments": {"file": escape}},
            {"tool": "apply", "arguments": {"file": "/etc/passwd"}},
            {"tool": "apply", "arguments": {"file": escape}},
            // Inside the repository, by any spelling, still works.
            {"tool": "plan", "arguments": {"file": "loops/../loops/t.kdl"}},
            {"tool": "plan", "arguments": {"file": f.root().join("loops/t.kdl").to_str().unwrap()}},
        ]),
    );
    let steps = doc["steps"].as_array().unwrap();
    for (i, step) in steps[..9].iter().enumerate() {
        let refused = error(step, &format!("step {i}"));
        assert!(
            refused.contains("is outside the repository"),
            "step {i}: {refused}"
        );
        assert!(
            !refused.contains("root:x:0:0"),
            "step {i} read /etc/passwd: {refused}"
        );
        assert!(
            !refused.contains("secret-outside"),
            "step {i} read outside: {refused}"
        );
        assert_eq!(step["error"]["data"]["exit_code"], 64, "step {i}");
    }
    for step in &steps[9..] {
        assert_eq!(structured(step, "plan inside")["tasks"][0]["name"], "t");
    }
    // No command was started.
    let started = std::fs::read_dir(f.root().join(".mvk/mcp")).map_or(0, Iterator::count);
    assert_eq!(started, 0);
}

/// Regression: only the file argument was checked, but the compiler follows whatever that file
/// names, so a repository file importing `/etc/passwd` or `../outside.kdl` had those lines
/// rendered into the diagnostics handed to the caller, by the server (`plan`, `verify`) and by
/// the `mvk attempt` it starts (`run_attempt`); and `.git/config`, inside the repository, handed
/// out the remote's URL with its token. Now every file a served compile reads is fenced in the
/// checkout, outside its git directory.
#[test]
fn what_a_file_imports_is_fenced_in_the_repository_too() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    let outside = f.state("outside.kdl");
    std::fs::write(&outside, "secret-outside-the-repository {\n").unwrap();
    let state = f.state.path().file_name().unwrap().to_str().unwrap();
    let honest = std::fs::read_to_string(f.root().join("loops/t.kdl")).unwrap();
    for (name, import) in [
        ("etc", "/etc/passwd".to_string()),
        ("up", format!("../../{state}/outside.kdl")),
        ("git", "../.git/config".to_string()),
    ] {
        std::fs::write(
            f.root().join(format!("loops/{name}.kdl")),
            format!("import \"{import}\"\n{honest}"),
        )
        .unwrap();
    }
    std::fs::write(
        f.root().join("loops/tpl.kdl"),
        honest.replace("seal ", "prompt \"/etc/passwd\"\n    seal "),
    )
    .unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-q", "-m", "loops that reach out"]);
    f.git(&[
        "config",
        "remote.origin.url",
        "https://me:token-SECRET-42@example.com/x.git",
    ]);
    let doc = client(
        &f,
        &json!([
            {"tool": "plan", "arguments": {"file": "loops/etc.kdl"}},
            {"tool": "plan", "arguments": {"file": "loops/up.kdl"}},
            {"tool": "plan", "arguments": {"file": "loops/git.kdl"}},
            {"tool": "plan", "arguments": {"file": "loops/tpl.kdl"}},
            {"tool": "verify", "arguments": {"file": "loops/etc.kdl", "base": "main"}},
            {"tool": "run_attempt", "arguments": {"file": "loops/etc.kdl"}},
            {"tool": "run_attempt", "arguments": {"file": "loops/up.kdl"}},
            {"tool": "plan", "arguments": {"file": ".git/config"}},
            {"tool": "plan", "arguments": {"file": "loops/../.git/config"}},
            {"tool": "verify", "arguments": {"file": ".git/config", "base": "main"}},
        ]),
    );
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 10);
    for (i, step) in steps.iter().enumerate() {
        let refused = error(step, &format!("step {i}"));
        for secret in [
            "root:x:0:0",
            "secret-outside",
            "SECRET-42",
            "repositoryformatversion",
        ] {
            assert!(
                !refused.contains(secret),
                "step {i} leaked {secret}: {refused}"
            );
        }
        assert!(
            refused.contains("outside the repository") || refused.contains("git directory"),
            "step {i}: {refused}"
        );
    }
    // The command line itself is not fenced: the same import still works there.
    let own = f.mvk().args(["plan", "loops/tpl.kdl"]).output().unwrap();
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
}

/// Regression: `run_attempt` ran `mvk attempt` in the server's process group with its output on
/// pipes to the server. A client that left mid-call and killed the server's process group (as
/// clients do on exit) killed the attempt with it; one that killed the server alone left the
/// attempt to panic on its next line of progress (`eprintln!` on a closed pipe). Either way the
/// attempt's run stayed `running`. Now it finishes on its own and is recorded.
#[test]
fn an_attempt_outlives_a_client_that_leaves_mid_call() {
    use std::io::{BufRead as _, Write as _};
    for kill_group in [true, false] {
        let f = Fixture::new(&simple_loop("go_fix.sh", "budget iterations=1"));
        // A client of its own, speaking MCP's JSON lines: it can leave when it likes.
        let mut server = f
            .mvk_std()
            .arg("mcp")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut to = server.stdin.take().unwrap();
        let mut from = std::io::BufReader::new(server.stdout.take().unwrap());
        let mut send = |msg: Value| writeln!(to, "{msg}").unwrap();
        send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}}}),
        );
        let mut line = String::new();
        from.read_line(&mut line).unwrap();
        assert!(line.contains("\"mvk\""), "{line}");
        send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "run_attempt", "arguments": {"file": "loops/t.kdl"}}}),
        );
        let start = std::time::Instant::now();
        while !f.state("started").exists() {
            assert!(start.elapsed().as_secs() < 60, "the agent never started");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // The client goes, mid-call.
        let pid = server.id().to_string();
        let target = if kill_group { format!("-{pid}") } else { pid };
        let killed = Command::new("kill")
            .args(["-KILL", "--", &target])
            .status()
            .unwrap();
        assert!(killed.success());
        server.wait().unwrap();
        drop(from);
        std::fs::write(f.state("go"), "").unwrap();
        let status = finished_status(&f, None);
        assert_eq!(
            status["state"], "finished",
            "kill group {kill_group}: {status:#}"
        );
        assert_eq!(
            status["outcome"], "skipped",
            "kill group {kill_group}: {status:#}"
        );
        assert_eq!(status["exit_code"], 0, "{status:#}");
    }
}

/// Regression: `resume` without a run took the latest run, so an attempt made after an
/// interrupted `mvk apply` hid that run (the resume was refused as the attempt's). Now it is
/// the latest run of `mvk apply`, from the tool as from the command line.
#[test]
fn resume_without_a_run_continues_the_latest_apply_run_not_a_later_attempt() {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let mut child = crate::resume::spawn_apply(&f, &[]);
    crate::resume::wait_for(&f.state("started"), &mut child);
    crate::resume::crash(&mut child, Some(&f.state("agent.pgid")));
    let run = crate::resume::the_run(&f);
    std::fs::write(f.state("go"), "").unwrap();
    let attempt = f.mvk().args(["attempt", "loops/t.kdl"]).output().unwrap();
    assert_eq!(
        attempt.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&attempt.stderr)
    );
    let doc = client(&f, &json!([{"tool": "resume", "arguments": {}}]));
    let started = structured(&doc["steps"][0], "resume without a run");
    assert_eq!(started["run"], run.as_str(), "{started:#}");
    let status = finished_status(&f, Some(&run));
    assert_eq!(status["outcome"], "accepted", "{status:#}");
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

/// Regression: `mvk mcp` started every command it runs from `std::env::current_exe()`, which on
/// Linux reads `…/mvk (deleted)` once the binary has been replaced (a `cargo install` while the
/// server lives, as an editor keeps it for hours): every tool that runs a command failed. It
/// uses the path found at startup now, which runs the replacement.
#[test]
fn the_server_outlives_the_replacement_of_its_mvk_binary() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("mvk");
    std::fs::copy(assert_cmd::cargo::cargo_bin("mvk"), &exe).unwrap();
    let new = bin.path().join("mvk.new");
    // A new binary put in its place, as `cargo install` does; the server's file is gone.
    let replace = format!(
        "cp '{}' '{new}' && mv '{new}' '{exe}'",
        assert_cmd::cargo::cargo_bin("mvk").display(),
        new = new.display(),
        exe = exe.display()
    );
    let doc = client_of(
        &exe,
        &f,
        f.root(),
        &["mcp"],
        &json!([
            {"shell": replace},
            {"tool": "run_attempt", "arguments": {"file": "loops/t.kdl"}},
        ]),
    );
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps[0]["code"], 0, "{doc:#}");
    let a = structured(&steps[1], "run_attempt after the replacement");
    assert_eq!(a["verdict"], "passed", "{a:#}");
}

/// Regression: `verify` clears the stat data of sealed index entries so that every sealed file
/// is hashed again, but libgit2 cannot run a configured clean filter, so a sealed file whose
/// blob is its cleaned content looked modified in a clean checkout. Such files are now hashed by
/// git, which applies the filter; a real edit is still seen.
#[test]
fn verify_hashes_sealed_files_through_their_clean_filter() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    f.git(&["config", "filter.up.clean", "tr a-z A-Z"]);
    f.git(&["config", "filter.up.smudge", "cat"]);
    std::fs::write(f.root().join(".gitattributes"), "*.dat filter=up\n").unwrap();
    std::fs::write(f.root().join("tests/data.dat"), "hello\n").unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-q", "-m", "filtered data"]);
    assert_eq!(f.show("main", "tests/data.dat").as_deref(), Some("HELLO\n"));
    assert_eq!(
        f.git(&["status", "--porcelain"]),
        "",
        "git sees a clean checkout"
    );
    let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
    assert_eq!(code, 0, "{out}");
    // The same content by another spelling the filter maps to the blob, or written again (its
    // stat data no longer the index's): still untouched.
    for same in ["HELLO\n", "hello\n", "Hello\n"] {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        std::fs::write(f.root().join("tests/data.dat"), same).unwrap();
        let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
        assert_eq!(code, 0, "{same}: {out}");
    }
    // A real edit, hidden from git's status by a flag, is seen.
    std::fs::write(f.root().join("tests/data.dat"), "bye\n").unwrap();
    f.git(&["update-index", "--assume-unchanged", "tests/data.dat"]);
    let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("sealed path `tests/data.dat` modified"),
        "{out}"
    );
}

/// Regression: `verify` listed the checkout's new files without those git ignores, so a new
/// file in a sealed path was invisible once named in `.git/info/exclude`, or in a `.gitignore`
/// the agent may edit. Ignored files in sealed paths now count, except those the base commit's
/// own committed `.gitignore` rules ignore.
#[test]
fn verify_sees_new_sealed_files_that_git_is_told_to_ignore() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    std::fs::write(f.root().join(".gitignore"), "tests/*.log\n").unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-q", "-m", "ignore logs"]);
    // Ignored by the committed rules: a test run's log, not a change to the oracle.
    std::fs::write(f.root().join("tests/run.log"), "ran\n").unwrap();
    let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
    assert_eq!(code, 0, "{out}");
    // Hidden by `.git/info/exclude`.
    let exclude = f.root().join(".git/info/exclude");
    let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
    text.push_str("tests/extra_test.sh\n");
    std::fs::write(&exclude, text).unwrap();
    std::fs::write(f.root().join("tests/extra_test.sh"), "exit 0\n").unwrap();
    let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("tests/extra_test.sh"), "{out}");
    std::fs::remove_file(f.root().join("tests/extra_test.sh")).unwrap();
    assert_eq!(verify_in(&f, f.root(), &["--base", "main"]).0, 0);
    // Hidden by an edit to the (unsealed) `.gitignore`.
    std::fs::write(
        f.root().join(".gitignore"),
        "tests/*.log\ntests/sneaky.sh\n",
    )
    .unwrap();
    std::fs::write(f.root().join("tests/sneaky.sh"), "exit 0\n").unwrap();
    let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("tests/sneaky.sh"), "{out}");
}

/// Regression: `verify` compiles the loop file from the checkout it judges, so an agent that
/// loosened the seal in the loop file and then edited what it had sealed was `untouched`. The
/// loop's own files are now sealed too.
#[test]
fn verify_counts_an_edit_to_the_loop_file_itself() {
    let f = Fixture::new(&simple_loop("fix.sh", ""));
    let path = f.root().join("loops/t.kdl");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("seal \"tests/**\"", "seal \"nothing/**\""),
    )
    .unwrap();
    std::fs::write(f.root().join("tests/test_calc.sh"), "exit 0\n").unwrap();
    let (code, out) = verify_in(&f, f.root(), &["--base", "main"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("sealed path `loops/t.kdl` modified"), "{out}");
    // Committed on a branch: the same.
    f.git(&["checkout", "-q", "-b", "loosened"]);
    f.git(&["commit", "-q", "-am", "loosen the seal"]);
    let (code, out) = verify_in(&f, f.root(), &["--base", "main", "--head", "loosened"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("loops/t.kdl"), "{out}");
}
