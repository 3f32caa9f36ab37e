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
