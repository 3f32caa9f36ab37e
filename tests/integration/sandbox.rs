//! `sandbox`: agents and gates that try to reach past their worktree — the main checkout, its
//! git directory, another slot of the pool, a state directory, mvk itself by signal, the
//! network — are refused by the kernel; only the granted paths and variables reach them; where
//! the kernel cannot confine, a warning, or for `required=#true` a refusal before anything runs.

use std::fs;

use super::apply::{FIXED, Fixture, TESTS_GATE, agent_def, loop_kdl};

/// Loop `t` whose agent runs `hardening/reach.sh STATE REPO`, with SANDBOX and EXTRA gates.
fn reach_loop(sandbox: &str, gates: &str) -> String {
    loop_kdl(
        &agent_def("bot", "hardening/reach.sh", &["@STATE", "@REPO"]),
        true,
        &format!("{TESTS_GATE}\n    {gates}"),
        &format!("{sandbox}\n    budget iterations=1"),
    )
}

fn agent_said(f: &Fixture, run: &super::apply::Run, what: &str) -> String {
    let out = fs::read_to_string(run.attempt_dir(1).join("agent.out")).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{what}: ")))
        .unwrap_or_else(|| {
            panic!(
                "the agent said nothing about {what}:\n{out}\n{}",
                f.root().display()
            )
        })
        .to_string()
}

#[test]
fn a_sandboxed_agent_writes_only_in_its_worktree_and_cannot_signal_mvk() {
    // The gate also tries to write outside and fails the attempt if it could, or if it sees the token.
    let probe_gate = r#"gate outside evidence=none { sh "if echo x > @STATE/gate-escaped 2>/dev/null; then echo wrote; exit 1; fi; [ -z \"${MY_API_TOKEN+x}\" ]"; }"#;
    let f = Fixture::new(&reach_loop(
        "sandbox network=#false required=#true",
        probe_gate,
    ));
    let run = f.apply_with(&[], &[("MY_API_TOKEN", "sekrit")]);
    run.expect_code(0);
    for denied in [
        "main-checkout",
        "main-git",
        "state",
        "pool",
        "signal-mvk",
        "signal-mvk-group",
    ] {
        assert_eq!(
            agent_said(&f, &run, denied),
            "denied",
            "{denied}\n{}",
            run.why()
        );
    }
    assert_eq!(agent_said(&f, &run, "tmpdir"), "allowed");
    assert_eq!(
        agent_said(&f, &run, "commit"),
        "allowed",
        "an agent may commit"
    );
    assert_eq!(
        agent_said(&f, &run, "interfaces").trim(),
        "lo",
        "no network"
    );
    let env = agent_said(&f, &run, "env");
    assert!(!env.contains("MY_API_TOKEN"), "{env}");
    assert!(
        env.contains("MVK_PROMPT_FILE") && env.contains("PATH"),
        "{env}"
    );
    assert!(!f.state("escaped").exists() && !f.state("gate-escaped").exists());
    // What landed is the fix alone; the main checkout holds it, not the agent's write.
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(
        fs::read_to_string(f.root().join("src/calc.sh")).unwrap(),
        FIXED
    );
}

#[test]
fn granted_paths_and_variables_reach_the_sandbox_and_nothing_else() {
    let f = Fixture::new(&reach_loop(
        "sandbox { write \"@STATE\" \"/no/such/dir\"; env \"MY_API_TOKEN\"; }",
        "",
    ));
    let run = f.apply_with(&[], &[("MY_API_TOKEN", "sekrit"), ("OTHER_TOKEN", "x")]);
    run.expect_code(0);
    assert!(
        run.context
            .contains("warning: task `t`: the sandbox grants `/no/such/dir`, which does not exist"),
        "{}",
        run.why()
    );
    assert_eq!(agent_said(&f, &run, "state"), "allowed");
    assert_eq!(agent_said(&f, &run, "main-checkout"), "denied");
    let env = agent_said(&f, &run, "env");
    assert!(
        env.contains("MY_API_TOKEN") && !env.contains("OTHER_TOKEN"),
        "{env}"
    );
    // The network stays on by default: the agent sees the interfaces mvk sees.
    let host = fs::read_to_string("/proc/net/dev").unwrap().lines().count() - 2;
    let seen = agent_said(&f, &run, "interfaces")
        .split_whitespace()
        .count();
    assert_eq!(seen, host);
}

#[test]
fn a_required_sandbox_is_refused_where_the_kernel_cannot_confine() {
    let f = Fixture::new(&reach_loop("sandbox required=#true", ""));
    let out = f
        .mvk()
        .args(["apply", "loops/t.kdl"])
        .env("MVK_SANDBOX_UNSUPPORTED", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{err}");
    assert!(
        err.contains("task `t` requires a sandbox this machine cannot provide"),
        "{err}"
    );
    assert!(err.contains("Landlock"), "{err}");
    assert!(!f.root().join(".mvk/runs").exists(), "no run started");
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn a_sandbox_the_kernel_cannot_enforce_warns_and_says_so_in_the_agents_log() {
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        TESTS_GATE,
        "sandbox network=#false\n    budget iterations=1",
    ));
    let run = f.apply_with(&[], &[("MVK_SANDBOX_UNSUPPORTED", "1")]);
    run.expect_code(0);
    assert!(
        run.context
            .contains("warning: task `t` runs less confined than its sandbox says"),
        "{}",
        run.why()
    );
    let err = fs::read_to_string(run.attempt_dir(1).join("agent.err")).unwrap();
    assert!(err.contains("mvk sandbox: the network stays on"), "{err}");
    assert!(
        err.contains("mvk sandbox: writes are not fully confined"),
        "{err}"
    );
}

#[test]
fn an_agent_definitions_own_sandbox_replaces_the_loops() {
    let text = loop_kdl(
        "agent bot timeout=\"30s\" {\n    run \"sh\" \"@AGENTS/hardening/reach.sh\" \"@STATE\" \"@REPO\"\n    sandbox { write \"@STATE\"; }\n}\n",
        true,
        TESTS_GATE,
        "sandbox network=#false\n    budget iterations=1",
    );
    let f = Fixture::new(&text);
    let run = f.apply();
    run.expect_code(0);
    assert_eq!(agent_said(&f, &run, "state"), "allowed");
    assert_ne!(agent_said(&f, &run, "interfaces").trim(), "lo");
}

#[test]
fn a_real_cargo_test_gate_runs_under_the_sandbox_without_network() {
    let text = loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        r#"gate unit evidence=cargo-test timeout="5m" { run "cargo" "test" "--offline" "--quiet"; }"#,
        "sandbox network=#false required=#true\n    budget iterations=1",
    );
    let f = Fixture::new(&text);
    let manifest = "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n";
    fs::write(f.root().join("Cargo.toml"), manifest).unwrap();
    fs::create_dir_all(f.root().join("src")).unwrap();
    fs::write(
        f.root().join("src/lib.rs"),
        "#[test]\nfn adds() { assert_eq!(2 + 3, 5); }\n",
    )
    .unwrap();
    fs::write(f.root().join(".gitignore"), "target\n").unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-qm", "a crate"]);
    let run = f.apply();
    run.expect_code(0);
    let gate = run.one("gate.finished");
    assert_eq!(gate["detail"]["verdict"], "pass", "{}", run.why());
    assert_eq!(gate["detail"]["counts"]["executed"], 1, "{}", run.why());
}

#[test]
fn plan_shows_each_sandbox_and_its_grants() {
    let text = loop_kdl(
        "agent bot { run \"sh\" \"@AGENTS/fix.sh\"; sandbox { env \"MY_API_TOKEN\"; }; }\n",
        true,
        TESTS_GATE,
        "sandbox network=#false required=#true { write \"~/.cache/tool\" \"/var/tmp\"; }",
    );
    let f = Fixture::new(&text);
    let out = f.mvk().args(["plan", "loops/t.kdl"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("sandbox  network off, required; writes /var/tmp ~/.cache/tool"),
        "{text}"
    );
    assert!(
        text.contains("own sandbox: network on, warn where unsupported; passes MY_API_TOKEN"),
        "{text}"
    );
    let json = f
        .mvk()
        .args(["plan", "loops/t.kdl", "--json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["tasks"][0]["sandbox"]["network"], false);
    assert_eq!(doc["tasks"][0]["sandbox"]["write"][0], "/var/tmp");
}

/// `mvk __sandbox POLICY -- sh -c SCRIPT` as a user who is not root (nobody, when the tests run
/// as root), so the network namespace comes through a user namespace.
fn trampoline_unprivileged(policy: &str, script: &str) -> std::process::Output {
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    let mut argv: Vec<String> = Vec::new();
    if rustix::process::geteuid().is_root() {
        argv.extend(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
            ]
            .map(String::from),
        );
    }
    argv.push(mvk.display().to_string());
    argv.extend(["__sandbox", policy, "--", "sh", "-c", script].map(String::from));
    std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir("/")
        .env_remove("MVK_SANDBOX_UNSUPPORTED")
        .output()
        .unwrap()
}

#[test]
fn the_trampoline_confines_a_user_who_is_not_root() {
    let dir = tempfile::tempdir().unwrap();
    let granted = dir.path().join("granted");
    fs::create_dir(&granted).unwrap();
    // nobody must be able to write the granted directory for the kernel to be what refuses.
    fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    fs::set_permissions(
        &granted,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let policy = format!(
        r#"{{"write":["{}"],"network":false,"required":true}}"#,
        granted.display()
    );
    let script = format!(
        "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; touch '{0}/in' && echo in-ok; touch '{1}/out' 2>/dev/null || echo out-denied",
        granted.display(),
        dir.path().display()
    );
    let out = trampoline_unprivileged(&policy, &script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["lo", "in-ok", "out-denied"]
    );
}

#[test]
fn the_trampoline_refuses_a_required_sandbox_it_cannot_apply() {
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    let out = std::process::Command::new(mvk)
        .args([
            "__sandbox",
            r#"{"write":[],"network":true,"required":true}"#,
            "--",
            "sh",
            "-c",
            "echo ran",
        ])
        .env("MVK_SANDBOX_UNSUPPORTED", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty(), "the program did not run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to run: Landlock is not fully enforced"),
        "{err}"
    );
}
