//! `sandbox`: agents and gates that try to reach past their worktree — the main checkout, its
//! git directory, another slot of the pool, a state directory, mvk itself by signal, the
//! network — are refused by the kernel; only the granted paths and variables reach them; where
//! the kernel cannot confine, a warning, or for `required=#true` a refusal before anything runs.

use std::fs;
use std::path::Path;

use super::support::{
    FIXED, Fixture, TESTS_GATE, agent_def, agent_def_timeout, hardening_fixture, loop_kdl,
};

/// Loop `t` whose agent runs `hardening/reach.sh STATE REPO`, with SANDBOX and EXTRA gates.
fn reach_loop(sandbox: &str, gates: &str) -> String {
    loop_kdl(
        &agent_def("bot", "hardening/reach.sh", &["@STATE", "@REPO"]),
        true,
        &format!("{TESTS_GATE}\n    {gates}"),
        &format!("{sandbox}\n    budget iterations=1"),
    )
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
            attempt_said(&run, 1, denied),
            "denied",
            "{denied}\n{}",
            run.why()
        );
    }
    assert_eq!(attempt_said(&run, 1, "tmpdir"), "allowed");
    assert_eq!(
        attempt_said(&run, 1, "commit"),
        "allowed",
        "an agent may commit"
    );
    assert_eq!(
        attempt_said(&run, 1, "interfaces").trim(),
        "lo",
        "no network"
    );
    let env = attempt_said(&run, 1, "env");
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
    assert_eq!(attempt_said(&run, 1, "state"), "allowed");
    assert_eq!(attempt_said(&run, 1, "main-checkout"), "denied");
    let env = attempt_said(&run, 1, "env");
    assert!(
        env.contains("MY_API_TOKEN") && !env.contains("OTHER_TOKEN"),
        "{env}"
    );
    // The network stays on by default: the agent sees the interfaces mvk sees.
    let host = fs::read_to_string("/proc/net/dev").unwrap().lines().count() - 2;
    let seen = attempt_said(&run, 1, "interfaces")
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

/// Review r8d, W3: a grant of `~/.cache` (where the worktrees live by default) let an agent
/// write other attempts' worktrees and the index copies mvk trusts. A grant that holds, or lies
/// inside, the worktrees, the main checkout or its git directory is refused before anything runs.
#[test]
fn a_grant_that_holds_mvks_own_places_is_refused_before_anything_runs() {
    // GRANT, where the worktrees live (None: `~/.cache/mvk/worktrees/…` of a HOME in STATE), and
    // what the refusal names.
    let exe = assert_cmd::cargo::cargo_bin("mvk");
    let exe_dir = exe.parent().unwrap().to_str().unwrap().to_string();
    let cases = [
        ("~/.cache", None, "the attempt worktrees"),
        ("@WORKTREES", Some("pool"), "the attempt worktrees"),
        ("@WORKTREES/slot-9", Some(""), "the attempt worktrees"),
        ("@REPO/target", Some(""), "the main checkout"),
        ("@REPO/.git/hooks", Some(""), "the main checkout"),
        ("/", Some(""), "the main checkout"),
        // Review r8e, H2: where mvk itself is (`~/.cargo/bin` for `cargo install`).
        (exe_dir.as_str(), Some(""), "mvk's own executable"),
    ];
    for (grant, pool, what) in cases {
        let f = Fixture::new(&reach_loop(
            &format!("sandbox {{ write \"{grant}\"; }}"),
            "",
        ));
        let mut cmd = f.mvk();
        cmd.args(["apply", "loops/t.kdl"]);
        match pool {
            Some(sub) => cmd.env("MVK_WORKTREE_ROOT", f.worktrees.path().join(sub)),
            None => cmd
                .env_remove("MVK_WORKTREE_ROOT")
                .env_remove("XDG_CACHE_HOME")
                .env_remove("MVK_CACHE_DIR")
                .env("HOME", f.state("")),
        };
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{grant}: {err}");
        assert!(
            err.contains("task `t`: the sandbox grants") && err.contains(what),
            "{grant}: {err}"
        );
        assert!(
            !f.root().join(".mvk/runs").exists(),
            "{grant}: no run started"
        );
        assert_eq!(f.tip("main"), f.base);
    }
}

/// Review r8e: grants were checked once, when the run began, and opened again (links followed)
/// at each start, so an agent that may write under one grant could put a link where another was,
/// and the next attempt's sandbox granted what the link led to: here the main checkout. mvk now
/// checks each grant again before each start, and the run stops, exit 64.
#[test]
fn a_link_planted_where_a_grant_was_does_not_lead_the_next_attempt_out() {
    // The sandbox is the agent's own: the gates run unconfined, so only the agent's start
    // checks its grants.
    let f = Fixture::new(&loop_kdl(
        "agent bot timeout=\"30s\" {\n    run \"sh\" \"@AGENTS/hardening/plant_grant_link.sh\" \"@STATE\" \"@REPO\"\n    sandbox { write \"@STATE/shared\" \"@STATE/shared/inner\"; }\n}\n",
        true,
        TESTS_GATE,
        "budget iterations=3",
    ));
    fs::create_dir_all(f.state("shared/inner")).unwrap();
    let run = f.apply_with(&[], &[]);
    run.expect_code(64);
    assert!(
        run.context.contains("refusing to start `sh`")
            && run.context.contains("which now leads to the main checkout"),
        "{}",
        run.why()
    );
    // Attempt 1 ended (its gate failed), attempt 2's agent was refused before it started.
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    assert_eq!(fs::read_to_string(f.state("shared/count")).unwrap(), "1\n");
    assert!(!f.root().join("pwned").exists());
    assert_eq!(f.tip("main"), f.base);
}

/// The same swap made between mvk's check and the trampoline's start (two agents side by side):
/// the trampoline opens each grant once, refuses one that leads to a protected place, and
/// grants the kernel the very directory it checked.
#[test]
fn the_trampoline_refuses_a_grant_that_leads_to_a_protected_place() {
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    let dir = tempfile::tempdir().unwrap();
    let (safe, protected) = (dir.path().join("safe"), dir.path().join("protected"));
    fs::create_dir_all(&safe).unwrap();
    fs::create_dir_all(&protected).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&protected, &link).unwrap();
    let run = |grant: &Path, target: &Path| {
        let policy = serde_json::json!({
            "write": [],
            "grants": [grant],
            "protected": [{"what": "the main checkout", "place": protected}],
            "network": true,
            "required": true,
        });
        std::process::Command::new(&mvk)
            .args([
                "__sandbox",
                &policy.to_string(),
                "--",
                "sh",
                "-c",
                &format!("echo ran; touch '{}/out' && echo wrote", target.display()),
            ])
            .output()
            .unwrap()
    };
    let out = run(&link, &link);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(out.stdout.is_empty(), "the program did not run");
    assert!(
        err.contains("refusing to run: the sandbox grants")
            && err.contains("which now leads to the main checkout"),
        "{err}"
    );
    assert!(!protected.join("out").exists());
    // A grant that leads elsewhere is granted, and only it.
    let out = run(&safe, &safe);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ran\nwrote\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&safe, &protected);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(!protected.join("out").exists());
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
    assert_eq!(attempt_said(&run, 1, "state"), "allowed");
    assert_ne!(attempt_said(&run, 1, "interfaces").trim(), "lo");
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
    // mvk's stand-in for an old kernel reaches the trampoline in its policy, never by the
    // environment: with the variable set and the policy silent, it confines as always.
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    let dir = tempfile::tempdir().unwrap();
    let run = |policy: &str| {
        std::process::Command::new(&mvk)
            .args([
                "__sandbox",
                policy,
                "--",
                "sh",
                "-c",
                &format!(
                    "echo ran; touch '{}/out' && echo wrote",
                    dir.path().display()
                ),
            ])
            .env("MVK_SANDBOX_UNSUPPORTED", "1")
            .output()
            .unwrap()
    };
    let out = run(r#"{"write":[],"network":true,"required":true,"pretend":true}"#);
    assert_eq!(out.status.code(), Some(125));
    assert!(out.stdout.is_empty(), "the program did not run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to run: Landlock is not fully enforced"),
        "{err}"
    );
    let out = run(r#"{"write":[],"network":true,"required":true}"#);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ran\n",
        "confined although the variable is set: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_loop_cannot_switch_its_sandbox_off_with_the_test_hook() {
    // The variable that makes mvk act as on a kernel without Landlock is read from mvk's own
    // environment only: given to the agent by its definition, or passed by the sandbox, it
    // changes nothing, and a required sandbox still confines.
    let text = loop_kdl(
        "agent bot timeout=\"30s\" {\n    run \"sh\" \"@AGENTS/hardening/reach.sh\" \"@STATE\" \"@REPO\"\n    env MVK_SANDBOX_UNSUPPORTED=\"1\"\n}\n",
        true,
        TESTS_GATE,
        "sandbox network=#false required=#true { env \"MVK_SANDBOX_UNSUPPORTED\"; }\n    budget iterations=1",
    );
    let f = Fixture::new(&text);
    let run = f.apply();
    run.expect_code(0);
    for denied in ["main-checkout", "main-git", "state", "pool", "signal-mvk"] {
        assert_eq!(
            attempt_said(&run, 1, denied),
            "denied",
            "{denied}\n{}",
            run.why()
        );
    }
    assert_eq!(attempt_said(&run, 1, "interfaces").trim(), "lo");
    let err = fs::read_to_string(run.attempt_dir(1).join("agent.err")).unwrap();
    assert!(!err.contains("mvk sandbox:"), "{err}");
}

/// What the agent of attempt N said about NAME.
fn attempt_said(run: &super::support::Run, attempt: u32, what: &str) -> String {
    let out = fs::read_to_string(run.attempt_dir(attempt).join("agent.out")).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{what}: ")))
        .unwrap_or_else(|| panic!("attempt {attempt} said nothing about {what}:\n{out}"))
        .to_string()
}

#[test]
fn a_sandboxed_agent_commits_but_cannot_touch_the_shared_objects_or_other_attempts_refs() {
    // The objects the history needs and the first attempt's branch are out of the second
    // attempt's reach; its own commits still land, through mvk.
    let f = hardening_fixture(
        "git_store.sh",
        &["@STATE", "@REPO"],
        "sandbox required=#true\n    budget iterations=2",
    );
    let run = f.apply();
    run.expect_code(0);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    let first = f.tip(&run.branch(1));
    for attempt in [1, 2] {
        for denied in ["delete-object", "rewrite-object", "plant-object"] {
            assert_eq!(
                attempt_said(&run, attempt, denied),
                "denied",
                "attempt {attempt}: {denied}\n{}",
                run.why()
            );
        }
        assert_eq!(attempt_said(&run, attempt, "commit"), "allowed");
    }
    for denied in [
        "earlier-ref",
        "earlier-ref-file",
        "earlier-reflog",
        "delete-earlier-ref",
    ] {
        assert_eq!(
            attempt_said(&run, 2, denied),
            "denied",
            "{denied}\n{}",
            run.why()
        );
    }
    // The first attempt's branch holds its own commit, as mvk recorded it.
    assert_eq!(
        f.show(&run.branch(1), "NOTES.md").as_deref(),
        Some("a note\n")
    );
    let recorded = run.named("agent.finished");
    assert_eq!(recorded.len(), 2, "{}", run.why());
    assert!(
        f.git(&["log", "--format=%s", &first])
            .contains("attempt 1: my own commit")
    );
    // Every object is whole, and the agent's commit is on its attempt's branch (what landed).
    let fsck = super::support::git_output(f.root(), &["fsck", "--full", "--strict"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    assert!(!f.root().join(".git/objects/ee/planted").exists());
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert!(
        f.git(&["log", "--format=%s", &run.branch(2)])
            .contains("attempt 2: my own commit"),
        "{}",
        run.why()
    );
    // What the agent wrote went to the attempt's own object directory, now emptied into the store.
    assert!(!run.attempt_dir(2).join("agent.objects").exists());
}

#[test]
fn a_gate_without_network_reaches_loopback_and_nothing_else() {
    // The test's own namespace is mvk's: the gate must be in another one.
    let host = fs::read_link("/proc/self/ns/net").unwrap();
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        &format!(
            "{TESTS_GATE}\n    gate loopback evidence=none {{ run \"sh\" \"@AGENTS/hardening/loopback.sh\" \"{}\"; }}",
            host.display()
        ),
        "sandbox network=#false required=#true\n    budget iterations=1",
    ));
    let run = f.apply();
    let log = fs::read_to_string(run.attempt_dir(1).join("gate-loopback.log")).unwrap_or_default();
    run.expect_code(0);
    assert!(log.contains("loopback: ping"), "{log}\n{}", run.why());
    assert!(log.contains("netns: own"), "{log}");
    assert!(log.contains("interfaces: lo\n"), "{log}");
    assert!(log.contains("outside: unreachable"), "{log}");
}

/// Runs a loop whose agent (tests/agents/hardening/SCRIPT) tampers with its worktree's git
/// links, after BEFORE prepared the fixture: the attempt fails for it and main does not move.
fn relinked(script: &str, before: impl FnOnce(&Fixture)) -> (Fixture, super::support::Run) {
    relinked_with(script, &[], before)
}

/// As [`relinked`], the agent given ARGS after the state directory and the repository. mvk runs
/// with its memory capped and a deadline: a link it reads the wrong way fails the test.
fn relinked_with(
    script: &str,
    args: &[&str],
    before: impl FnOnce(&Fixture),
) -> (Fixture, super::support::Run) {
    let mut all = vec!["@STATE", "@REPO"];
    all.extend_from_slice(args);
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", &format!("hardening/{script}"), &all),
        true,
        TESTS_GATE,
        "sandbox required=#true\n    budget iterations=1",
    ));
    before(&f);
    let run = f.apply_bounded(120);
    run.expect_code(3);
    let failed = run.one("attempt.failed");
    assert!(
        failed["detail"]["criterion"]
            .as_str()
            .unwrap()
            .contains("leaves its worktree's git links alone"),
        "{}",
        run.why()
    );
    assert_eq!(f.tip("main"), f.base);
    (f, run)
}

#[test]
fn an_agent_that_relinks_its_worktree_to_the_main_repository_fails_and_mvk_touches_nothing_there() {
    // The worktree's `.git` file is the agent's to write; mvk, unconfined, must not follow it
    // into the main checkout's index and HEAD when it records the attempt.
    let (f, run) = relinked("relink.sh", |_| {});
    assert_eq!(f.git(&["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
    assert_eq!(f.git(&["status", "--porcelain"]), "", "{}", run.why());
}

#[test]
fn an_agent_that_rewrites_its_worktree_registration_fails_and_mvk_puts_it_back() {
    // The worktree's `gitdir` file (in its own git directory, which the agent may write) says
    // where the worktree is: named the main checkout, mvk would stage and commit that.
    let (f, run) = relinked("relink_gitdir.sh", |f| {
        fs::write(f.root().join("private.txt"), "not for the branch").unwrap();
    });
    let listed = f.git(&["ls-tree", "-r", "--name-only", &run.branch(1)]);
    assert!(!listed.contains("private.txt"), "{listed}");
    // The registration leads to the slot again, not to the main checkout.
    let list = f.git(&["worktree", "list", "--porcelain"]);
    let main = fs::canonicalize(f.root()).unwrap();
    let worktrees: Vec<&str> = list
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .collect();
    assert_eq!(
        worktrees.iter().filter(|w| Path::new(w) == main).count(),
        1,
        "{list}"
    );
}

#[test]
fn an_agent_that_blocks_the_restore_of_its_links_fails_its_attempt_not_the_run() {
    // Regression: a directory where mvk wrote the restored link first (`gitdir.mvk-new`), or a
    // read-only git directory, made the restore an I/O error that ended the run (exit 70).
    let (f, _) = relinked("relink_blocked.sh", |_| {});
    // The slot is whole again: a second run uses it.
    let again = f.apply();
    again.expect_code(3);
}

/// Runs `relink_special.sh MODE`: the attempt fails for its links, and says what it found
/// there (SAID).
fn relinked_special(mode: &str, said: &str) {
    let (_, run) = relinked_with("relink_special.sh", &[mode], |_| {});
    let failed = run.one("attempt.failed");
    let criterion = failed["detail"]["criterion"].as_str().unwrap();
    assert!(criterion.contains(said), "{criterion}\n{}", run.why());
}

#[test]
fn a_git_link_replaced_by_a_symlink_to_dev_zero_fails_the_attempt_without_reading_it() {
    // Regression: mvk read the rewritten link whole to say where it led; /dev/zero has no end,
    // so mvk's memory grew until it died, and the run with it.
    relinked_special("zero", "/dev/zero");
}

#[test]
fn a_git_link_replaced_by_a_fifo_fails_the_attempt_without_blocking_mvk() {
    // Regression: opening a FIFO no one writes to blocks; mvk hung for ever, no budget firing.
    relinked_special("fifo", "FIFO");
}

#[test]
fn a_sparse_registration_of_gigabytes_fails_the_attempt_without_being_read_whole() {
    relinked_special("sparse", "a file of 8589934592 bytes");
}

#[test]
fn a_fifo_as_the_registrations_lock_file_fails_the_attempt_and_blocks_no_later_prune() {
    // Regression: libgit2 reads `locked` whole before it prunes a registration (a rebuild,
    // `mvk gc`): a FIFO there blocked mvk for ever (and a lock of any kind made the prune
    // fail). It is removed, as what it is, when the links are checked.
    let (f, run) = relinked_with("relink_special.sh", &["locked"], |_| {});
    let failed = run.one("attempt.failed");
    let criterion = failed["detail"]["criterion"].as_str().unwrap();
    assert!(criterion.contains("FIFO"), "{criterion}\n{}", run.why());
    let gc = f
        .mvk()
        .arg("gc")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(gc.status.success(), "{gc:?}");
}

#[test]
fn a_sparse_head_of_gigabytes_fails_the_attempt_and_the_slot_is_used_again() {
    // libgit2 reads a HEAD file whole: mvk refuses (and replaces) one that is no HEAD first.
    let (f, _) = relinked_with("relink_special.sh", &["head"], |_| {});
    let again = f.apply_bounded(120);
    again.expect_code(3);
}

#[test]
fn a_fifo_among_the_agents_loose_objects_does_not_block_mvk() {
    // Regression: libgit2 opened each loose object the agent's directory listed to read its
    // header, and a FIFO (or a symlink to one) blocked mvk for ever.
    let f = sandboxed_once("fifo_object.sh");
    let run = f.apply_bounded(120);
    run.expect_code(0);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

/// Loop `t` whose agent, sandboxed (required), runs `tests/agents/hardening/SCRIPT` once.
fn sandboxed_once(script: &str) -> Fixture {
    hardening_fixture(
        script,
        &[],
        "sandbox required=#true\n    budget iterations=1",
    )
}

/// Takes the immutable flag off everything under PATH, so the test's directory can go.
fn unpin(path: &Path) {
    let _ = std::process::Command::new("chattr")
        .args(["-R", "-f", "-i"])
        .arg(path)
        .status();
}

#[test]
fn objects_named_by_an_alternates_file_mvk_cannot_delete_are_never_read() {
    // Regression: mvk deleted the agent's `info` directory best effort; an immutable (or, as a
    // user that is not root, unwritable) `alternates` stayed, and libgit2 read objects from the
    // directory it named, which mvk had never checked. mvk now reads only the regular files
    // it copied out of the agent's reach.
    let f = sandboxed_once("alternates_pinned.sh");
    let run = f.apply_bounded(120);
    unpin(&run.dir);
    run.expect_code(0);
    let smuggled = std::process::Command::new("sh")
        .args(["-c", "echo 'smuggled past mvk' | git hash-object --stdin"])
        .output()
        .unwrap();
    let smuggled = String::from_utf8(smuggled.stdout).unwrap();
    let there = super::support::git_output(f.root(), &["cat-file", "-e", smuggled.trim()]);
    assert!(!there.status.success(), "{smuggled}\n{}", run.why());
    // The agent's own commit landed.
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

#[test]
fn a_sandboxed_agent_holds_no_privilege_even_when_mvk_is_root() {
    // Landlock confines paths, not privileges: a root agent could make a device node of the
    // disk in its worktree and write through it, or pin files mvk must delete (`chattr +i`).
    let f = sandboxed_once("privileged.sh");
    let run = f.apply_bounded(120);
    unpin(&run.dir);
    run.expect_code(0);
    assert_eq!(attempt_said(&run, 1, "mknod"), "denied", "{}", run.why());
    assert_eq!(attempt_said(&run, 1, "chattr"), "denied", "{}", run.why());
    assert_eq!(
        attempt_said(&run, 1, "capabilities"),
        "0000000000000000",
        "{}",
        run.why()
    );
}

#[test]
fn a_sandboxed_agent_cannot_ptrace_its_namespaces_init() {
    // Regression: the init shares the program's uid and Landlock domain, and was dumpable, so
    // where Yama does not forbid it (no Yama, `ptrace_scope` 0) the program could attach to its
    // PID 1 and act as it: leave the trampoline's group and outlive the namespace's end.
    let f = sandboxed_once("ptrace_init.sh");
    let run = f.apply_bounded(120);
    run.expect_code(0);
    let said = attempt_said(&run, 1, "ptrace-init");
    assert!(said.starts_with("denied"), "{said}\n{}", run.why());
}

/// `mvk apply loops/t.kdl` of F on a terminal (a pty from util-linux `script`, which makes it
/// the controlling terminal of mvk's session): what the agent of attempt 1 said about the
/// terminal, opened for reading and writing, then for reading.
fn tty_said_on_a_terminal(f: &Fixture) -> (String, String) {
    let mvk = assert_cmd::cargo::cargo_bin("mvk");
    let mut cmd = f.mvk_at(Path::new("script"));
    cmd.args([
        "-qec",
        &format!("'{}' apply loops/t.kdl", mvk.display()),
        "/dev/null",
    ]);
    let out = cmd.output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    // The fixture's one run (what the terminal showed mixes stdout with the progress).
    let run = fs::read_dir(f.root().join(".mvk/runs"))
        .unwrap_or_else(|e| panic!("no run ({e}):\n{shown}"))
        .flatten()
        .find(|e| e.path().is_dir())
        .unwrap_or_else(|| panic!("no run:\n{shown}"));
    let said = fs::read_to_string(run.path().join("t/1/agent.out"));
    let said = said.unwrap_or_else(|e| panic!("no agent.out ({e}):\n{shown}"));
    let line = |what: &str| {
        said.lines()
            .find_map(|l| l.strip_prefix(&format!("{what}: ")))
            .unwrap_or_else(|| panic!("the agent said nothing about {what}:\n{said}\n{shown}"))
            .to_string()
    };
    (line("tty-rw"), line("tty-read"))
}

#[test]
fn a_sandboxed_agent_cannot_type_into_the_terminal_mvk_runs_in() {
    // Regression: `/dev/tty` was granted with device ioctls, and the program shared mvk's
    // session: it could open its controlling terminal (the user's) and push `curl … | sh` into
    // its input with TIOCSTI, for the user's shell to run, unconfined, once mvk exits.
    let open = hardening_fixture("tty_inject.sh", &[], "budget iterations=1");
    let (rw, _) = tty_said_on_a_terminal(&open);
    assert!(rw.starts_with("opened"), "no terminal to test with: {rw}");
    let f = sandboxed_once("tty_inject.sh");
    let (rw, read) = tty_said_on_a_terminal(&f);
    for said in [&rw, &read] {
        assert!(
            !said.contains("TIOCSTI allowed"),
            "tty-rw: {rw}\ntty-read: {read}"
        );
    }
}

#[test]
fn a_slot_mvk_cannot_empty_fails_no_run() {
    // Regression: an agent that left a file mvk cannot delete (immutable; or, as a user that is
    // not root, in a directory without permissions) made its slot impossible to reset or
    // remove, and the rebuild's error ended the run (exit 70), and every later one.
    let f = hardening_fixture(
        "pinned_junk.sh",
        &[],
        "sandbox required=#true\n    budget iterations=2",
    );
    let run = f.apply_bounded(120);
    unpin(f.root());
    unpin(f.worktrees.path());
    run.expect_code(0);
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

#[test]
fn mvk_deletes_nothing_through_a_symlink_the_agent_planted_in_its_object_directory() {
    let f = hardening_fixture(
        "info_symlink.sh",
        &["@STATE"],
        "sandbox required=#true\n    budget iterations=1",
    );
    fs::create_dir_all(f.state("victim")).unwrap();
    fs::write(f.state("victim/alternates"), "keep me").unwrap();
    let run = f.apply();
    run.expect_code(0);
    assert_eq!(
        fs::read_to_string(f.state("victim/alternates")).unwrap(),
        "keep me"
    );
    // The agent's own commit still landed.
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert!(!run.attempt_dir(1).join("agent.objects").exists());
}

#[test]
fn an_object_over_the_size_limit_fails_the_attempt_not_the_run() {
    // A zip bomb: mvk reads each object's size from its header before inflating it.
    let f = sandboxed_once("object_bomb.sh");
    let run = f.apply();
    run.expect_code(3);
    let failed = run.one("attempt.failed");
    let criterion = failed["detail"]["criterion"].as_str().unwrap();
    assert!(
        criterion.contains("within mvk's limits") && criterion.contains("104857601 bytes"),
        "{}",
        run.why()
    );
    assert_eq!(f.tip("main"), f.base);
    // Nothing of it reached the shared store.
    let id = std::process::Command::new("sh")
        .args([
            "-c",
            "head -c 104857601 /dev/zero | git hash-object --stdin",
        ])
        .output()
        .unwrap();
    let id = String::from_utf8(id.stdout).unwrap();
    let there = super::support::git_output(f.root(), &["cat-file", "-e", id.trim()]);
    assert!(!there.status.success(), "{id}");
}

#[test]
fn a_small_delta_against_a_big_unlisted_base_fails_the_attempt() {
    // Regression: mvk checked each listed object's size from its header, which for a delta is
    // the size of what it makes, and then let libgit2 inflate the delta's 150 MiB base, which
    // the pack's index does not list, to make six bytes.
    let f = sandboxed_once("delta_bomb.sh");
    let run = f.apply();
    run.expect_code(3);
    let failed = run.one("attempt.failed");
    let criterion = failed["detail"]["criterion"].as_str().unwrap();
    // git lists every entry of a pack: a base the index does not list is refused as such,
    // before its size is even read (a listed one counts: see the test below).
    assert!(
        criterion.contains("within mvk's limits") && criterion.contains("its index does not list"),
        "{criterion}\n{}",
        run.why()
    );
    assert_eq!(f.tip("main"), f.base);
    // The delta's result reached no store.
    let there = super::support::git_output(
        f.root(),
        &["cat-file", "-e", "ac790413e2d7a26c3767e78c57bb28716686eebc"],
    );
    assert!(!there.status.success());
}

#[test]
fn many_small_deltas_against_one_listed_base_fail_the_attempt_by_what_their_reads_inflate() {
    // 600 deltas against one base of 60 MiB: every object is within the size limit and the
    // content is 60 MiB, but libgit2 inflates the base again for each delta it reads.
    let f = sandboxed_once("delta_fan.sh");
    let run = f.apply_bounded(300);
    run.expect_code(3);
    let failed = run.one("attempt.failed");
    let criterion = failed["detail"]["criterion"].as_str().unwrap();
    assert!(
        criterion.contains("within mvk's limits") && criterion.contains("inflate"),
        "{criterion}\n{}",
        run.why()
    );
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn a_delta_whose_base_is_only_in_the_shared_store_fails_the_attempt() {
    // Regression: such a base was charged its size only, while libgit2 rebuilds it from the
    // store's own chain of deltas at each read. git keeps no thin pack (it completes one it
    // receives), so mvk accepts none.
    let f = sandboxed_once("shared_base.sh");
    let run = f.apply();
    run.expect_code(3);
    let failed = run.one("attempt.failed");
    let criterion = failed["detail"]["criterion"].as_str().unwrap();
    assert!(
        criterion.contains("within mvk's limits") && criterion.contains("not in the pack"),
        "{criterion}\n{}",
        run.why()
    );
    assert_eq!(f.tip("main"), f.base);
    // The delta's result reached no store.
    let there = super::support::git_output(
        f.root(),
        &["cat-file", "-e", "768bc4982751f261b4003f0e5211a90e9e603865"],
    );
    assert!(!there.status.success());
}

#[test]
fn the_sandbox_scopes_abstract_sockets_but_not_socket_files() {
    // What the book says the sandbox does not confine: a socket file outside is reachable (the
    // systemd bus, tmux, Docker's socket are such files); an abstract socket is not (Landlock's
    // scope, ABI 6). The network is left on: abstract sockets belong to the network namespace,
    // and a new one would hide this one whatever Landlock does.
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("server.sock");
    let _by_file = UnixListener::bind(&file).unwrap();
    let name = format!("mvk-test-{}", std::process::id());
    let _abstract =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let probe = format!(
        r#"
import socket
for label, addr in (("file", "{}"), ("abstract", "\0{name}")):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(addr)
        print(label, "reached")
    except OSError as e:
        print(label, "refused", e.errno)
"#,
        file.display()
    );
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("mvk"))
        .args([
            "__sandbox",
            r#"{"write":[],"network":true,"required":true}"#,
            "--",
            "python3",
            "-c",
            &probe,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "file reached", "{text}");
    assert!(lines[1].starts_with("abstract refused"), "{text}");
}

/// Regression: a binary replaced during a run (`cargo install`, a rebuild) is `…/mvk (deleted)`
/// to `/proc/self/exe`, and mvk started its sandbox's trampoline (`EXE __sandbox …`) from that
/// path, which runs nothing: every agent and gate started after the replacement failed. mvk uses
/// the path it found at startup now, which runs the replacement, here for the gate after the
/// agent.
#[test]
fn a_sandboxed_run_outlives_the_replacement_of_its_mvk_binary() {
    let f = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "wait_fix.sh", &["@STATE"], "2m"),
        true,
        TESTS_GATE,
        "sandbox required=#true { write \"@STATE\"; }\n    budget iterations=1",
    ));
    let bin = tempfile::tempdir().unwrap();
    let exe = bin.path().join("mvk");
    fs::copy(assert_cmd::cargo::cargo_bin("mvk"), &exe).unwrap();
    let mut child = f
        .mvk_at(&exe)
        .args(["apply", "loops/t.kdl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !f.state("agent-started").exists() {
        if std::time::Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the agent did not start\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A new binary put in its place, as `cargo install` does: the running one's file is gone.
    let new = bin.path().join("mvk.new");
    fs::copy(assert_cmd::cargo::cargo_bin("mvk"), &new).unwrap();
    fs::rename(&new, &exe).unwrap();
    let seen = fs::read_link(format!("/proc/{}/exe", child.id())).unwrap();
    assert!(
        seen.to_string_lossy().ends_with(" (deleted)"),
        "{}",
        seen.display()
    );
    fs::write(f.state("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
}

#[test]
fn a_sandboxed_agents_escapee_dies_with_it_whatever_task_it_names() {
    // Task `a`'s sandboxed agent leaves a process in a session of its own whose MVK_TASK names
    // task `b`, which runs beside it the whole time: outside a PID namespace, `a`'s sweep took
    // it for `b`'s and spared it. In the sandbox's own namespace it dies when the agent exits:
    // `a`'s gate, run after the capture, finds it gone.
    let mut text = String::new();
    for (role, extra) in [
        ("attack", "\"attack\" \"b\""),
        ("honest", "\"honest\" \"@REPO\""),
    ] {
        text.push_str(&format!(
            "agent {role} timeout=\"60s\" {{ run \"sh\" \"@AGENTS/hardening/pidns_escapee.sh\" \"@STATE\" {extra}; }}\n"
        ));
    }
    text.push_str("flow t {\n    parallel 2\n");
    for (name, agent, gate) in [
        (
            "a",
            "attack",
            "gate gone evidence=none { sh \"test -s @STATE/escapee.pid && ! test -d /proc/$(cat @STATE/escapee.pid)\"; }",
        ),
        ("b", "honest", ""),
    ] {
        text.push_str(&format!(
            "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent {agent}\n        scope \"out/{name}.txt\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/$MVK_TASK.txt\"; }}\n        {gate}\n        sandbox required=#true {{ write \"@STATE\"; }}\n        budget iterations=1\n    }}\n"
        ));
    }
    text.push_str("}\n");
    let f = Fixture::new(&text);
    let run = f.apply();
    let pid = fs::read_to_string(f.state("escapee.pid")).unwrap_or_default();
    let alive = !pid.trim().is_empty() && Path::new("/proc").join(pid.trim()).exists();
    if alive {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status();
    }
    assert!(!alive, "the escapee outlived the attempt\n{}", run.why());
    run.expect_code(0);
    assert_eq!(f.show("main", "out/a.txt").as_deref(), Some("done\n"));
}

/// The lessons file is outside the worktree, yet a confined agent may write it (and only it,
/// of what lies outside its worktree besides its own temporary directory).
#[test]
fn a_sandboxed_agent_writes_its_lessons() {
    let agent = r#"agent bot timeout="30s" { sh "printf 'SANDBOXED-LESSON-4f\n' >> \"$MVK_LESSONS_FILE\" && printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh"; }"#;
    let f = Fixture::new(&loop_kdl(
        agent,
        true,
        TESTS_GATE,
        "sandbox network=#false required=#true\n    budget iterations=1",
    ));
    let run = f.apply();
    run.expect_code(0);
    let learned = run.one("lessons.learned");
    assert_eq!(learned["detail"]["author"], "maker", "{}", run.why());
}
