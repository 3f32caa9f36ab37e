//! `mvk runs`, `status`, `log` and `stats` end to end: real `mvk apply` runs on temporary git
//! repositories with scripted agents (the fixture of `apply.rs`), then the reading commands'
//! output checked against what the runs did.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use serde_json::{Value, json};

use crate::support::{Fixture, Run, TESTS_GATE, agent_def, agents_dir, git, loop_kdl, simple_loop};

/// Loop `t` with agent NAME running SCRIPT, and EXTRA settings.
fn named_loop(name: &str, script: &str, extra: &str) -> String {
    loop_kdl(
        &agent_def(name, script, &[]),
        false,
        TESTS_GATE,
        &format!("agent {name}\n    {extra}"),
    )
}

/// Replaces `loops/t.kdl` with TEXT and commits it, for a second, different run.
fn rewrite_loop(fixture: &Fixture, text: &str) {
    let text = text.replace("@AGENTS", agents_dir().to_str().unwrap());
    fs::write(fixture.root().join("loops/t.kdl"), text).unwrap();
    git(fixture.root(), &["commit", "-q", "-am", "another loop"]);
}

/// Runs `mvk ARGS…` in the fixture; returns the exit code, stdout and stderr.
fn mvk(fixture: &Fixture, args: &[&str]) -> (i32, String, String) {
    let out = fixture.mvk().args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `mvk ARGS… --json` (which must succeed) as JSON.
fn mvk_json(fixture: &Fixture, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, stdout, stderr) = mvk(fixture, &all);
    assert_eq!(code, 0, "mvk {all:?}\n{stdout}\n{stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// The events as the trail has them, without times: `(event, task, attempt, detail)`.
fn trail_events(run: &Run) -> Vec<Value> {
    run.events
        .iter()
        .map(|e| json!([e["event"], e["task"], e["attempt"], e["detail"]]))
        .collect()
}

/// The same for events read back from the ledger.
fn ledger_events(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .map(|e| json!([e["event"], e["task"], e["attempt"], e["detail"]]))
        .collect()
}

/// An accepted run (one attempt, $0.25, 1000 tokens, agent `payer`), then a run that spends two
/// attempts of $0.60 and 1200 tokens each with agent `spender` and runs out of iterations.
fn accepted_then_budget() -> (Fixture, Run, Run) {
    let fixture = Fixture::new(&named_loop("payer", "usage_fix.sh", ""));
    let accepted = fixture.apply();
    accepted.expect_code(0);
    rewrite_loop(
        &fixture,
        &named_loop("spender", "usage.sh", "budget iterations=2 same-failure=3"),
    );
    let spent = fixture.apply();
    spent.expect_code(3);
    (fixture, accepted, spent)
}

#[test]
fn before_any_run_the_reading_commands_say_so_and_create_nothing() {
    let fixture = Fixture::new(&simple_loop("fix.sh", ""));
    for args in [&["runs"][..], &["status"], &["log"], &["stats", "--json"]] {
        let (code, stdout, stderr) = mvk(&fixture, args);
        assert_eq!(code, 64, "mvk {args:?}\n{stdout}\n{stderr}");
        assert_eq!(
            stderr,
            "error: no runs in this repository yet\n  hint: run a loop first: `mvk apply FILE`\n"
        );
    }
    assert!(!fixture.root().join(".mvk").exists());
}

#[test]
fn runs_lists_newest_first_with_outcome_attempts_and_cost() {
    let (fixture, accepted, spent) = accepted_then_budget();
    let (code, stdout, stderr) = mvk(&fixture, &["runs"]);
    assert_eq!(code, 0, "{stderr}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    // Started and duration vary; the rest is exact.
    let fixed = |r: &[&str]| -> Vec<String> {
        let mut r: Vec<String> = r.iter().map(|c| (*c).to_string()).collect();
        r.drain(3..5);
        r
    };
    let got: Vec<Vec<String>> = rows.iter().map(|r| fixed(r)).collect();
    let expected = [
        [&spent.id, "t", "budget (exit 3)", "2 attempts", "$1.20"],
        [&accepted.id, "t", "accepted (exit 0)", "1 attempt", "$0.25"],
    ];
    assert_eq!(got, expected, "{stdout}");

    let doc = mvk_json(&fixture, &["runs"]);
    assert_eq!(doc["schema"], "mvk.runs.v1");
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs[0]["id"], spent.id.as_str());
    assert_eq!(runs[0]["liveness"]["state"], "finished");
    assert_eq!(runs[0]["exit_code"], 3);
    assert_eq!(runs[0]["attempts"], 2);
    assert_eq!(runs[0]["tokens"], 2400);
    assert_eq!(runs[0]["usd_micros"], 1_200_000);
    assert_eq!(runs[1]["id"], accepted.id.as_str());
    assert_eq!(runs[1]["outcome"], "accepted");
}

#[test]
fn stats_give_the_acceptance_rate_and_the_cost_per_accepted_change() {
    let (fixture, _, spent) = accepted_then_budget();
    let s = mvk_json(&fixture, &["stats"]);
    assert_eq!(s["schema"], "mvk.stats.v1");
    assert_eq!(s["runs"], 2, "{s:#}");
    assert_eq!(s["tasks"], 2, "{s:#}");
    assert_eq!(s["accepted"], 1, "{s:#}");
    assert_eq!(s["acceptance_rate"], 0.5, "{s:#}");
    assert_eq!(s["spent"]["attempts"], 3, "{s:#}");
    assert_eq!(s["spent"]["tokens"], 3400, "{s:#}");
    assert_eq!(s["spent"]["usd_micros"], 1_450_000, "{s:#}");
    // Everything spent, over the one accepted change.
    assert_eq!(s["per_accepted_change"]["usd_micros"], 1_450_000.0, "{s:#}");
    assert_eq!(s["per_accepted_change"]["tokens"], 3400.0, "{s:#}");
    assert_eq!(s["per_accepted_change"]["attempts"], 3.0, "{s:#}");
    assert_eq!(s["accepted_tasks"]["total"]["usd_micros"], 250_000, "{s:#}");
    assert_eq!(s["accepted_tasks"]["mean"]["attempts"], 1.0, "{s:#}");

    assert_eq!(s["by_loop"].as_array().unwrap().len(), 1, "{s:#}");
    assert_eq!(s["by_loop"][0]["program"], "t");
    assert_eq!(s["by_loop"][0]["runs"], 2);
    assert_eq!(s["by_loop"][0]["acceptance_rate"], 0.5);

    let agents = &s["by_agent"];
    assert_eq!(agents[0]["agent"], "payer", "{s:#}");
    assert_eq!(agents[0]["attempts"], 1);
    assert_eq!(agents[0]["passed"], 1);
    assert_eq!(agents[0]["usd_micros"], 250_000);
    assert_eq!(agents[0]["stopped_by"], json!({}));
    assert_eq!(agents[1]["agent"], "spender", "{s:#}");
    assert_eq!(agents[1]["attempts"], 2);
    assert_eq!(agents[1]["passed"], 0);
    assert_eq!(
        agents[1]["stopped_by"],
        json!({"gate tests": {"count": 2, "share": 1.0}})
    );
    assert_eq!(s["by_rung"][0]["rung"], 1, "{s:#}");
    assert_eq!(s["by_rung"][0]["attempts"], 3);
    assert_eq!(
        s["by_rung"][0]["stopped_by"]["gate tests"]["count"], 2,
        "{s:#}"
    );

    // The same gate failure twice: the budget run was stuck, not merely short of money.
    let diagnoses = s["diagnoses"].as_array().unwrap();
    assert_eq!(diagnoses.len(), 1, "{s:#}");
    assert_eq!(diagnoses[0]["run"], spent.id.as_str());
    assert_eq!(diagnoses[0]["pattern"], "stuck");
    assert_eq!(diagnoses[0]["task"], "t");
    assert_eq!(diagnoses[0]["outcome"], "budget");

    let (code, text, _) = mvk(&fixture, &["stats"]);
    assert_eq!(code, 0);
    assert!(
        text.starts_with("2 runs, 2 finished tasks, 1 accepted: acceptance rate 50%\n"),
        "{text}"
    );
    assert!(
        text.contains("per accepted change: $1.45, 3400 tokens, 3.0 attempts"),
        "{text}"
    );
}

#[test]
fn status_says_where_each_run_stands() {
    let (fixture, accepted, spent) = accepted_then_budget();
    // The latest run by default.
    let s = mvk_json(&fixture, &["status"]);
    assert_eq!(s["schema"], "mvk.status.v1");
    assert_eq!(s["run"], spent.id.as_str());
    assert_eq!(s["liveness"], json!({"state": "finished"}));
    assert_eq!(s["phase"], "finished");
    assert_eq!(s["outcome"], "budget");
    assert_eq!(s["exit_code"], 3);
    assert_eq!(s["waiting_for"], Value::Null);
    assert_eq!(s["diagnosis"]["pattern"], "stuck", "{s:#}");
    let t = &s["tasks"][0];
    assert_eq!(t["name"], "t");
    assert_eq!(t["outcome"], "budget");
    assert_eq!(t["attempt"], 2);
    assert_eq!(t["rung"], 1);
    assert_eq!(t["agent"], "spender");
    assert_eq!(
        t["spent"],
        json!({"attempts": 2, "tokens": 2400, "usd_micros": 1_200_000})
    );
    assert_eq!(t["limits"]["iterations"], 2, "{s:#}");
    assert_eq!(t["last_failure"]["attempt"], 2);
    assert_eq!(t["last_failure"]["kind"], "gate");
    assert_eq!(t["last_failure"]["gate"], "tests");

    // A unique prefix names the other run: one character past what the two ids share (two runs
    // in the same second may share more than the time).
    let shared = accepted
        .id
        .chars()
        .zip(spent.id.chars())
        .take_while(|(a, b)| a == b)
        .count();
    let prefix = &accepted.id[..(shared + 1).min(accepted.id.len())];
    let s = mvk_json(&fixture, &["status", prefix]);
    assert_eq!(s["run"], accepted.id.as_str());
    assert_eq!(s["outcome"], "accepted");
    assert_eq!(s["diagnosis"], Value::Null);
    assert_eq!(s["tasks"][0]["agent"], "payer");
    assert_eq!(s["tasks"][0]["last_failure"], Value::Null);
    assert_eq!(
        s["tasks"][0]["merged"],
        accepted.one("merge.done")["detail"]["commit"]
    );

    let (code, text, _) = mvk(&fixture, &["status", &spent.id]);
    assert_eq!(code, 0);
    assert!(
        text.starts_with(&format!(
            "run {}: t (loops/t.kdl)\n  state: finished: budget (exit 3)\n  phase: finished\n",
            spent.id
        )),
        "{text}"
    );
    assert!(text.contains("  diagnosis: stuck (task t): "), "{text}");
    assert!(text.contains("task t: budget: attempt 2, rung 1 (spender)\n  spent: 2/2 attempts · 2400 tokens · $1.20\n  last failure: attempt 2 (gate tests): "), "{text}");
}

#[test]
fn a_run_argument_must_name_one_run() {
    let (fixture, accepted, spent) = accepted_then_budget();
    // Both ids start with the year.
    let (code, _, stderr) = mvk(&fixture, &["status", "20"]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.starts_with("error: `20` matches 2 runs\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{}, {}", spent.id, accepted.id)),
        "{stderr}"
    );
    let (code, _, stderr) = mvk(&fixture, &["log", "nope"]);
    assert_eq!(code, 64, "{stderr}");
    assert!(
        stderr.starts_with("error: no run matches `nope`\n"),
        "{stderr}"
    );
    assert!(stderr.contains(&spent.id), "{stderr}");
}

#[test]
fn log_prints_the_runs_events_in_order() {
    let fixture = Fixture::new(&simple_loop("honest.sh", ""));
    let run = fixture.apply();
    run.expect_code(0);
    let doc = mvk_json(&fixture, &["log", &run.id]);
    assert_eq!(doc["schema"], "mvk.log.v1");
    assert_eq!(doc["run"], run.id.as_str());
    let events = doc["events"].as_array().unwrap();
    assert_eq!(ledger_events(events), trail_events(&run));

    let (code, text, _) = mvk(&fixture, &["log"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), run.events.len(), "{text}");
    // `HH:MM:SS who event summary`: times vary, the rest is exact.
    let rest: Vec<&str> = lines.iter().map(|l| &l[9..]).collect();
    assert_eq!(rest[0], "run run.started t (loops/t.kdl)", "{text}");
    assert_eq!(rest[1], "t task.started", "{text}");
    assert_eq!(
        rest[2],
        format!("t#1 attempt.started bot on mvk/{}/t/1", run.id),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.as_bytes()[2] == b':' && l.as_bytes()[5] == b':'),
        "{text}"
    );
    assert_eq!(
        *rest.last().unwrap(),
        "run run.finished accepted (exit 0)",
        "{text}"
    );
}

/// Starts `mvk apply loops/t.kdl` in the background and returns it with its run id (the first
/// line it prints).
pub(crate) fn spawn_apply(fixture: &Fixture) -> (Child, String) {
    let mut child = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    (child, first.trim().to_string())
}

#[test]
fn follow_prints_every_event_once_and_ends_with_the_run() {
    // Two slow attempts: the follower starts while the run is going.
    let fixture = Fixture::new(&simple_loop(
        "slow.sh",
        "budget iterations=2 same-failure=3",
    ));
    let (mut apply, id) = spawn_apply(&fixture);
    let follow = fixture
        .mvk_std()
        .args(["log", "--follow", "--json"])
        .output()
        .unwrap();
    let status = apply.wait().unwrap();
    assert_eq!(status.code(), Some(3));
    let stdout = String::from_utf8_lossy(&follow.stdout);
    assert_eq!(
        follow.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&follow.stderr)
    );
    let followed: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let ids: Vec<i64> = followed.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{stdout}");
    let trail = fs::read_to_string(
        fixture
            .root()
            .join(".mvk/runs")
            .join(&id)
            .join("events.jsonl"),
    )
    .unwrap();
    let trail: Vec<Value> = trail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected: Vec<Value> = trail
        .iter()
        .map(|e| json!([e["event"], e["task"], e["attempt"], e["detail"]]))
        .collect();
    assert_eq!(ledger_events(&followed), expected);
    assert_eq!(followed.last().unwrap()["event"], "run.finished");
}

/// The pid an agent wrote to FILE, once it has.
fn wait_for_pid(file: &Path) -> u32 {
    for _ in 0..300 {
        if let Some(pid) = fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{} was never written", file.display());
}

#[test]
fn a_killed_run_is_interrupted_and_diagnosed_as_a_silent_death() {
    let fixture = Fixture::new(&simple_loop("hang.sh", ""));
    let (mut apply, id) = spawn_apply(&fixture);
    let agent = wait_for_pid(&fixture.state("agent.pid"));
    let child = wait_for_pid(&fixture.state("child.pid"));
    let pid = apply.id();
    apply.kill().unwrap();
    apply.wait().unwrap();
    // The agent's group outlives a SIGKILLed mvk; end it before asserting anything.
    for p in [agent, child] {
        super::support::kill9(p);
    }

    let s = mvk_json(&fixture, &["status"]);
    assert_eq!(s["run"], id.as_str());
    assert_eq!(s["state"], "running", "{s:#}");
    let live = &s["liveness"];
    assert_eq!(live["state"], "interrupted", "{s:#}");
    assert_eq!(live["pid"], pid);
    assert!(
        live["reason"]
            .as_str()
            .unwrap()
            .starts_with(&format!("process {pid} is gone; the heartbeat stopped at ")),
        "{s:#}"
    );
    assert_eq!(live["hint"], format!("continue with `mvk resume {id}`"));
    assert_eq!(s["diagnosis"]["pattern"], "silent-death", "{s:#}");
    assert_eq!(
        s["waiting_for"],
        json!({"kind": "resume", "command": format!("mvk resume {id}")})
    );
    assert_eq!(s["phase"], "agent", "{s:#}");
    assert_eq!(s["tasks"][0]["state"], "running");
    assert_eq!(s["tasks"][0]["attempt"], 1);

    let (code, text, _) = mvk(&fixture, &["status"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&format!(
            "  state: interrupted: process {pid} is gone; the heartbeat stopped at "
        )),
        "{text}"
    );
    assert!(text.contains("  diagnosis: silent death: "), "{text}");
    assert!(
        text.contains(&format!(
            "  waiting for: `mvk resume {id}` (its process is gone)"
        )),
        "{text}"
    );

    // Following a dead run prints what it wrote, then says why it stops.
    let (code, log, stderr) = mvk(&fixture, &["log", "--follow"]);
    assert_eq!(code, 2, "{log}\n{stderr}");
    assert!(
        log.lines().last().unwrap().contains("t#1 prompt.built"),
        "{log}"
    );
    assert_eq!(
        stderr.lines().collect::<Vec<_>>()[1],
        format!("  hint: continue with `mvk resume {id}`"),
        "{stderr}"
    );

    let stats = mvk_json(&fixture, &["stats"]);
    assert_eq!(
        stats["diagnoses"][0]["pattern"], "silent-death",
        "{stats:#}"
    );
    assert_eq!(stats["diagnoses"][0]["outcome"], "interrupted");
    let (_, runs, _) = mvk(&fixture, &["runs"]);
    assert!(runs.contains("  interrupted  "), "{runs}");
}
