//! Flows through `mvk apply` on real temporary repositories: tasks run side by side up to
//! `parallel`, after what they depend on has landed, never two with overlapping scopes at
//! once; a failure skips what comes after it. Agents (`tests/agents/flow_worker.sh`) log when
//! they start and end, so the tests see the concurrency itself, not mvk's account of it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;

use crate::apply::Fixture;

/// A flow task NAME with AGENT, SCOPE and EXTRA lines; its gate checks `out/NAME.txt`.
fn task(name: &str, agent: &str, scope: &str, extra: &str) -> String {
    format!(
        "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent {agent}\n        scope \"{scope}\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/$MVK_TASK.txt\"; }}\n        budget iterations=1\n        {extra}\n    }}\n"
    )
}

fn worker(name: &str, secs: &str, needs: &[&str]) -> String {
    let mut args = format!("\"@AGENTS/flow_worker.sh\" \"@STATE/log\" \"{secs}\"");
    for n in needs {
        args.push_str(&format!(" \"{n}\""));
    }
    format!("agent {name} timeout=\"60s\" {{ run \"sh\" {args}; }}\n")
}

/// Each task's `(start, end)` in epoch milliseconds, from the agents' log.
fn intervals(fixture: &Fixture) -> BTreeMap<String, (u64, u64)> {
    let text = fs::read_to_string(fixture.state("log")).unwrap();
    let mut out: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, task, ms] = parts[..] else {
            panic!("bad log line {line}")
        };
        let ms: u64 = ms.parse().unwrap();
        let e = out.entry(task.to_string()).or_insert((0, 0));
        if what == "start" {
            e.0 = ms;
        } else {
            e.1 = ms;
        }
    }
    out
}

/// The most intervals open at one instant.
fn peak(iv: &BTreeMap<String, (u64, u64)>) -> usize {
    let mut points: Vec<(u64, i32)> = iv.values().flat_map(|&(s, e)| [(s, 1), (e, -1)]).collect();
    // An end before a start at the same instant: touching intervals do not overlap.
    points.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in points {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap()
}

#[test]
fn a_wide_flow_fills_every_slot_and_never_more_and_a_join_sees_what_its_branches_landed() {
    let mut text = worker("w", "1.5", &[]);
    text.push_str(&worker(
        "join",
        "0.2",
        &["out/a.txt", "out/b.txt", "out/c.txt"],
    ));
    text.push_str("flow t {\n    parallel 3\n");
    for name in ["a", "b", "c", "e", "f"] {
        text.push_str(&task(name, "w", &format!("out/{name}.txt"), ""));
    }
    text.push_str(&task("d", "join", "out/d.txt", "after a b c"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    run.expect_code(0);
    for name in ["a", "b", "c", "d", "e", "f"] {
        assert!(
            fixture.show("main", &format!("out/{name}.txt")).is_some(),
            "out/{name}.txt did not land\n{}",
            run.why()
        );
    }
    let iv = intervals(&fixture);
    assert_eq!(peak(&iv), 3, "at most and at least 3 at once: {iv:?}");
    let d_start = iv["d"].0;
    for dep in ["a", "b", "c"] {
        assert!(
            iv[dep].1 <= d_start,
            "`d` started before `{dep}` ended: {iv:?}"
        );
    }
    // The tasks held back said why.
    assert!(
        run.named("task.waiting")
            .iter()
            .any(|e| e["detail"]["on"] == "parallel"),
        "{}",
        run.why()
    );
    assert!(
        run.named("task.waiting")
            .iter()
            .any(|e| e["task"] == "d" && e["detail"]["on"] == "after"),
        "{}",
        run.why()
    );
    assert_eq!(run.named("merge.done").len(), 6, "{}", run.why());
}

#[test]
fn overlapping_scopes_take_turns_and_a_failure_skips_what_comes_after_it() {
    let mut text = worker("w", "1", &[]);
    text.push_str(&worker("broken", "0.1", &["never/there.txt"]));
    text.push_str("flow t {\n    parallel 4\n");
    text.push_str(&task("x", "w", "out/**", ""));
    text.push_str(&task("y", "w", "out/y.txt", ""));
    text.push_str(&task("bad", "broken", "elsewhere/**", ""));
    text.push_str(&task("later", "w", "later/**", "after bad"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    // `bad` ran out of its one iteration: the flow's code is the worst over its tasks, 3.
    run.expect_code(3);
    let iv = intervals(&fixture);
    let (x, y) = (iv["x"], iv["y"]);
    assert!(
        x.1 <= y.0 || y.1 <= x.0,
        "x and y overlapped in time although their scopes overlap: {iv:?}"
    );
    assert!(
        run.named("task.waiting")
            .iter()
            .any(|e| e["detail"]["on"] == "scope"),
        "{}",
        run.why()
    );
    assert!(!iv.contains_key("later"), "`later` ran: {iv:?}");
    let skipped = run.one("task.skipped");
    assert_eq!(skipped["task"], "later", "{}", run.why());
    assert!(fixture.show("main", "out/x.txt").is_some(), "{}", run.why());
    assert!(fixture.show("main", "out/y.txt").is_some(), "{}", run.why());
}

/// Starts counted by task in the agents' log (a task whose agent ran twice shows 2).
fn starts(fixture: &Fixture) -> BTreeMap<String, usize> {
    let text = fs::read_to_string(fixture.state("log")).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("start ") {
            let task = rest.split_whitespace().next().unwrap().to_string();
            *out.entry(task).or_insert(0) += 1;
        }
    }
    out
}

/// Two tasks, `p` and `q`, side by side, whose agents both append to `shared.txt`, which
/// neither scope names (mvk does not hold a change to its scope; a gate would): the second to
/// land conflicts with the first.
fn sharing(iterations: u32) -> String {
    let mut text = "agent edit timeout=\"60s\" { run \"sh\" \"@AGENTS/flow_edit.sh\" \"@STATE/log\" \"1\" \"shared.txt\"; }\n".to_string();
    text.push_str("flow t {\n    parallel 2\n");
    for name in ["p", "q"] {
        text.push_str(&format!(
            "    task {name} {{\n        goal \"Note {name} in shared.txt.\"\n        agent edit\n        scope \"{name}/**\"\n        gate noted evidence=none {{ run \"sh\" \"-c\" \"grep -qx $MVK_TASK shared.txt\"; }}\n        budget iterations={iterations}\n    }}\n"
        ));
    }
    text.push_str("}\n");
    text
}

#[test]
fn two_parallel_tasks_whose_changes_conflict_land_one_after_the_other_and_lose_nothing() {
    let fixture = Fixture::new(&sharing(2));
    let run = fixture.apply();
    run.expect_code(0);
    let iv = intervals(&fixture);
    assert!(
        starts(&fixture).values().sum::<usize>() == 3,
        "each agent once, and the one that conflicted once more: {iv:?}\n{}",
        run.why()
    );
    let conflict = run.one("merge.conflict");
    let loser = conflict["task"].as_str().unwrap().to_string();
    let winner = if loser == "p" { "q" } else { "p" };
    assert_eq!(
        conflict["detail"]["paths"][0],
        "shared.txt",
        "{}",
        run.why()
    );
    // The retry started from the tip holding the winner's change, so both lines are there.
    let shared = fixture.show("main", "shared.txt").unwrap();
    assert_eq!(shared, format!("{winner}\n{loser}\n"), "{}", run.why());
    // Nothing was lost: the conflicting attempt's work is still on its branch.
    let first = format!("mvk/{}/{loser}/1", run.id);
    assert_eq!(
        fixture.show(&first, "shared.txt").as_deref(),
        Some(format!("{loser}\n").as_str()),
        "{}",
        run.why()
    );
    assert_eq!(run.named("merge.done").len(), 2, "{}", run.why());
}

#[test]
fn a_conflict_the_budget_cannot_retry_fails_the_task_and_keeps_its_work_on_its_branch() {
    let fixture = Fixture::new(&sharing(1));
    let run = fixture.apply();
    // A conflict is never success: the flow ends with the failed task's code.
    run.expect_code(3);
    let loser = run.one("merge.conflict")["task"]
        .as_str()
        .unwrap()
        .to_string();
    let winner = if loser == "p" { "q" } else { "p" };
    assert_eq!(
        fixture.show("main", "shared.txt"),
        Some(format!("{winner}\n")),
        "{}",
        run.why()
    );
    assert_eq!(
        fixture.show(&format!("mvk/{}/{loser}/1", run.id), "shared.txt"),
        Some(format!("{loser}\n")),
        "the accepted but unlanded work stays on its branch\n{}",
        run.why()
    );
}

#[test]
fn continue_on_failure_runs_what_comes_after_a_failed_task() {
    let mut text = worker("w", "0.1", &[]);
    text.push_str(&worker("broken", "0.1", &["never/there.txt"]));
    text.push_str("flow t {\n    parallel 2\n    continue-on-failure #true\n");
    text.push_str(&task("bad", "broken", "bad/**", ""));
    text.push_str(&task("ok", "w", "out/ok.txt", ""));
    text.push_str(&task("later", "w", "out/later.txt", "after bad ok"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    // The run still reports the failure.
    run.expect_code(3);
    run.none("task.skipped");
    let iv = intervals(&fixture);
    assert!(iv["later"].0 >= iv["bad"].1, "{iv:?}");
    assert!(
        fixture.show("main", "out/later.txt").is_some(),
        "{}",
        run.why()
    );
    assert!(
        fixture.show("main", "out/ok.txt").is_some(),
        "{}",
        run.why()
    );
}

#[test]
fn each_fans_a_task_out_over_the_files_a_glob_matches_and_after_waits_for_all_of_them() {
    let mut text = "agent port timeout=\"60s\" { run \"sh\" \"@AGENTS/flow_edit.sh\" \"@STATE/log\" \"1\" \"item\"; }\n".to_string();
    text.push_str(&worker("join", "0.1", &[]));
    text.push_str(concat!(
        "flow t {\n    parallel 3\n",
        "    task port each=\"items/*.txt\" {\n        goal \"Port {{item}}.\"\n        agent port\n",
        "        scope \"{{item}}\"\n",
        "        gate ported evidence=none { run \"grep\" \"-q\" \"port\" \"{{item}}\"; }\n",
        "        budget iterations=1\n    }\n",
    ));
    text.push_str(&task(
        "docs",
        "join",
        "out/docs.txt",
        "after port\n        gate all-ported evidence=none { run \"sh\" \"-c\" \"grep -q port items/a.txt && grep -q port items/b.txt && grep -q port items/c.txt\"; }",
    ));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    for item in ["a", "b", "c"] {
        fs::create_dir_all(fixture.root().join("items")).unwrap();
        fs::write(fixture.root().join(format!("items/{item}.txt")), "").unwrap();
    }
    fixture.git(&["add", "-A"]);
    fixture.git(&["commit", "-q", "-m", "items"]);
    let run = fixture.apply();
    run.expect_code(0);
    let iv = intervals(&fixture);
    let names: Vec<&String> = iv.keys().collect();
    assert_eq!(
        names,
        [
            "docs",
            "port[items/a.txt]",
            "port[items/b.txt]",
            "port[items/c.txt]"
        ],
        "{}",
        run.why()
    );
    assert_eq!(peak(&iv), 3, "the three items ran side by side: {iv:?}");
    for item in ["a", "b", "c"] {
        let task = format!("port[items/{item}.txt]");
        assert_eq!(
            fixture.show("main", &format!("items/{item}.txt")),
            Some(format!("{task}\n")),
            "{}",
            run.why()
        );
        assert!(iv[&task].1 <= iv["docs"].0, "{iv:?}");
    }
    // Each expanded task has a digest of its own.
    let plan = fixture
        .mvk()
        .args(["plan", "loops/t.kdl", "--json"])
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let digests: std::collections::BTreeSet<String> = plan["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["digest"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(digests.len(), 4, "{plan}");
}

#[test]
fn a_parallel_flow_killed_midway_resumes_without_running_or_landing_anything_twice() {
    use super::resume::{crash, resume, spawn_apply, task_outcomes, the_run};
    let go = "@STATE/go";
    let mut text = worker("quick", "0.1", &[]);
    text.push_str(&worker("slow", &format!("file:{go}"), &[]));
    text.push_str("flow t {\n    parallel 3\n");
    text.push_str(&task("a", "quick", "out/a.txt", ""));
    text.push_str(&task("b", "slow", "out/b.txt", ""));
    text.push_str(&task("c", "slow", "out/c.txt", ""));
    text.push_str(&task("d", "quick", "out/d.txt", "after a"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let mut child = spawn_apply(&fixture, &[]);
    // Kill mvk once `a` and `d` have landed while `b` and `c` are still working.
    let start = std::time::Instant::now();
    while fixture.show("main", "out/d.txt").is_none() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "mvk ended before `d` landed"
        );
        assert!(start.elapsed().as_secs() < 60, "`d` never landed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    crash(&mut child, None);
    let run = the_run(&fixture);
    fs::write(fixture.state("go"), "").unwrap();
    let r = resume(&fixture, &[]);
    r.expect_code(0);
    assert_eq!(r.id, run);
    for name in ["a", "b", "c", "d"] {
        assert!(
            fixture.show("main", &format!("out/{name}.txt")).is_some(),
            "out/{name}.txt did not land\n{}",
            r.why()
        );
    }
    let runs = starts(&fixture);
    assert_eq!(runs["a"], 1, "{runs:?}");
    assert_eq!(runs["d"], 1, "{runs:?}");
    assert_eq!(runs["b"], 2, "{runs:?}");
    assert_eq!(runs["c"], 2, "{runs:?}");
    let landed = fixture.git(&["log", "--format=%s", &format!("{}..main", fixture.base)]);
    assert_eq!(landed.lines().count(), 4, "one landing per task:\n{landed}");
    assert!(
        task_outcomes(&fixture, &run)
            .iter()
            .all(|(_, outcome)| outcome == "accepted"),
        "{:?}",
        task_outcomes(&fixture, &run)
    );
}
