//! The rest of the tamper corpus (the seal's edit, delete, rename, chmod, symlink and commit
//! cases are in `apply.rs`): every attack below is rejected, and nothing of it lands.

use super::apply::{breaches_of_the_test, tampering, unknown_evidence, unknown_evidence_kept};
use super::support::{
    FIXED, Fixture, TEST_CALC, TESTS_GATE, agent_def, assert_gone, assert_main_unchanged,
    hardening_fixture, loop_kdl,
};

#[test]
fn seal_refuses_a_test_edited_through_a_hard_link() {
    tampering("hardlink", &["modified"]);
}

#[test]
fn seal_refuses_an_edit_of_the_gates_own_script() {
    // The gate runs checks/no_secret.sh, sealed with the tests; the agent makes it pass always.
    let defs = agent_def("bot", "tamper.sh", &["gate-script"]);
    let text = loop_kdl(
        &defs,
        true,
        r#"gate tests { run "sh" "checks/no_secret.sh"; }"#,
        "seal \"checks/**\"\n    budget iterations=1",
    )
    .replace("seal \"tests/**\"\n", "");
    let f = Fixture::new(&text);
    let run = f.apply();
    run.expect_code(1);
    run.none("gate.finished");
    let breaches = &run.one("seal.breached")["detail"]["breaches"];
    assert_eq!(breaches[0]["path"], "checks/no_secret.sh", "{}", run.why());
    assert_main_unchanged(&f, &run);
}

#[test]
fn evidence_printed_by_the_agent_is_not_the_gates() {
    // The agent searches all it can reach for the gate's nonce and forges evidence with every
    // candidate, printed and committed for the gate to replay; the gate shows its nonce. The
    // verdict stays unknown because the nonce was nowhere the agent could look.
    let (_fixture, run) = unknown_evidence_kept(
        "hardening/forge.sh",
        "@AGENTS/hardening/replay_gate.sh",
        "budget iterations=1",
    );
    assert_eq!(run.attempts(), [1], "{}", run.why());
    let agent = std::fs::read_to_string(run.attempt_dir(1).join("agent.out")).unwrap();
    let gate = std::fs::read_to_string(run.attempt_dir(1).join("gate-tests.log")).unwrap();
    let nonce = gate
        .lines()
        .find_map(|l| l.strip_prefix("gate nonce: "))
        .unwrap_or_else(|| panic!("the gate did not show its nonce:\n{gate}"));
    assert_eq!(nonce.len(), 32, "{gate}");
    let candidates: usize = agent
        .lines()
        .find_map(|l| l.strip_prefix("candidates: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the agent did not search:\n{agent}"));
    assert!(candidates > 0, "the agent found nothing to try:\n{agent}");
    // The forgeries reached the gate's own log, and none of them carried the gate's nonce.
    assert!(
        gate.matches("MVK_EVIDENCE=").count() >= candidates,
        "{gate}"
    );
    assert!(
        !agent.contains(nonce),
        "the agent found the nonce:\n{agent}"
    );
    assert!(
        agent.contains("env: ") && agent.contains("MVK_RUN="),
        "{agent}"
    );
}

#[test]
fn zero_tests_collected_by_a_runner_is_unknown() {
    let run = unknown_evidence("fix.sh", "checks/zero_cargo.sh", "budget iterations=1");
    let failed = run.one("attempt.failed");
    assert_eq!(failed["detail"]["kind"], "unknown", "{}", run.why());
}

#[test]
fn writes_outside_the_worktree_without_a_sandbox_never_land() {
    // Without a sandbox the writes happen (same user); the gates run in the attempt's own
    // checkout, and what lands is the attempt's commit, so the main checkout's forged test
    // changes no verdict and enters no commit.
    let f = hardening_fixture("outside.sh", &["@STATE", "@REPO"], "budget iterations=1");
    let run = f.apply();
    assert_eq!(
        f.show("main", "tests/test_calc.sh").as_deref(),
        Some(TEST_CALC),
        "{}",
        run.why()
    );
    let landed = f.git(&["log", "--format=%H", &format!("{}..main", f.base)]);
    for commit in landed.lines() {
        let files = f.git(&["show", "--name-only", "--format=", commit]);
        assert!(!files.contains("tests/"), "{files}\n{}", run.why());
    }
    // The honest fix lands; the forged file stays what it is, an uncommitted change in the
    // main checkout that `git status` shows (with a sandbox the write is refused).
    run.expect_code(0);
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert!(
        f.git(&["status", "--porcelain"])
            .contains(" M tests/test_calc.sh"),
        "{}",
        run.why()
    );
}

/// Agent SCRIPT signals mvk's process group on its first call and fixes the bug: mvk does not
/// stop, rejects that attempt for the signals it counted, and lands the second.
fn a_signalling_agent_is_rejected(script: &str) -> super::support::Run {
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", script, &["@STATE"]),
        true,
        TESTS_GATE,
        "budget iterations=2",
    ));
    let run = f.apply();
    run.expect_code(0);
    assert!(f.state("signalled").exists());
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    let signalled = run.one("agent.signalled-mvk");
    assert_eq!(signalled["attempt"], 1, "{}", run.why());
    let failed = run.one("attempt.failed");
    assert_eq!(failed["detail"]["kind"], "agent", "{}", run.why());
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    run
}

#[test]
fn an_agent_that_signals_mvks_process_group_is_rejected_and_mvk_goes_on() {
    // Without a sandbox the signal arrives (with one, Landlock refuses it: see sandbox.rs); mvk
    // sees that its own agent sent it, does not stop, and rejects the attempt.
    a_signalling_agent_is_rejected("hardening/signal_mvk.sh");
}

#[test]
fn an_agent_that_signals_mvk_and_exits_at_once_is_rejected_and_mvk_goes_on() {
    // The sender (a child of the agent) and the agent are gone before mvk can look them up:
    // what decides is the sender the kernel recorded at delivery, against the processes mvk
    // started, never a lookup that finds nothing and takes it for a person's Ctrl-C.
    let run = a_signalling_agent_is_rejected("hardening/signal_and_exit.sh");
    let signalled = run.one("agent.signalled-mvk");
    assert_eq!(signalled["detail"]["signals"], 1, "{}", run.why());
}

#[test]
fn a_gate_that_signals_mvk_rejects_the_attempt_and_mvk_goes_on() {
    // Gates run the agent's code; a gate that turns on mvk is ignored, and its green verdict
    // does not count.
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        r#"gate tests { run "sh" "@AGENTS/hardening/signal_gate.sh"; }"#,
        "budget iterations=1",
    ));
    let run = f.apply();
    assert_eq!(run.one("gate.finished")["detail"]["verdict"], "pass");
    assert_eq!(
        run.one("gate.signalled-mvk")["detail"]["gate"],
        "tests",
        "{}",
        run.why()
    );
    run.none("attempt.passed");
    // The run went on to its end (not 130, as a person's stop): its one attempt spent.
    run.expect_code(3);
    assert_eq!(f.tip("main"), f.base);
}

/// Starts `mvk apply` on a slow agent, lets SEND signal it, and checks that mvk stopped: it
/// stops every process it started and exits 130.
fn stopped_from_outside(send: impl FnOnce(u32)) {
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "slow.sh", &["@STATE"]),
        true,
        TESTS_GATE,
        "budget iterations=2",
    ));
    let child = f
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    send(child.id());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("stopped by SIG"), "{err}");
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn a_signal_from_outside_still_stops_mvk() {
    // A person's `kill` is obeyed, from mvk's parent as from a shell that is no kin of mvk's.
    stopped_from_outside(|pid| {
        let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    });
    stopped_from_outside(|pid| {
        // The shell (its builtin `kill`) stays alive a moment while mvk places it.
        let status = std::process::Command::new("sh")
            .args(["-c", &format!("kill -TERM {pid}; sleep 1")])
            .status()
            .unwrap();
        assert!(status.success());
    });
}

/// An agent that hides its edit of a sealed test from git (`git update-index --assume-unchanged`
/// or `--skip-worktree`) and fixes nothing: the hidden edit is not what is judged. Either the
/// capture commits it and the seal refuses it, or it is left out and the gate runs the real test
/// on a clean checkout, which fails; the attempt never passes and nothing lands.
#[test]
fn a_sealed_edit_hidden_by_index_flags_does_not_pass() {
    for flag in ["assume-unchanged", "skip-worktree"] {
        let defs = agent_def("bot", "hide_tamper.sh", &[flag]);
        let f = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=1"));
        let run = f.apply();
        run.none("attempt.passed");
        assert_ne!(run.code, 0, "{flag}: {}", run.why());
        assert_main_unchanged(&f, &run);
        assert_eq!(
            f.show("main", "tests/test_calc.sh").as_deref(),
            Some(TEST_CALC),
            "{flag}"
        );
    }
}

#[test]
fn a_signal_mvk_cannot_place_rejects_no_sibling_tasks_attempt() {
    // Task `a`'s agent has a process mvk cannot place signal mvk while task `b`'s honest agent
    // runs: with two attempts open it is no one's, so `b` is not rejected for it (and the run,
    // not stopped, lands both).
    let text = side_flow(
        "signal_sibling.sh",
        2,
        &[("a", "attack", ""), ("b", "honest", "")],
        &[("attack", "\"attack\""), ("honest", "\"honest\"")],
    );
    let f = Fixture::new(&text);
    let run = f.apply();
    assert!(
        f.state("sent").exists(),
        "the signal was sent\n{}",
        run.why()
    );
    run.none("agent.signalled-mvk");
    run.expect_code(0);
    assert_eq!(f.show("main", "out/b.txt").as_deref(), Some("done\n"));
}

/// A flow of TASKS, each `(name, agent, extra lines)`, every agent running SCRIPT with the state
/// directory and its own ARGS; each task writes `out/NAME.txt`, which its gate checks.
fn side_flow(
    script: &str,
    parallel: u32,
    tasks: &[(&str, &str, &str)],
    args: &[(&str, &str)],
) -> String {
    let mut text = String::new();
    for (role, extra) in args {
        text.push_str(&format!(
            "agent {role} timeout=\"60s\" {{ run \"sh\" \"@AGENTS/hardening/{script}\" \"@STATE\" {extra}; }}\n"
        ));
    }
    text.push_str(&format!("flow t {{\n    parallel {parallel}\n"));
    for (name, agent, extra) in tasks {
        text.push_str(&format!(
            "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent {agent}\n        scope \"out/{name}.txt\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/$MVK_TASK.txt\"; }}\n        budget iterations=1\n        {extra}\n    }}\n"
        ));
    }
    text.push_str("}\n");
    text
}

#[test]
fn an_escapee_naming_a_task_that_is_not_going_is_killed_by_its_own_tasks_sweep() {
    // Task `a`'s agent orphans a process whose MVK_TASK names a task not in the run (`ghost`),
    // or one already over (`first`): no sweep of those will ever come, so the name must not
    // spare it. Left alive, it would signal mvk while `b`'s honest agent is the one attempt
    // open, and get `b` rejected.
    for spoofed in ["ghost", "first"] {
        let attack = format!("\"attack\" \"{spoofed}\"");
        let text = side_flow(
            "spoof_task.sh",
            1,
            &[
                ("first", "first", ""),
                ("a", "attack", "after first"),
                ("b", "honest", "after a"),
            ],
            &[
                ("first", "\"first\""),
                ("attack", &attack),
                ("honest", "\"honest\""),
            ],
        );
        let f = Fixture::new(&text);
        let run = f.apply();
        assert_gone(&f.state("escapee.pid"), &run);
        assert!(
            !f.state("sent").exists(),
            "{spoofed}: the escapee lived to signal mvk\n{}",
            run.why()
        );
        // Killed in `a`'s sweep (with the `sleep` it may be waiting on).
        let killed = run
            .named("agent.finished")
            .into_iter()
            .find(|e| e["task"] == "a")
            .and_then(|e| e["detail"]["escaped_killed"].as_u64());
        assert!(killed >= Some(1), "{spoofed}: {}", run.why());
        run.none("agent.signalled-mvk");
        run.expect_code(0);
        assert_eq!(f.show("main", "out/b.txt").as_deref(), Some("done\n"));
    }
}

#[test]
fn a_siblings_escapee_is_left_to_its_own_tasks_sweep() {
    // Task `leaver`'s agent orphans a process (its own MVK_TASK inherited) and outlasts task
    // `other`'s agent: `other`'s sweep leaves it alone, `leaver`'s ends it and counts it.
    let text = side_flow(
        "sibling_escapee.sh",
        2,
        &[("leaver", "leave", ""), ("other", "other", "")],
        &[
            ("leave", "\"leave\" \"@REPO\""),
            ("other", "\"other\" \"@REPO\""),
        ],
    );
    let f = Fixture::new(&text);
    let run = f.apply();
    run.expect_code(0);
    assert_gone(&f.state("escapee.pid"), &run);
    let killed = |task: &str| {
        run.named("agent.finished")
            .into_iter()
            .filter(|e| e["task"] == task)
            .map(|e| e["detail"]["escaped_killed"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(killed("other"), [0], "{}", run.why());
    assert_eq!(killed("leaver"), [1], "{}", run.why());
}

/// `mvk apply` of a loop whose agent fixes the bug, with MERGE (its landing's gates).
fn fixed_with_merge(merge: &str) -> (Fixture, super::support::Run) {
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        TESTS_GATE,
        merge,
    ));
    let run = f.apply();
    (f, run)
}

#[test]
fn a_process_escaped_from_an_after_merge_gate_does_not_outlive_the_run() {
    // The landing's gates run the merged code: what escapes them is swept after each, as after
    // an attempt's gates (before, it named a task that was still going, and no sweep came
    // after the last task's landing). The gate waits until its escapee has said who it is.
    let (f, run) = fixed_with_merge(
        "merge {\n        gate post evidence=none { sh \"(setsid sh -c 'echo $$ > @STATE/escapee.pid.new; mv @STATE/escapee.pid.new @STATE/escapee.pid; sleep 2; touch @STATE/escaped' </dev/null >/dev/null 2>&1 &); i=0; while [ ! -e @STATE/escapee.pid ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done\"; }\n    }",
    );
    run.expect_code(0);
    // The escapee would have touched its marker 2 s after the gate ended.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert!(!f.state("escaped").exists(), "{}", run.why());
    assert_gone(&f.state("escapee.pid"), &run);
}

#[test]
fn a_reviewer_that_signals_mvk_gives_no_verdict_and_nothing_lands() {
    // The reviewer may run the change's code: its signals are counted in a window of its own,
    // and its approval is not taken (before, they were no one's and the approval landed).
    let defs = format!(
        "{}{}",
        agent_def("bot", "fix.sh", &[]),
        agent_def("rev", "reviewer.sh", &["@STATE", "signal-then-approve"])
    );
    let f = Fixture::new(&loop_kdl(
        &defs,
        true,
        TESTS_GATE,
        "review agent=rev rounds=0\n    budget iterations=1",
    ));
    let run = f.apply();
    assert_eq!(
        run.one("review.signalled-mvk")["detail"]["signals"],
        1,
        "{}",
        run.why()
    );
    assert_eq!(run.one("review.finished")["detail"]["verdict"], "unknown");
    run.none("agent.signalled-mvk");
    assert_ne!(run.code, 130, "{}", run.why());
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn an_after_merge_gate_that_signals_mvk_keeps_main_where_it_was() {
    // The landing gates run the merged code: a gate that signals mvk is counted in the
    // landing's own window, and its green verdict does not land the change.
    let (f, run) = fixed_with_merge(
        "merge {\n        gate post { run \"sh\" \"@AGENTS/hardening/signal_gate.sh\"; }\n    }",
    );
    let signalled = run.one("gate.signalled-mvk");
    assert_eq!(signalled["detail"]["gate"], "post", "{}", run.why());
    assert_eq!(signalled["detail"]["landing"], true);
    run.expect_code(1);
    assert_eq!(f.tip("main"), f.base);
}

#[test]
fn a_head_naming_a_siblings_branch_keeps_no_one_from_it() {
    // Task `a`'s agent writes its worktree's HEAD to name the branch of task `b`'s second
    // attempt: mvk reads who holds a branch from its own lease records, so that attempt gets
    // its branch, is captured and lands; `a` ends on what it did (nothing: its gate fails).
    let mut text = String::new();
    for role in ["attack", "honest"] {
        text.push_str(&format!(
            "agent {role} timeout=\"60s\" {{ run \"sh\" \"@AGENTS/hardening/plant_head.sh\" \"@STATE\" \"{role}\"; }}\n"
        ));
    }
    text.push_str("flow t {\n    parallel 2\n");
    for (name, agent, tries) in [("a", "attack", 1), ("b", "honest", 2)] {
        text.push_str(&format!(
            "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent {agent}\n        scope \"out/{name}.txt\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/$MVK_TASK.txt\"; }}\n        budget iterations={tries}\n    }}\n"
        ));
    }
    text.push_str("}\n");
    let f = Fixture::new(&text);
    let run = f.apply();
    assert!(f.state("planted").exists(), "{}", run.why());
    assert_eq!(
        f.show("main", "out/b.txt").as_deref(),
        Some("done\n"),
        "{}",
        run.why()
    );
    run.expect_code(3);
}

#[test]
fn an_index_entry_naming_a_blob_that_was_never_written_is_ignored_and_the_file_lands_whole() {
    // The agent's index names a blob for a new file without the blob existing; git sees the
    // file as unchanged. Captured from that index, the tree would name a missing object and,
    // landed, break the branch for every later checkout. Capture stages from mvk's own copy
    // of the index instead, so the file is hashed like any other and lands whole.
    let f = hardening_fixture("phantom_blob.sh", &[], "budget iterations=1");
    let run = f.apply();
    run.expect_code(0);
    assert_eq!(
        f.show("main", "notes.txt").as_deref(),
        Some("a note whose blob is nowhere\n"),
        "{}",
        run.why()
    );
    // Every branch is whole: no tree names a missing object.
    let missing = f.git(&["rev-list", "--objects", "--all", "--missing=print"]);
    assert!(!missing.lines().any(|l| l.starts_with('?')), "{missing}");
    let fsck = super::support::git_output(f.root(), &["fsck", "--no-progress"]);
    assert!(
        fsck.status.success(),
        "{}",
        String::from_utf8_lossy(&fsck.stderr)
    );
}

#[test]
fn a_nest_of_processes_deeper_than_the_sweeps_rounds_does_not_outlive_the_attempt() {
    // Regression: the sweep of escaped processes gave up after 16 rounds, and killing a
    // process hands mvk only its children: past the attempt's sweeps (3 × 16 rounds), the rest
    // of a nest of processes, each in a session of its own, lived on (as would a chain that
    // forks faster than a scan of /proc finds it).
    let f = hardening_fixture("fork_chain.sh", &["@STATE"], "budget iterations=1");
    let run = f.apply_bounded(120);
    let chain = f.state("chain");
    let grown = || std::fs::metadata(&chain).map(|m| m.len()).unwrap_or(0);
    let before = grown();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let after = grown();
    std::fs::write(f.state("stop"), "").unwrap();
    run.expect_code(0);
    assert!(before > 0, "the nest was never built\n{}", run.why());
    assert_eq!(
        before,
        after,
        "the nest outlived the attempt\n{}",
        run.why()
    );
}

#[test]
fn an_escapee_that_joins_the_group_of_mvks_parent_does_not_take_it_down() {
    // The sweep kills an escapee's whole process group, but only a group all of whose members
    // descend from mvk: one joined to the group of mvk's parent (here the test harness) must
    // not take that group with it.
    let f = hardening_fixture("join_parent_group.sh", &["@STATE"], "budget iterations=1");
    let run = f.apply_bounded(120);
    run.expect_code(0);
    let refused = std::fs::read_to_string(f.state("refused")).unwrap_or_default();
    assert!(f.state("joined").exists(), "{refused}\n{}", run.why());
}

#[test]
fn an_escapee_that_joins_a_running_siblings_gate_group_dies_in_its_own_tasks_sweep() {
    // Regression: an adopted process in the process group of a gate mvk ran was spared as a
    // part of that gate. Task `a`'s agent leaves a process that joins the group of task `b`'s
    // gate (still running: the same session lets it) and names `a`: `a`'s sweep after its agent
    // spared it, and `a`'s gate, run after the capture, found it alive.
    let mut text = String::new();
    for role in ["attack", "honest"] {
        text.push_str(&format!(
            "agent {role} timeout=\"60s\" {{ run \"sh\" \"@AGENTS/hardening/join_gate_group.sh\" \"@STATE\" \"{role}\"; }}\n"
        ));
    }
    text.push_str("flow t {\n    parallel 2\n");
    for (name, agent, gate) in [("a", "attack", "gone"), ("b", "honest", "hold")] {
        text.push_str(&format!(
            "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent {agent}\n        scope \"out/{name}.txt\"\n        gate {gate} evidence=none {{ run \"sh\" \"@AGENTS/hardening/join_gate_group.sh\" \"@STATE\" \"{gate}\"; }}\n        budget iterations=1\n    }}\n"
        ));
    }
    text.push_str("}\n");
    let f = Fixture::new(&text);
    let run = f.apply_bounded(120);
    let pid = std::fs::read_to_string(f.state("escapee.pid")).unwrap_or_default();
    let alive = !pid.trim().is_empty() && std::path::Path::new("/proc").join(pid.trim()).exists();
    if alive {
        let _ = std::process::Command::new("kill")
            .args(["-9", pid.trim()])
            .status();
    }
    assert!(!pid.trim().is_empty(), "no escapee\n{}", run.why());
    run.expect_code(0);
    assert!(!alive, "the escapee outlived the run\n{}", run.why());
}

#[test]
fn escapees_that_outlast_the_sweep_fail_the_attempt_before_capture_and_gates() {
    // A chain of processes, each in a session of its own, that starts the next and exits: with
    // the sweep's time limit at nothing (the test hook), escapees are still appearing when it
    // passes. The attempt fails closed (nothing captured, no gate run, nothing landed), and
    // the next attempt is told why.
    let f = hardening_fixture("fast_chain.sh", &["@STATE"], "budget iterations=2");
    let run = f.apply_with(&[], &[("MVK_TEST_SWEEP_LIMIT_MS", "0")]);
    std::fs::write(f.state("stop"), "").unwrap();
    assert!(f.state("chain").exists(), "no chain\n{}", run.why());
    // The same failure twice: stuck.
    run.expect_code(2);
    assert_main_unchanged(&f, &run);
    run.none("gate.finished");
    let failed = run.named("attempt.failed");
    assert_eq!(failed.len(), 2, "{}", run.why());
    for e in &failed {
        let criterion = e["detail"]["criterion"].as_str().unwrap_or_default();
        assert!(
            criterion.contains("leaves no process running"),
            "{criterion}\n{}",
            run.why()
        );
    }
    let prompt = std::fs::read_to_string(run.attempt_dir(2).join("prompt.md")).unwrap();
    assert!(prompt.contains("leaves no process running"), "{prompt}");
    // The slot the chain may still run in never goes back to the pool: attempt 2 is checked
    // out in another one.
    let worktrees: Vec<&str> = run
        .named("attempt.started")
        .iter()
        .filter_map(|e| e["detail"]["worktree"].as_str())
        .collect();
    assert_eq!(worktrees.len(), 2, "{}", run.why());
    assert_ne!(worktrees[0], worktrees[1], "{}", run.why());
}

/// Runs `tamper_later.sh MODE` with two iterations: the first attempt's gate fails, and the
/// second, on the slot mvk reset in place (its index written after every file, so the stat data
/// of each entry is what tells a change), touches the sealed test. The seal refuses it with one
/// of KINDS, and nothing lands.
fn tampering_on_a_warm_slot(mode: &str, kinds: &[&str]) {
    let defs = agent_def("bot", "tamper_later.sh", &[mode]);
    let f = Fixture::new(&loop_kdl(&defs, true, TESTS_GATE, "budget iterations=2"));
    let run = f.apply();
    run.expect_code(1);
    assert_main_unchanged(&f, &run);
    let failed = run.named("attempt.failed");
    assert_eq!(failed.len(), 2, "{}", run.why());
    assert_eq!(failed[0]["detail"]["kind"], "gate", "{}", run.why());
    assert_eq!(failed[1]["detail"]["kind"], "seal", "{}", run.why());
    breaches_of_the_test(&run, kinds);
}

#[test]
fn seal_refuses_a_same_size_edit_whose_modification_time_was_put_back() {
    tampering_on_a_warm_slot("same-size-old-mtime", &["modified"]);
}

#[test]
fn seal_refuses_a_mode_change_alone_on_a_warm_slot() {
    tampering_on_a_warm_slot("mode", &["mode_changed"]);
}

#[test]
fn seal_refuses_a_test_replaced_by_a_symlink_on_a_warm_slot() {
    tampering_on_a_warm_slot("symlink", &["symlink_replaced"]);
}
