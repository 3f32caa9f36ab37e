//! Budgets held inside an attempt: an agent that reports its usage as it goes
//! (`tests/agents/spender.sh`, $0.10 and 1000 tokens more every 0.2 s, without end) is stopped
//! within one report of the task's or the flow's budget, its spending recorded as it reported
//! it, its change kept on its branch and never judged or landed; one under its budget runs to
//! its end.

#![allow(clippy::unwrap_used)]

use std::fs;

use serde_json::Value;

use crate::support::{
    Fixture, Run, TESTS_GATE, agent_def, agent_def_timeout, assert_main_unchanged, loop_kdl,
};

/// The last `MVK_USAGE` line of an attempt's agent output: what it reported before it ended.
fn last_report(run: &Run, attempt: u32) -> Value {
    let out = fs::read_to_string(run.attempt_dir(attempt).join("agent.out")).unwrap();
    let line = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("MVK_USAGE="))
        .unwrap_or_else(|| panic!("no usage reported\n{}", run.why()));
    serde_json::from_str(line).unwrap()
}

fn micros(usd: &Value) -> u64 {
    (usd.as_f64().unwrap() * 1e6).round() as u64
}

#[test]
fn a_runaway_agent_is_stopped_within_one_usage_report_of_the_task_budget() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "spender.sh", &["fix"], "60s"),
        true,
        TESTS_GATE,
        "budget usd=0.35 iterations=5",
    ));
    let run = fixture.apply_bounded(60);
    run.expect_code(3);
    // Stopped on the report that spent it ($0.40 of $0.35), not at the agent's timeout.
    let stopped = run.one("agent.stopped");
    assert_eq!(stopped["detail"]["budget"], "usd", "{}", run.why());
    assert_eq!(stopped["detail"]["spent"], 400_000, "{}", run.why());
    assert_eq!(stopped["detail"]["limit"], 350_000, "{}", run.why());
    // What it spent is recorded as it reported it, to the micro-dollar and the token.
    let last = last_report(&run, 1);
    let finished = &run.one("agent.finished")["detail"];
    assert_eq!(
        micros(&finished["usd"]),
        micros(&last["usd"]),
        "{}",
        run.why()
    );
    let tokens = last["input_tokens"].as_u64().unwrap() + last["output_tokens"].as_u64().unwrap();
    assert_eq!(finished["tokens"], tokens, "{}", run.why());
    assert!(
        micros(&last["usd"]) <= 450_000,
        "more than one report past the budget: {last}\n{}",
        run.why()
    );
    // Never judged, never landed; the change waits on the attempt's branch, and the task ends
    // on its budget.
    run.none("gate.finished");
    assert_eq!(run.attempts(), [1], "{}", run.why());
    assert_main_unchanged(&fixture, &run);
    assert!(
        fixture
            .show(&run.branch(1), "src/calc.sh")
            .is_some_and(|c| c.contains("$1 + $2")),
        "{}",
        run.why()
    );
    let exhausted = run.one("budget.exhausted");
    assert_eq!(exhausted["detail"]["budget"], "usd", "{}", run.why());
    let task = run.one("task.finished");
    assert_eq!(task["detail"]["outcome"], "budget", "{}", run.why());
}

#[test]
fn a_tokens_budget_stops_the_agent_too() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "spender.sh", &["fix"], "60s"),
        true,
        TESTS_GATE,
        "budget tokens=2500",
    ));
    let run = fixture.apply_bounded(60);
    run.expect_code(3);
    let stopped = &run.one("agent.stopped")["detail"];
    assert_eq!(stopped["budget"], "tokens", "{}", run.why());
    assert_eq!(stopped["spent"], 3000, "{}", run.why());
    run.none("gate.finished");
}

#[test]
fn an_agent_under_its_budget_is_never_stopped() {
    // Three reports, $0.30 in all, against $0.35: it finishes, passes and lands.
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "spender.sh", &["fix", "3"]),
        true,
        TESTS_GATE,
        "budget usd=0.35",
    ));
    let run = fixture.apply_bounded(60);
    run.expect_code(0);
    run.none("agent.stopped");
    assert_eq!(
        micros(&run.one("agent.finished")["detail"]["usd"]),
        300_000,
        "{}",
        run.why()
    );
    // Its spending was shown while it ran.
    assert!(!run.named("agent.spending").is_empty(), "{}", run.why());
}

#[test]
fn a_flows_usd_is_shared_and_stops_every_running_agent_when_spent() {
    let mut text = "agent spender timeout=\"60s\" { run \"sh\" \"@AGENTS/spender.sh\" \"out\"; }\n"
        .to_string();
    text.push_str("flow t {\n    parallel 3\n    budget usd=1.0\n");
    for name in ["a", "b", "c"] {
        text.push_str(&crate::flows::task(
            name,
            "spender",
            &format!("out/{name}.txt"),
            "",
        ));
    }
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    // The three spend side by side: none starts spending before all have started.
    let started = fixture.state("started");
    fs::create_dir_all(&started).unwrap();
    let run = fixture.apply_with(
        &[],
        &[
            ("SPENDERS_DIR", started.to_str().unwrap()),
            ("SPENDERS", "3"),
        ],
    );
    run.expect_code(3);
    let stopped = run.named("agent.stopped");
    assert_eq!(stopped.len(), 3, "every running agent stops\n{}", run.why());
    for e in &stopped {
        assert_eq!(e["detail"]["budget"], "flow usd", "{}", run.why());
    }
    // Together they spent at least the flow's dollar, and at most one report more per agent
    // (each may have printed one as the brake was pulled).
    let spent: u64 = run
        .named("agent.finished")
        .iter()
        .map(|e| micros(&e["detail"]["usd"]))
        .sum();
    assert!(
        (1_000_000..=1_300_000).contains(&spent),
        "spent {spent}\n{}",
        run.why()
    );
    for name in ["a", "b", "c"] {
        assert!(
            fixture.show("main", &format!("out/{name}.txt")).is_none(),
            "{}",
            run.why()
        );
    }
    assert_eq!(run.named("attempt.started").len(), 3, "{}", run.why());
}

#[test]
fn a_run_killed_after_a_stopped_agent_was_recorded_never_judges_it_on_resume() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "spender.sh", &["fix"], "60s"),
        true,
        TESTS_GATE,
        "budget usd=0.35 iterations=5",
    ));
    let crashed = fixture.apply_with(&[], &[("MVK_FAILPOINT", "agent-recorded")]);
    assert_ne!(crashed.code, 0, "{}", crashed.why());
    let resumed = fixture.run_mvk(&["resume", &crashed.id], &[]);
    resumed.expect_code(3);
    resumed.none("gate.finished");
    assert_main_unchanged(&fixture, &resumed);
    let task = resumed.named("task.finished");
    assert_eq!(
        task.last().unwrap()["detail"]["outcome"],
        "budget",
        "{}",
        resumed.why()
    );
}

#[test]
fn a_budget_warns_at_its_fraction_while_the_agent_runs_and_status_shows_the_spending() {
    // $0.10 a report against usd=1.0 warn-at=0.5: the warning is written on the fifth report,
    // while the agent runs, and heard by a notification that names no fraction of its own; the
    // cap stops the agent on the tenth.
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "spender.sh", &["fix"], "60s"),
        true,
        TESTS_GATE,
        "budget usd=1.0 iterations=5 warn-at=0.5\n    notify desk on=\"budget\" {\n        run \"sh\" \"@AGENTS/notify_record.sh\" \"@STATE/desk\" \"{{budget}}\" \"{{spent}}\" \"{{at}}\"\n    }",
    ));
    let child = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the agent runs, `mvk status` counts what it has spent so far.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = None;
    while seen.is_none() && std::time::Instant::now() < deadline {
        let out = fixture.mvk().args(["status", "--json"]).output().unwrap();
        if let Ok(doc) = serde_json::from_slice::<Value>(&out.stdout) {
            let task = &doc["tasks"][0];
            let usd = task["spent"]["usd_micros"].as_u64().unwrap_or(0);
            if task["state"] == "running" && usd > 0 {
                seen = Some((usd, task["limits"]["usd_micros"].clone()));
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let run = fixture.run_of(&out, false);
    run.expect_code(3);
    let (usd, limit) = seen.unwrap_or_else(|| panic!("no live spending shown\n{}", run.why()));
    assert!(usd < 1_000_000, "{usd}\n{}", run.why());
    assert_eq!(limit, 1_000_000, "{}", run.why());

    let warned = run.one("budget.threshold");
    assert_eq!(warned["detail"]["budget"], "usd", "{}", run.why());
    assert_eq!(warned["detail"]["at"], 500, "{}", run.why());
    assert_eq!(warned["detail"]["warning"], true, "{}", run.why());
    // On the report that reached it (a busy machine may read two reports at once).
    let spent = warned["detail"]["spent"].as_u64().unwrap();
    assert!(
        (500_000..1_000_000).contains(&spent),
        "{spent}\n{}",
        run.why()
    );
    let at = |name: &str| run.events.iter().position(|e| e["event"] == name).unwrap();
    assert!(
        at("budget.threshold") < at("agent.stopped"),
        "warned only after the stop\n{}",
        run.why()
    );
    assert_eq!(run.one("notify.sent")["detail"]["event"], "budget");
    let argv = fs::read_to_string(fixture.state("desk.argv")).unwrap();
    let argv: Vec<&str> = argv.lines().collect();
    assert_eq!((argv[0], argv[2]), ("usd", "50%"), "{argv:?}");
    assert_eq!(argv[1], format!("${:.2}", spent as f64 / 1e6), "{argv:?}");
}

#[test]
fn a_warning_before_no_limit_is_named_by_check() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "spender.sh", &["fix", "1"]),
        true,
        TESTS_GATE,
        "budget iterations=3 warn-at=0.8",
    ));
    let out = fixture
        .mvk()
        .args(["check", "loops/t.kdl"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning only: {stderr}");
    assert!(stderr.contains("mvk::warn-at-without-limit"), "{stderr}");
}

#[test]
fn a_reviewer_is_held_to_what_the_maker_left_of_the_budget() {
    // The maker spends $0.10 and passes its gates; the reviewer reports $0.10 more every 0.2 s
    // without end: it is stopped on the report that spends the task's $0.35 ($0.10 + $0.30).
    let defs = format!(
        "{}\n{}",
        agent_def("bot", "spender.sh", &["fix", "1"]),
        agent_def_timeout("rev", "spender.sh", &["out"], "60s")
    );
    let fixture = Fixture::new(&loop_kdl(
        &defs,
        true,
        TESTS_GATE,
        "budget usd=0.35 iterations=5\n    review agent=rev",
    ));
    let run = fixture.apply_bounded(60);
    run.expect_code(3);
    let review = run.one("review.finished");
    assert_eq!(review["detail"]["verdict"], "unknown", "{}", run.why());
    assert!(
        review["detail"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("mvk stopped the reviewer when the usd budget ran out")),
        "{}",
        run.why()
    );
    assert_main_unchanged(&fixture, &run);
    let exhausted = run.one("budget.exhausted");
    assert_eq!(exhausted["detail"]["budget"], "usd", "{}", run.why());
    // The maker's $0.10 and the reviewer's $0.30: counted once each.
    assert_eq!(exhausted["detail"]["spent"], 400_000, "{}", run.why());
    assert_eq!(run.attempts(), [1], "{}", run.why());
}

#[test]
fn a_resumed_flow_counts_what_it_spent_before_the_crash() {
    // `a` spends $0.30 and lands; mvk dies right after. On resume `b` runs without end: it is
    // stopped on the report that brings the flow to its $0.50 ($0.30 before + $0.20).
    let mut text = "agent once { run \"sh\" \"@AGENTS/spender.sh\" \"out\" \"3\"; }\n".to_string();
    text.push_str("agent spender timeout=\"60s\" { run \"sh\" \"@AGENTS/spender.sh\" \"out\"; }\n");
    text.push_str("flow t {\n    parallel 1\n    budget usd=0.5\n");
    text.push_str(&crate::flows::task("a", "once", "out/a.txt", ""));
    text.push_str(&crate::flows::task("b", "spender", "out/b.txt", "after a"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let crashed = fixture.apply_with(&[], &[("MVK_FAILPOINT", "merge-unlocked")]);
    assert_ne!(crashed.code, 0, "{}", crashed.why());
    assert!(
        fixture.show("main", "out/a.txt").is_some(),
        "{}",
        crashed.why()
    );
    crashed.none("agent.stopped");
    let resumed = fixture.run_mvk(&["resume", &crashed.id], &[]);
    resumed.expect_code(3);
    let stopped = resumed.one("agent.stopped");
    assert_eq!(stopped["task"], "b", "{}", resumed.why());
    assert_eq!(stopped["detail"]["budget"], "flow usd", "{}", resumed.why());
    assert_eq!(stopped["detail"]["spent"], 500_000, "{}", resumed.why());
    // b's own part: stopped on its second report, not the fifth it would take alone (one more
    // may be printed as the stop comes).
    let b = resumed
        .named("agent.finished")
        .into_iter()
        .find(|e| e["task"] == "b")
        .unwrap_or_else(|| panic!("b ran\n{}", resumed.why()));
    let own = micros(&b["detail"]["usd"]);
    assert!(
        (200_000..=300_000).contains(&own),
        "{own}\n{}",
        resumed.why()
    );
    assert!(
        fixture.show("main", "out/b.txt").is_none(),
        "{}",
        resumed.why()
    );
}

#[test]
fn a_workers_attempt_is_held_to_what_its_task_and_flow_left() {
    // `mvk attempt` as a Temporal worker runs it, told the task spent $0.30 of its $0.35: the
    // agent's first report ($0.10) spends it.
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "spender.sh", &["fix"], "60s"),
        true,
        TESTS_GATE,
        "budget usd=0.35 iterations=5",
    ));
    let run = fixture.run_mvk(
        &["attempt", "loops/t.kdl", "--json", "--spent=0,300000"],
        &[],
    );
    let stopped = run.one("agent.stopped");
    assert_eq!(stopped["detail"]["budget"], "usd", "{}", run.why());
    assert_eq!(stopped["detail"]["spent"], 400_000, "{}", run.why());
    run.none("gate.finished");
    // And a flow's: $0.90 of its $1.00 spent elsewhere.
    let mut text = "agent spender timeout=\"60s\" { run \"sh\" \"@AGENTS/spender.sh\" \"out\"; }\n"
        .to_string();
    text.push_str("flow t {\n    budget usd=1.0\n");
    text.push_str(&crate::flows::task("a", "spender", "out/a.txt", ""));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.run_mvk(
        &[
            "attempt",
            "loops/t.kdl",
            "--task",
            "a",
            "--json",
            "--flow-spent=0,900000",
        ],
        &[],
    );
    let stopped = run.one("agent.stopped");
    assert_eq!(stopped["detail"]["budget"], "flow usd", "{}", run.why());
    assert_eq!(stopped["detail"]["spent"], 1_000_000, "{}", run.why());
}

#[test]
fn no_reviewer_runs_once_the_maker_has_spent_the_budget() {
    // The maker reports $0.40 only as it exits, against $0.35: the reviewer, which would spend
    // more, never starts.
    let defs = format!(
        "{}\n{}",
        agent_def("bot", "spender.sh", &["fix", "4"]),
        agent_def_timeout("rev", "spender.sh", &["out"], "60s")
    );
    let text = loop_kdl(
        &defs,
        true,
        TESTS_GATE,
        "budget usd=0.35 iterations=5\n    review agent=rev",
    )
    // Reported at its exit only: its lines are read after it ends.
    .replace("agent bot timeout=", "agent bot adapter=goose timeout=");
    // Its dollars are those it prints; a price makes the budget countable for `mvk check`.
    let text = format!("price \"bot\" input=1.0 output=1.0\n{text}");
    let fixture = Fixture::new(&text);
    let run = fixture.apply_bounded(60);
    run.expect_code(3);
    run.none("review.started");
    assert_main_unchanged(&fixture, &run);
    assert_eq!(
        run.one("budget.exhausted")["detail"]["budget"],
        "usd",
        "{}",
        run.why()
    );
}

#[test]
fn plan_shows_where_a_budget_warns() {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "spender.sh", &["fix", "1"]),
        true,
        TESTS_GATE,
        "budget usd=2.0 warn-at=0.125",
    ));
    let out = fixture
        .mvk()
        .args(["plan", "loops/t.kdl"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("usd $2.00, warn at 12.5%"), "{text}");
    let out = fixture
        .mvk()
        .args(["plan", "loops/t.kdl", "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["tasks"][0]["budget"]["warn_at"], 125, "{doc}");
}
