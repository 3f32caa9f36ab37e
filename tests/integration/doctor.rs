//! `mvk doctor`, and `mvk apply`'s refusal of an agent that cannot start: with stand-ins for a
//! CLI (scripts that answer `--version` and `--help` as a given version would) on PATH.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::support::Fixture;

/// A `claude` that prints VERSION and a help text listing FLAGS, and otherwise fails.
fn fake_claude(bin: &Path, flags: &[&str]) {
    let help: String = flags
        .iter()
        .map(|f| format!("  {f} <value>  a flag\\n"))
        .collect();
    let script = format!(
        "#!/bin/sh\ncase \"$1\" in\n  --version) echo '9.9.9 (Claude Code)' ;;\n  --help) printf 'Usage: claude [options]\\n{help}' ;;\n  *) echo 'a stand-in: never run' >&2; exit 1 ;;\nesac\n"
    );
    let path = bin.join("claude");
    fs::write(&path, script).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn path_with(bin: &Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

const LOOP: &str = "import \"std/agents.kdl\"\n\
    loop t {\n    goal \"Fix it.\"\n    agent claude\n    \
    gate tests { run \"sh\" \"-c\" \"true\"; }\n    \
    budget iterations=2\n}\n";

fn doctor(fixture: &Fixture, bin: &Path, env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = fixture.mvk_std();
    cmd.args(["doctor", "loops/t.kdl"])
        .env("PATH", path_with(bin))
        .env_remove("IS_SANDBOX")
        .env_remove("ANTHROPIC_API_KEY")
        .env("HOME", bin);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn a_flag_the_installed_version_does_not_take_fails_doctor_and_apply_refuses_before_any_attempt() {
    let fixture = Fixture::new(LOOP);
    let bin = tempfile::tempdir().unwrap();
    // This version knows every flag but the one that skips permission prompts.
    fake_claude(
        bin.path(),
        &[
            "-p",
            "--model",
            "--verbose",
            "--max-budget-usd",
            "--output-format",
            "--json-schema",
            "--verbose",
            "--max-budget-usd",
        ],
    );
    let (code, text) = doctor(&fixture, bin.path(), &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("✗ agent claude (model=sonnet)")
            && text.contains("9.9.9 (Claude Code)")
            && text.contains(
                "does not accept `--dangerously-skip-permissions` (not in `claude --help`)"
            )
            && text.contains("fix: "),
        "{text}"
    );
    assert!(text.contains("✓ gate tests"), "{text}");

    let out = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .env("PATH", path_with(bin.path()))
        .env_remove("IS_SANDBOX")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("--dangerously-skip-permissions"),
        "{stderr}"
    );
    assert!(
        !fixture.root().join(".mvk/runs").exists()
            || fs::read_dir(fixture.root().join(".mvk/runs"))
                .unwrap()
                .next()
                .is_none(),
        "no run was started"
    );
}

#[test]
fn a_missing_program_is_named_with_how_to_install_it() {
    let fixture = Fixture::new(LOOP);
    let bin = tempfile::tempdir().unwrap();
    // No claude at all: PATH holds only the system's directories.
    let out = fixture
        .mvk_std()
        .args(["doctor", "loops/t.kdl"])
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", bin.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("✗ agent claude (model=sonnet): `claude` is not installed")
            && text.contains("npm install -g @anthropic-ai/claude-code"),
        "{text}"
    );
}

#[test]
fn credentials_are_named_never_shown_and_their_absence_is_a_warning() {
    let fixture = Fixture::new(LOOP);
    let bin = tempfile::tempdir().unwrap();
    fake_claude(
        bin.path(),
        &[
            "-p",
            "--model",
            "--verbose",
            "--max-budget-usd",
            "--output-format",
            "--dangerously-skip-permissions",
            "--json-schema",
        ],
    );
    let (code, text) = doctor(&fixture, bin.path(), &[]);
    assert_eq!(code, 0, "a warning alone does not fail: {text}");
    assert!(
        text.contains("! agent claude") && text.contains("no credentials found"),
        "{text}"
    );

    let secret = "sk-ant-very-secret-value";
    let (code, text) = doctor(&fixture, bin.path(), &[("ANTHROPIC_API_KEY", secret)]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("✓ agent claude")
            && text.contains("flags ok")
            && text.contains("credentials: ANTHROPIC_API_KEY"),
        "{text}"
    );
    assert!(!text.contains(secret), "the value is never printed: {text}");

    let out = fixture
        .mvk_std()
        .args(["doctor", "loops/t.kdl", "--json"])
        .env("PATH", path_with(bin.path()))
        .env("HOME", bin.path())
        .env("ANTHROPIC_API_KEY", secret)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let levels: Vec<&str> = doc
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["level"].as_str().unwrap())
        .collect();
    assert_eq!(levels, ["ok", "ok"], "{doc}");
}

#[test]
fn claude_as_root_without_is_sandbox_is_refused_and_the_stdlib_definition_passes() {
    let is_root = String::from_utf8_lossy(
        &std::process::Command::new("id")
            .arg("-u")
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
        == "0";
    // A definition written without IS_SANDBOX, beside the stdlib's.
    let text = "agent bare adapter=claude {\n    run \"claude\" \"-p\" \"{{prompt}}\" \"--dangerously-skip-permissions\"\n}\n\
        loop t {\n    goal \"Fix it.\"\n    agent bare\n    gate tests { run \"sh\" \"-c\" \"true\"; }\n}\n";
    let fixture = Fixture::new(text);
    let bin = tempfile::tempdir().unwrap();
    fake_claude(
        bin.path(),
        &[
            "-p",
            "--dangerously-skip-permissions",
            "--verbose",
            "--max-budget-usd",
        ],
    );
    let (code, out) = doctor(&fixture, bin.path(), &[("ANTHROPIC_API_KEY", "k")]);
    if is_root {
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("IS_SANDBOX=1") && out.contains("✗ agent bare"),
            "{out}"
        );
        // A value other than exactly 1 does not count: Claude Code reads nothing else.
        let (code, out) = doctor(
            &fixture,
            bin.path(),
            &[("ANTHROPIC_API_KEY", "k"), ("IS_SANDBOX", "yes")],
        );
        assert_eq!(code, 1, "{out}");
        let (code, out) = doctor(
            &fixture,
            bin.path(),
            &[("ANTHROPIC_API_KEY", "k"), ("IS_SANDBOX", "1")],
        );
        assert_eq!(code, 0, "{out}");
    } else {
        assert_eq!(code, 0, "as an ordinary user nothing more is needed: {out}");
    }
}

#[test]
fn without_a_file_every_stdlib_agent_is_checked() {
    let bin = tempfile::tempdir().unwrap();
    let out = assert_cmd::Command::cargo_bin("mvk")
        .unwrap()
        .arg("doctor")
        .current_dir(bin.path())
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", bin.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for agent in ["claude", "codex", "aider", "goose", "gemini"] {
        assert!(
            text.contains(&format!("agent {agent}")),
            "{agent} is checked:\n{text}"
        );
    }
    assert_eq!(out.status.code(), Some(1), "{text}");
}

#[test]
fn under_a_sandbox_only_the_variables_it_passes_count_as_credentials() {
    let with = |passes: &str| {
        format!(
            "import \"std/agents.kdl\"\n\
             loop t {{\n    goal \"Fix it.\"\n    agent claude\n    \
             gate tests {{ run \"sh\" \"-c\" \"true\"; }}\n    \
             sandbox required=#false {{ {passes} }}\n}}\n"
        )
    };
    let bin = tempfile::tempdir().unwrap();
    fake_claude(
        bin.path(),
        &[
            "-p",
            "--model",
            "--verbose",
            "--max-budget-usd",
            "--output-format",
            "--dangerously-skip-permissions",
            "--json-schema",
        ],
    );
    let env = [("ANTHROPIC_API_KEY", "sk-set-in-mvks-environment")];
    let fixture = Fixture::new(&with("env \"OTHER_NAME\""));
    let (_, text) = doctor(&fixture, bin.path(), &env);
    assert!(
        text.contains("! agent claude")
            && text.contains("the sandbox passes only the variables its `env` names"),
        "{text}"
    );
    let fixture = Fixture::new(&with("env \"ANTHROPIC_API_KEY\""));
    let (_, text) = doctor(&fixture, bin.path(), &env);
    assert!(
        text.contains("✓ agent claude") && text.contains("credentials: ANTHROPIC_API_KEY"),
        "{text}"
    );
}

#[test]
fn a_launcher_is_not_asked_for_the_tools_flags_and_a_path_known_at_run_time_is_not_judged() {
    let text = "agent launched adapter=claude {\n    run \"env\" \"claude\" \"-p\" \"{{prompt}}\" \"--model\" \"x\"\n}\n\
        agent inside adapter=claude {\n    run \"{{worktree}}/bin/agent\" \"{{prompt}}\"\n}\n\
        loop t {\n    goal \"Fix it.\"\n    ladder {\n        rung agent=launched\n        rung agent=inside\n    }\n    \
        gate tests { run \"sh\" \"-c\" \"true\"; }\n}\n";
    let fixture = Fixture::new(text);
    let bin = tempfile::tempdir().unwrap();
    let (code, out) = doctor(&fixture, bin.path(), &[("ANTHROPIC_API_KEY", "k")]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("version and flags not checked (`env` is not the claude program)"),
        "{out}"
    );
    assert!(out.contains("known when the attempt starts"), "{out}");
}

/// A gate whose program is in the main checkout but not in git (an untracked `.venv`): the
/// attempt's worktree will not have it. `mvk apply` refuses it before any attempt; run anyway
/// (`--no-doctor`), the gate fails saying why and the run ends as a rejection, never as mvk's
/// own error (70) with its task left running.
#[test]
fn a_gate_program_the_worktree_will_not_have_is_refused_first_and_fails_its_gate_if_run() {
    let loop_text = crate::support::loop_kdl(
        &crate::support::agent_def("bot", "fix.sh", &[]),
        true,
        r#"gate tests evidence=none { run ".venv/bin/python" "-c" "print(1)"; }"#,
        "budget iterations=2",
    );
    let fixture = Fixture::new(&loop_text);
    let venv = fixture.root().join(".venv/bin");
    fs::create_dir_all(&venv).unwrap();
    fs::write(venv.join("python"), "#!/bin/sh\nexit 0\n").unwrap();
    fs::set_permissions(venv.join("python"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(fixture.root().join(".git/info/exclude"), ".venv/\n").unwrap();

    let refused = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{err}");
    assert!(
        err.contains("`.venv/bin/python` is in the main checkout but git does not track it"),
        "{err}"
    );

    let run = fixture.run_mvk(&["apply", "loops/t.kdl", "--no-doctor"], &[]);
    assert!(
        matches!(run.code, 1 | 2),
        "a rejection or the brake, not {}\n{}",
        run.code,
        run.why()
    );
    let gate = &run.named("gate.finished")[0]["detail"];
    assert_eq!(gate["verdict"], "fail", "{gate}");
    assert!(
        gate["reason"]
            .as_str()
            .unwrap()
            .contains("could not start in the attempt's worktree"),
        "{gate}"
    );
    let status = fixture.mvk().args(["status", "--json"]).output().unwrap();
    let doc: Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_ne!(doc["tasks"][0]["state"], "running", "{doc}");
}

/// A tracked gate script that cannot be executed (no `#!` line) fails its gate, saying why;
/// mvk does not stop on its own error (70) with the task left running.
#[test]
fn a_gate_script_without_an_interpreter_line_fails_its_gate_not_mvk() {
    let loop_text = crate::support::loop_kdl(
        &crate::support::agent_def("bot", "fix.sh", &[]),
        true,
        r#"gate tests evidence=none { run "checks/bare"; }"#,
        "budget iterations=2",
    );
    let fixture = Fixture::new(&loop_text);
    let script = fixture.root().join("checks/bare");
    fs::write(&script, "exit 0\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    fixture.git(&["add", "checks/bare"]);
    fixture.git(&["commit", "-q", "-m", "a script without #!"]);
    let run = fixture.run_mvk(&["apply", "loops/t.kdl", "--no-doctor"], &[]);
    assert!(
        matches!(run.code, 1 | 2),
        "not mvk's own error: {}\n{}",
        run.code,
        run.why()
    );
    let gate = &run.named("gate.finished")[0]["detail"];
    assert_eq!(gate["verdict"], "fail", "{gate}");
    assert!(
        gate["reason"].as_str().unwrap().contains("could not start"),
        "{gate}"
    );
}
