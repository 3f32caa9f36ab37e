//! Flows through `mvk apply` on real temporary repositories: tasks run side by side up to
//! `parallel`, after what they depend on has landed, never two with overlapping scopes at
//! once; a failure skips what comes after it. Agents (`tests/agents/flow_worker.sh`) log when
//! they start and end, so the tests see the concurrency itself, not mvk's account of it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;

use crate::support::Fixture;

/// A flow task NAME with AGENT, SCOPE and EXTRA lines; its gate checks `out/NAME.txt`.
pub(crate) fn task(name: &str, agent: &str, scope: &str, extra: &str) -> String {
    format!(
        "    task {name} {{\n        goal \"Write out/{name}.txt.\"\n        agent {agent}\n        scope \"{scope}\"\n        gate made evidence=none {{ run \"sh\" \"-c\" \"test -f out/$MVK_TASK.txt\"; }}\n        budget iterations=1\n        {extra}\n    }}\n"
    )
}

pub(crate) fn worker(name: &str, secs: &str, needs: &[&str]) -> String {
    let mut args = format!("\"@AGENTS/flow_worker.sh\" \"@STATE/log\" \"{secs}\"");
    for n in needs {
        args.push_str(&format!(" \"{n}\""));
    }
    format!("agent {name} timeout=\"60s\" {{ run \"sh\" {args}; }}\n")
}

/// Asserts that each of `names` landed its `out/NAME.txt` on main.
fn landed(fixture: &Fixture, run: &crate::support::Run, names: &[&str]) {
    for name in names {
        assert!(
            fixture.show("main", &format!("out/{name}.txt")).is_some(),
            "out/{name}.txt did not land\n{}",
            run.why()
        );
    }
}

/// Each task's `(start, end)` in epoch milliseconds, from the agents' log (its last run's, for a
/// task that ran more than once; [`all_intervals`] has them all).
fn intervals(fixture: &Fixture) -> BTreeMap<String, (u64, u64)> {
    all_intervals(fixture)
        .into_iter()
        .filter_map(|(task, runs)| Some((task, *runs.last()?)))
        .collect()
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
    landed(&fixture, &run, &["a", "b", "c", "d", "e", "f"]);
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
    landed(&fixture, &r, &["a", "b", "c", "d"]);
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

#[test]
fn independent_tasks_start_in_the_order_they_are_written_and_a_dependent_after_its_dependency() {
    // One at a time, so the agents' log is the start order itself. The independent tasks start
    // as written, neither sorted nor reversed. `late` is written first but waits for `z` to
    // land, and `z` gives its slot to `a` as it goes to land: `late` comes last.
    let mut text = worker("w", "0.1", &[]);
    text.push_str("flow t {\n    parallel 1\n");
    text.push_str(&task("late", "w", "out/late.txt", "after z"));
    for name in ["m", "k", "z", "a"] {
        text.push_str(&task(name, "w", &format!("out/{name}.txt"), ""));
    }
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    run.expect_code(0);
    let log = fs::read_to_string(fixture.state("log")).unwrap();
    let order: Vec<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("start "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert_eq!(order, ["m", "k", "z", "a", "late"], "{}", run.why());
}

#[test]
fn a_diamond_runs_its_two_branches_side_by_side_and_joins_after_both() {
    let mut text = worker("w", "1", &[]);
    text.push_str(&worker("join", "0.1", &["out/b.txt", "out/c.txt"]));
    text.push_str("flow t {\n    parallel 4\n");
    text.push_str(&task("a", "w", "out/a.txt", ""));
    text.push_str(&task("b", "w", "out/b.txt", "after a"));
    text.push_str(&task("c", "w", "out/c.txt", "after a"));
    text.push_str(&task("d", "join", "out/d.txt", "after b c"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    run.expect_code(0);
    let iv = intervals(&fixture);
    assert!(iv["a"].1 <= iv["b"].0 && iv["a"].1 <= iv["c"].0, "{iv:?}");
    let (b, c) = (iv["b"], iv["c"]);
    assert!(b.0 < c.1 && c.0 < b.1, "b and c ran side by side: {iv:?}");
    assert!(iv["d"].0 >= b.1.max(c.1), "{iv:?}");
    assert!(fixture.show("main", "out/d.txt").is_some(), "{}", run.why());
}

#[test]
fn in_batch_mode_tasks_ready_together_stop_together_and_one_approval_lands_them_all() {
    let mut text = worker("quick", "0.1", &[]);
    text.push_str(&worker("slow", "1.5", &[]));
    text.push_str("flow t {\n    parallel 2\n");
    text.push_str(&task("fast", "quick", "out/fast.txt", ""));
    text.push_str(&task("slow", "slow", "out/slow.txt", ""));
    text.push_str(&task("last", "quick", "out/last.txt", "after fast"));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply_with(&["--mode", "batch"], &[]);
    run.expect_code(4);
    // `fast` stopped before landing while `slow` went on; the run paused once both waited.
    let paused = run.one("run.paused");
    let mut waiting: Vec<&str> = paused["detail"]["waiting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    waiting.sort_unstable();
    assert_eq!(waiting, ["fast", "slow"], "{}", run.why());
    let iv = intervals(&fixture);
    assert!(iv["fast"].1 < iv["slow"].0 + 1000, "{iv:?}");
    assert_eq!(fixture.tip("main"), fixture.base, "nothing landed unasked");
    let approved = fixture.run_mvk(&["approve", &run.id], &[]);
    // Both landed; `last` ran after `fast` and stops before its own landing.
    approved.expect_code(4);
    assert!(fixture.show("main", "out/fast.txt").is_some());
    assert!(fixture.show("main", "out/slow.txt").is_some());
    let done = fixture.run_mvk(&["approve", &run.id], &[]);
    done.expect_code(0);
    assert!(
        fixture.show("main", "out/last.txt").is_some(),
        "{}",
        done.why()
    );
}

#[test]
fn a_sibling_landing_a_file_another_task_seals_is_not_drift_when_that_task_resumes() {
    let mut text = worker("w", "0.1", &[]);
    text.push_str(&crate::support::agent_def("guided", "guided.sh", &[]));
    text.push_str("flow t {\n    parallel 2\n");
    text.push_str(&format!(
        "    task fix {{\n        goal \"Fix add.\"\n        scope \"src/calc.sh\"\n        seal \"tests/**\" \"out/q.txt\" new=#true\n        {}\n        ladder {{\n            rung agent=guided attempts=1\n            rung human\n        }}\n    }}\n",
        crate::support::TESTS_GATE
    ));
    text.push_str(&task("q", "w", "out/q.txt", ""));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    // `q` landed the file `fix` seals while `fix` waited for a person.
    run.expect_code(4);
    assert!(fixture.show("main", "out/q.txt").is_some(), "{}", run.why());
    let answered = fixture.run_mvk(&["reject", &run.id, "fix", "--reason", "use + in add"], &[]);
    answered.expect_code(0);
    assert_eq!(
        fixture.show("main", "src/calc.sh").as_deref(),
        Some(crate::support::FIXED),
        "{}",
        answered.why()
    );
}

#[test]
fn a_task_may_not_wait_for_one_that_lands_on_another_branch() {
    let mut text = worker("w", "0.1", &[]);
    text.push_str("flow t {\n");
    text.push_str(&task("a", "w", "out/a.txt", "merge into=release"));
    text.push_str(&task("b", "w", "out/b.txt", "after a"));
    text.push_str("}\n");
    // Checked when the run starts: `b` lands on the branch checked out then (`main`).
    let fixture = Fixture::new(&text);
    fixture.git(&["branch", "release"]);
    let out = fixture
        .mvk()
        .args(["apply", "loops/t.kdl"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(
            "task `b` starts after `a`, but lands on `main` while `a` lands on `release`"
        ),
        "{stderr}"
    );
    assert!(!fixture.state("log").exists(), "nothing ran");
}

/// Four tasks, whose after-merge gate logs what it sees: `a` is accepted first and holds its
/// landing until the other three wait for theirs, so they land after it as one batch.
fn batch_of_four(local_edit: Option<&str>) -> (Fixture, crate::support::Run) {
    let mut text = worker("quick", "0.3", &[]);
    text.push_str(&worker("slow", "1.5", &[]));
    text.push_str("flow t {\n    parallel 4\n");
    // MVK_BASE is what the change is merged onto: the diff from there is the change alone.
    // Each gate starts on a clean checkout of its commit, then leaves a mess behind: an edited
    // tracked file, an untracked and an ignored one.
    let gate = r#"merge { gate landed evidence=none timeout="60s" { run "sh" "-c" "test -z \"$(git status --porcelain --ignored)\" || { git status --porcelain --ignored >&2; exit 1; }; if mkdir @STATE/first 2>/dev/null; then until [ $(grep -c merge.started @REPO/.mvk/runs/$MVK_RUN/events.jsonl) -ge 4 ]; do sleep 0.05; done; fi; echo $MVK_TASK $(git rev-parse HEAD) $MVK_BASE $(git diff --name-only $MVK_BASE HEAD | tr '\\n' ,) $(git hash-object out/$MVK_TASK.txt) >> @STATE/merges; echo mess >> src/calc.sh; echo x > left-behind.txt; mkdir -p target; echo x > target/built"; }; }"#;
    for (name, agent) in [("a", "quick"), ("b", "slow"), ("c", "slow"), ("d", "slow")] {
        text.push_str(&task(name, agent, &format!("out/{name}.txt"), gate));
    }
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    if let Some(path) = local_edit {
        // The file exists at the base; the main checkout holds an uncommitted edit of it.
        let file = fixture.root().join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, "committed\n").unwrap();
        fixture.git(&["add", "-A"]);
        fixture.git(&["commit", "-qm", "the file a local edit will touch"]);
        fs::write(&file, "edited, not committed\n").unwrap();
    }
    let run = fixture.apply();
    (fixture, run)
}

#[test]
fn changes_accepted_together_land_as_one_batch_each_its_own_commit_gated_on_that_commit() {
    let (fixture, run) = batch_of_four(None);
    run.expect_code(0);
    // The target moved twice: the first change alone, then the three that waited, at once.
    let reflog = fixture.git(&["reflog", "--format=%gs", "main"]);
    let moves: Vec<&str> = reflog
        .lines()
        .filter(|l| l.starts_with("mvk: land"))
        .collect();
    assert_eq!(moves.len(), 2, "{reflog}\n{}", run.why());
    assert!(moves[0].contains(" and 2 more of run "), "{reflog}");
    // Four commits, one per change, each holding its own file only.
    let done: BTreeMap<String, String> = run
        .named("merge.done")
        .iter()
        .map(|e| {
            (
                e["task"].as_str().unwrap().to_string(),
                e["detail"]["commit"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(done.len(), 4, "{}", run.why());
    let log = fixture.git(&["log", "--format=%H", &format!("{}..main", fixture.base)]);
    let landed: Vec<&str> = log.lines().collect();
    assert_eq!(landed.len(), 4, "{log}");
    for (task, commit) in &done {
        assert!(
            landed.contains(&commit.as_str()),
            "{task}'s {commit} not on main:\n{log}"
        );
        let files = fixture.git(&["diff-tree", "--no-commit-id", "--name-only", "-r", commit]);
        assert_eq!(files.trim(), format!("out/{task}.txt"), "{task}");
    }
    // Each after-merge gate ran on the commit that landed its change, its base the one before.
    let merges = fs::read_to_string(fixture.state("merges")).unwrap();
    assert_eq!(merges.lines().count(), 4, "{merges}");
    for line in merges.lines() {
        let [task, head, base, diff, file] = line.split(' ').collect::<Vec<_>>()[..] else {
            panic!("bad line {line}")
        };
        assert_eq!(head, done[task], "{merges}");
        // What the gate read is what the commit holds.
        let held = fixture.git(&["rev-parse", &format!("{head}:out/{task}.txt")]);
        assert_eq!(file, held.trim(), "{merges}");
        let parent = fixture.git(&["rev-parse", &format!("{head}^")]);
        assert_eq!(base, parent.trim(), "{merges}");
        assert_eq!(diff, format!("out/{task}.txt,"), "{merges}");
    }
}

/// The changes of a batch are gated again side by side (up to `parallel`), each on its own
/// commit: a wide flow's re-gates, one after another, took longer than its attempts.
#[test]
fn the_changes_of_a_batch_are_gated_side_by_side_each_on_its_own_commit() {
    let mut text = worker("quick", "0.3", &[]);
    text.push_str(&worker("slow", "1.5", &[]));
    text.push_str("flow t {\n    parallel 4\n");
    // `a` holds the landing until the three others wait (its after-merge gate); their own gate,
    // run again because `a` moved the target, takes a second on the landing branch and says
    // when it ran and on what.
    let hold = r#"merge { gate hold evidence=none timeout="60s" { run "sh" "-c" "if mkdir @STATE/first 2>/dev/null; then until [ $(grep -c merge.started @REPO/.mvk/runs/$MVK_RUN/events.jsonl) -ge 4 ]; do sleep 0.05; done; fi"; }; }"#;
    let timed = r#"gate timed evidence=none timeout="60s" { run "sh" "-c" "case $(git symbolic-ref -q --short HEAD) in */landing) echo $(date +%s%N) $(git rev-parse HEAD) > @STATE/gate-$MVK_TASK; sleep 1; date +%s%N >> @STATE/gate-$MVK_TASK;; esac"; }"#;
    for (name, agent) in [("a", "quick"), ("b", "slow"), ("c", "slow"), ("d", "slow")] {
        text.push_str(&task(
            name,
            agent,
            &format!("out/{name}.txt"),
            &format!("{hold}\n        {timed}"),
        ));
    }
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    run.expect_code(0);
    landed(&fixture, &run, &["a", "b", "c", "d"]);
    run.none("merge.batch-split");
    let mut spans = Vec::new();
    for name in ["b", "c", "d"] {
        let text = fs::read_to_string(fixture.state(&format!("gate-{name}")))
            .unwrap_or_else(|e| panic!("gate-{name}: {e}\n{}", run.why()));
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [start, head, end] = parts[..] else {
            panic!("gate-{name}: {text}")
        };
        let commit = run
            .named("merge.done")
            .iter()
            .find(|e| e["task"] == name)
            .map(|e| e["detail"]["commit"].as_str().unwrap().to_string())
            .unwrap();
        assert_eq!(
            head,
            commit,
            "{name}'s gate ran on its own commit\n{}",
            run.why()
        );
        spans.push((start.parse::<u128>().unwrap(), end.parse::<u128>().unwrap()));
    }
    // All three ran at once: each started before any ended.
    let last_start = spans.iter().map(|s| s.0).max().unwrap();
    let first_end = spans.iter().map(|s| s.1).min().unwrap();
    assert!(last_start < first_end, "{spans:?}\n{}", run.why());
}

/// Review r5, high: a batch whose side-by-side gating found a change rejected (its own gate
/// sends mvk a stop signal, on its first landing only) must not gate it again and land it,
/// whether it is the batch's first failure (`c` here) or comes after it (`d`, after `c`, whose
/// gate fails on its landing).
#[test]
fn a_change_its_gate_rejected_in_a_batch_is_not_gated_again_and_landed() {
    for (signals, fails) in [("c", "none"), ("d", "c")] {
        let mut text = worker("quick", "0.3", &[]);
        text.push_str(&worker("slow", "1.5", &[]));
        // `d` is accepted after `c`, so in the batch it comes after `c`'s failure.
        text.push_str(&worker("slower", "2.2", &[]));
        text.push_str("flow t {\n    parallel 4\n");
        let hold = r#"merge { gate hold evidence=none timeout="60s" { run "sh" "-c" "if mkdir @STATE/first 2>/dev/null; then until [ $(grep -c merge.started @REPO/.mvk/runs/$MVK_RUN/events.jsonl) -ge 4 ]; do sleep 0.05; done; fi"; }; }"#;
        let own = format!(
            r#"gate own evidence=none timeout="60s" {{ run "sh" "-c" "case $(git symbolic-ref -q --short HEAD) in */landing) if [ $MVK_TASK = {signals} ] && mkdir @STATE/signalled 2>/dev/null; then kill -TERM $PPID; fi; [ $MVK_TASK != {fails} ];; esac"; }}"#
        );
        for (name, agent) in [
            ("a", "quick"),
            ("b", "slow"),
            ("c", "slow"),
            ("d", "slower"),
        ] {
            text.push_str(&task(
                name,
                agent,
                &format!("out/{name}.txt"),
                &format!("{hold}\n        {own}"),
            ));
        }
        text.push_str("}\n");
        let fixture = Fixture::new(&text);
        let run = fixture.apply();
        run.expect_code(1);
        assert!(fixture.show("main", "out/a.txt").is_some(), "{}", run.why());
        assert!(fixture.show("main", "out/b.txt").is_some(), "{}", run.why());
        assert!(
            fixture
                .show("main", &format!("out/{signals}.txt"))
                .is_none(),
            "{signals} landed:\n{}",
            run.why()
        );
        // `c` (which signals, or fails) is the batch's first failure; `d` comes after it.
        assert_eq!(
            run.named("merge.batch-split")[0]["task"],
            "c",
            "{}",
            run.why()
        );
        // The signal was counted once, and the change never landed after it.
        assert_eq!(run.named("gate.signalled-mvk").len(), 1, "{}", run.why());
        let ended = run
            .named("task.finished")
            .into_iter()
            .find(|e| e["task"] == signals)
            .unwrap_or_else(|| panic!("{signals} never finished\n{}", run.why()));
        assert_eq!(ended["detail"]["outcome"], "rejected", "{}", run.why());
    }
}

#[test]
fn a_batch_the_main_checkout_refuses_lands_again_one_change_at_a_time() {
    // `c`'s file has a local edit in the main checkout: `c` stops for a person, the others land.
    let (fixture, run) = batch_of_four(Some("out/c.txt"));
    run.expect_code(4);
    landed(&fixture, &run, &["a", "b", "d"]);
    assert_eq!(
        fixture.show("main", "out/c.txt").as_deref(),
        Some("committed\n"),
        "{}",
        run.why()
    );
    let blocked = run.one("merge.blocked");
    assert_eq!(blocked["task"], "c", "{}", run.why());
    assert_eq!(blocked["detail"]["paths"][0], "out/c.txt", "{}", run.why());
    // The edit is still there, and `c`'s work is on its branch.
    assert_eq!(
        fs::read_to_string(fixture.root().join("out/c.txt")).unwrap(),
        "edited, not committed\n"
    );
    assert_eq!(
        fixture
            .show(&format!("mvk/{}/c/1", run.id), "out/c.txt")
            .as_deref(),
        Some("c\n")
    );
}

#[test]
fn a_change_that_left_a_batch_which_did_not_land_tries_again_with_the_rest() {
    // `a` lands first, alone, holding its landing until `b` and `c` wait. Then `b` and `c` are
    // a batch: `c`'s gate fails once `b`'s change is merged in, so `c` leaves it; but the main
    // checkout refuses `b` (a local edit of its file). `c` is not charged for a change that
    // never landed: it lands, and `b` waits for a person.
    let mut text = worker("quick", "0.3", &[]);
    text.push_str(&worker("slow", "1.5", &[]));
    text.push_str(&worker("slower", "2.5", &[]));
    text.push_str("flow t {\n    parallel 3\n");
    let hold = r#"merge { gate held evidence=none timeout="60s" { run "sh" "-c" "if mkdir @STATE/first 2>/dev/null; then until [ $(grep -c merge.started @REPO/.mvk/runs/$MVK_RUN/events.jsonl) -ge 3 ]; do sleep 0.05; done; fi"; }; }"#;
    text.push_str(&task("a", "quick", "out/a.txt", hold));
    text.push_str(&task("b", "slow", "out/b.txt", hold));
    let without_b = r#"gate without-b evidence=none { run "sh" "-c" "! grep -qx b out/b.txt"; }"#;
    text.push_str(&task(
        "c",
        "slower",
        "out/c.txt",
        &format!("{hold}\n        {without_b}"),
    ));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let file = fixture.root().join("out/b.txt");
    fs::create_dir_all(file.parent().unwrap()).unwrap();
    fs::write(&file, "committed\n").unwrap();
    fixture.git(&["add", "-A"]);
    fixture.git(&["commit", "-qm", "the file a local edit will touch"]);
    fs::write(&file, "edited, not committed\n").unwrap();
    let run = fixture.apply();
    run.expect_code(4);
    assert!(fixture.show("main", "out/a.txt").is_some(), "{}", run.why());
    assert!(fixture.show("main", "out/c.txt").is_some(), "{}", run.why());
    assert_eq!(run.one("merge.blocked")["task"], "b", "{}", run.why());
    assert_eq!(starts(&fixture)["c"], 1, "`c` ran once: {}", run.why());
    run.none("merge.conflict");
    // The batch was gated side by side first; `c`'s failure sent it back to land change by change.
    assert_eq!(run.one("merge.batch-split")["task"], "c", "{}", run.why());
    // `c` did leave the batch: its gate failed on the commit holding `b`'s change.
    assert!(
        run.named("gate.finished").iter().any(|e| e["task"] == "c"
            && e["detail"]["gate"] == "without-b"
            && e["detail"]["exit_code"] != 0),
        "{}",
        run.why()
    );
}

/// `z` holds the landing turn until `a` and `b` wait, then its after-merge gate refuses it, so
/// `a` and `b` land as one batch of new files; mvk is killed between bringing the main checkout
/// to the batch's commit and moving `main`. With `mine`, `main` holds a person's commit beyond
/// the fixture's base when the run starts.
fn batch_cut_short(mine: bool) -> Fixture {
    let mut text = worker("quick", "0.3", &[]);
    text.push_str(&worker("slow", "1.5", &[]));
    text.push_str("flow t {\n    parallel 3\n");
    let refuse = r#"merge { gate refuse evidence=none timeout="60s" { run "sh" "-c" "until [ $(grep -c merge.started @REPO/.mvk/runs/$MVK_RUN/events.jsonl) -ge 3 ]; do sleep 0.05; done; exit 1"; }; }"#;
    text.push_str(&task("z", "quick", "out/z.txt", refuse));
    text.push_str(&task("a", "slow", "out/a.txt", ""));
    text.push_str(&task("b", "slow", "out/b.txt", ""));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    if mine {
        fs::write(fixture.root().join("mine.txt"), "mine\n").unwrap();
        fixture.git(&["add", "mine.txt"]);
        fixture.git(&["commit", "-qm", "mine"]);
    }
    let crashed = fixture.run_mvk(
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", "merge-checkout")],
    );
    assert_eq!(
        crashed.code,
        -1,
        "killed at the checkout\n{}",
        crashed.why()
    );
    fixture
}

#[test]
fn a_batch_cut_short_between_the_checkout_and_the_branch_move_is_finished_by_resume() {
    use super::resume::{resume, task_outcomes};
    let fixture = batch_cut_short(false);
    assert_eq!(fixture.tip("main"), fixture.base, "main did not move yet");
    let r = resume(&fixture, &[]);
    assert!(
        fixture.show("main", "out/a.txt").is_some() && fixture.show("main", "out/b.txt").is_some(),
        "{}",
        r.why()
    );
    let landed = fixture.git(&["log", "--format=%s", &format!("{}..main", fixture.base)]);
    assert_eq!(
        landed.lines().count(),
        2,
        "one commit per change:\n{landed}"
    );
    assert_eq!(fixture.git(&["status", "--porcelain"]), "", "{}", r.why());
    r.one("merge.finished-by-resume");
    let outcomes = task_outcomes(&fixture, &r.id);
    assert!(
        outcomes.contains(&("a".into(), "accepted".into()))
            && outcomes.contains(&("b".into(), "accepted".into())),
        "{outcomes:?}"
    );
}

#[test]
fn resume_leaves_a_cut_short_landing_alone_when_a_person_reset_the_tip_behind_it() {
    use super::resume::resume;
    let fixture = batch_cut_short(true);
    // The person takes their commit back off `main`, keeping the index (`reset --soft`): the
    // batch was built on a tip that is no longer there, so resume must not move `main` onto it.
    fixture.git(&["reset", "-q", "--soft", &fixture.base]);
    let r = resume(&fixture, &[]);
    r.none("merge.finished-by-resume");
    let log = fixture.git(&["log", "--format=%s", "main"]);
    assert!(
        !log.lines().any(|l| l == "mine"),
        "the reset commit came back:\n{log}\n{}",
        r.why()
    );
}

#[test]
fn a_task_waiting_to_land_gives_its_slot_to_the_next_task_and_never_more_run_at_once() {
    // `z`'s after-merge gate lands it only once `x` has started: with `parallel 2` and `y` still
    // working, `x` (planned last) can only start on the slot `z` gave up when it went to land.
    let mut text = worker("quick", "0.3", &[]);
    text.push_str(&worker("slow", "3", &[]));
    text.push_str("flow t {\n    parallel 2\n");
    let wait_for_x = r#"merge { gate x-started evidence=none timeout="20s" { run "sh" "-c" "until grep -q '^start x ' @STATE/log; do sleep 0.05; done"; }; }"#;
    // Independent tasks are planned in the order they are written in.
    text.push_str(&task("z", "quick", "out/z.txt", wait_for_x));
    text.push_str(&task("y", "slow", "out/y.txt", ""));
    text.push_str(&task("x", "quick", "out/x.txt", ""));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    run.expect_code(0);
    let planned: Vec<String> = run.one("run.started")["detail"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(planned.last().map(String::as_str), Some("x"), "{planned:?}");
    landed(&fixture, &run, &["x", "y", "z"]);
    let iv = intervals(&fixture);
    assert!(
        iv["x"].0 < iv["y"].1,
        "`x` started while `y` worked: {iv:?}"
    );
    assert_eq!(peak(&iv), 2, "never more than 2 agents at once: {iv:?}");
}

/// Every `(start, end)` the agents logged, per task, in order: a task that ran twice has two.
fn all_intervals(fixture: &Fixture) -> BTreeMap<String, Vec<(u64, u64)>> {
    let text = fs::read_to_string(fixture.state("log")).unwrap();
    let mut out: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [what, task, ms] = parts[..] else {
            panic!("bad log line {line}")
        };
        let ms: u64 = ms.parse().unwrap();
        let runs = out.entry(task.to_string()).or_default();
        if what == "start" {
            runs.push((ms, 0));
        } else if let Some(last) = runs.last_mut() {
            last.1 = ms;
        }
    }
    out
}

#[test]
fn a_task_sent_back_from_landing_takes_the_next_free_slot_before_tasks_not_started() {
    // `a`'s change is re-gated on a target that `b` moved, fails there once and is sent back for
    // a second attempt; by then `c` and `d` hold both slots. When `c` ends (its gate fails, so it
    // frees its slot by ending, not by going to land), `a` takes the slot before `e`, which has
    // not started, and never more than 2 agents work at once.
    let mut text = worker("one", "1", &[]);
    text.push_str(&worker("tenth", "0.1", &[]));
    text.push_str(&worker("three", "3", &[]));
    text.push_str("flow t {\n    parallel 2\n");
    // Independent tasks are planned in the order they are written in.
    text.push_str(
        r#"    task a {
        goal "Write out/a.txt."
        agent one
        scope "out/a.txt"
        gate made evidence=none { run "sh" "-c" "test -f out/a.txt"; }
        gate first-without-b evidence=none { run "sh" "-c" "[ $MVK_ATTEMPT -gt 1 ] || ! test -f out/b.txt"; }
        budget iterations=2
    }
"#,
    );
    text.push_str(&task("b", "tenth", "out/b.txt", ""));
    text.push_str(&task(
        "c",
        "three",
        "out/c.txt",
        r#"gate never evidence=none { run "false"; }"#,
    ));
    text.push_str(&task("d", "three", "out/d.txt", ""));
    text.push_str(&task("e", "tenth", "out/e.txt", ""));
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    landed(&fixture, &run, &["a", "b", "d", "e"]);
    assert!(fixture.show("main", "out/c.txt").is_none(), "{}", run.why());
    let runs = all_intervals(&fixture);
    assert_eq!(
        runs["a"].len(),
        2,
        "`a` was sent back once: {runs:?}\n{}",
        run.why()
    );
    assert!(
        runs["a"][1].0 <= runs["e"][0].0,
        "`a` took a slot before `e` started: {runs:?}"
    );
    let mut points: Vec<(u64, i32)> = runs
        .values()
        .flatten()
        .flat_map(|&(s, e)| [(s, 1), (e, -1)])
        .collect();
    points.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in points {
        now += d;
        most = most.max(now);
    }
    assert!(most <= 2, "never more than 2 agents at once: {runs:?}");
}

#[test]
fn the_status_files_show_a_running_agent_within_a_moment_though_phase_changes_are_coalesced() {
    // Each agent copies the status file a second into its run: by then the phase change that
    // started it (written at most 250 ms late) must be in it, with nothing else happening.
    let agent = "agent w timeout=\"60s\" { run \"sh\" \"-c\" \"sleep 1; cp @REPO/.mvk/loop_state.json @STATE/seen-$MVK_TASK.json; mkdir -p out; echo x > out/$MVK_TASK.txt\"; }\n";
    let mut text = agent.to_string();
    text.push_str("flow t {\n    parallel 2\n");
    for name in ["a", "b"] {
        text.push_str(&task(name, "w", &format!("out/{name}.txt"), ""));
    }
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = fixture.apply();
    run.expect_code(0);
    for name in ["a", "b"] {
        let seen = fs::read_to_string(fixture.state(&format!("seen-{name}.json")))
            .unwrap_or_else(|e| panic!("seen-{name}.json: {e}\n{}", run.why()));
        let state: serde_json::Value = serde_json::from_str(&seen).unwrap();
        let mine = state["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        assert_eq!(mine["state"], "running", "{name}: {mine}");
        assert_eq!(mine["agent"], "w", "{name}: {mine}");
        assert_eq!(mine["attempt"], 1, "{name}: {mine}");
    }
}
