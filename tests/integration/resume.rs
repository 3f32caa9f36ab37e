//! `mvk resume` and `mvk why` end to end: runs killed with SIGKILL at chosen instants (while
//! the agent runs, while a gate runs, between a merge's intent and its effect) are continued
//! without running twice what must happen once; drift in the loop file or in a sealed file
//! stops a resume with exit 5 and a report; a second run of a loop refuses while one is live.

use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::support::{Fixture, Run, TESTS_GATE, agent_def, alive, loop_kdl, simple_loop};

/// Starts `mvk apply loops/t.kdl` in the background, with ENV added.
pub(crate) fn spawn_apply(f: &Fixture, env: &[(&str, &str)]) -> Child {
    let mut cmd = f.mvk_std();
    cmd.args(["apply", "loops/t.kdl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Waits (up to a minute) until PATH exists.
pub(crate) fn wait_for(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let out = child.wait_with_output_ref();
            panic!(
                "mvk ended ({status}) before {} appeared\n{out}",
                path.display()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

trait OutputRef {
    fn wait_with_output_ref(&mut self) -> String;
}

impl OutputRef for Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let mut out = String::new();
        if let Some(s) = self.stdout.as_mut() {
            let _ = s.read_to_string(&mut out);
        }
        if let Some(s) = self.stderr.as_mut() {
            let _ = s.read_to_string(&mut out);
        }
        out
    }
}

/// Kills mvk with SIGKILL, as a power cut would, and the process group whose id is in PGID_FILE
/// (the agent or gate it was running, which SIGKILL leaves orphaned).
pub(crate) fn crash(child: &mut Child, pgid_file: Option<&Path>) {
    child.kill().unwrap();
    child.wait().unwrap();
    if let Some(file) = pgid_file {
        let pgid = fs::read_to_string(file).unwrap();
        let pgid = pgid.trim();
        let pgid: i32 = pgid.parse().unwrap();
        if let Some(p) = rustix::process::Pid::from_raw(pgid) {
            let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
        }
    }
}

fn ledger(f: &Fixture) -> Connection {
    Connection::open(f.root().join(".mvk/ledger.db")).unwrap()
}

pub(crate) fn the_run(f: &Fixture) -> String {
    ledger(f)
        .query_row(
            "SELECT id FROM runs ORDER BY started_at DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap()
}

fn count(f: &Fixture, file: &str) -> usize {
    fs::read_to_string(f.state(file))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Attempt rows of the run: (number, state, outcome).
fn attempts(f: &Fixture, run: &str) -> Vec<(u32, String, Option<String>)> {
    let db = ledger(f);
    let mut stmt = db
        .prepare("SELECT number, state, outcome FROM attempts WHERE run = ?1 ORDER BY id")
        .unwrap();
    stmt.query_map([run], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `(name, outcome)` of the run's tasks, by name.
pub(crate) fn task_outcomes(f: &Fixture, run: &str) -> Vec<(String, String)> {
    let db = ledger(f);
    let mut stmt = db
        .prepare("SELECT name, outcome FROM tasks WHERE run = ?1 ORDER BY name")
        .unwrap();
    stmt.query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Commits on main since the fixture's base whose message says mvk landed them.
fn landings(f: &Fixture) -> usize {
    f.git(&["log", "--format=%s", &format!("{}..main", f.base)])
        .lines()
        .filter(|l| {
            l.starts_with("mvk: t:") || l.starts_with("Merge") || l.starts_with("mvk: attempt")
        })
        .count()
}

/// How many events called NAME the resume wrote (the trail also holds the crashed process's).
fn since_resume(r: &Run, name: &str) -> usize {
    let start = r
        .events
        .iter()
        .rposition(|e| e["event"] == "run.resumed")
        .unwrap_or_else(|| panic!("no run.resumed\n{}", r.why()));
    r.events[start..]
        .iter()
        .filter(|e| e["event"] == name)
        .count()
}

pub(crate) fn resume(f: &Fixture, args: &[&str]) -> Run {
    let mut all = vec!["resume"];
    all.extend_from_slice(args);
    f.run_mvk(&all, &[])
}

fn fixed(f: &Fixture) {
    assert_eq!(
        f.show("main", "src/calc.sh").as_deref(),
        Some(super::support::FIXED)
    );
    assert_eq!(
        fs::read_to_string(f.root().join("src/calc.sh")).unwrap(),
        super::support::FIXED,
        "the main checkout's file matches main"
    );
}

#[test]
fn a_run_killed_while_its_agent_ran_restarts_that_attempt_under_its_number() {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("started"), &mut child);
    // SIGKILL to mvk alone: its agent lives on, orphaned, in the attempt's worktree.
    crash(&mut child, None);
    let orphan: u32 = fs::read_to_string(f.state("agent.pgid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(orphan), "the agent outlived mvk");
    let run = the_run(&f);
    fs::write(f.state("go"), "").unwrap();

    let r = resume(&f, &[]);
    r.expect_code(0);
    assert_eq!(r.id, run, "resume continues the same run");
    fixed(&f);
    assert_eq!(
        count(&f, "calls"),
        2,
        "the agent ran once before the crash and once after"
    );
    assert_eq!(
        attempts(&f, &run),
        [
            (1, "abandoned".into(), None),
            (1, "finished".into(), Some("passed".into()))
        ],
        "the attempt caught in flight was abandoned and made again as attempt 1"
    );
    assert!(!alive(orphan), "resume killed the orphaned agent");
    let writer: u32 = fs::read_to_string(f.state("writer.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(writer), "and its child that had left the worktree");
    assert_eq!(
        f.show("main", "junk.txt"),
        None,
        "nothing the orphans wrote landed"
    );
    assert!(
        r.one("run.resumed")["detail"]["orphans_killed"]
            .as_u64()
            .unwrap()
            >= 3,
        "sh, its sleep and the writer\n{}",
        r.why()
    );
    r.one("attempt.abandoned");
    let db = ledger(&f);
    let (state, outcome): (String, String) = db
        .query_row(
            "SELECT state, outcome FROM runs WHERE id = ?1",
            [&run],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((state.as_str(), outcome.as_str()), ("finished", "accepted"));
    let found: String = db
        .query_row(
            "SELECT found FROM resumptions WHERE run = ?1",
            [&run],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(found, "interrupted");
}

#[test]
fn a_run_killed_while_a_gate_ran_goes_on_from_the_seal_without_running_the_agent_again() {
    let gate = r#"gate tests { run "sh" "@AGENTS/wait_gate.sh" "@STATE"; }"#;
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "counted_fix.sh", &["@STATE"]),
        true,
        gate,
        "budget iterations=3",
    ));
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("gate-started"), &mut child);
    crash(&mut child, Some(&f.state("gate.pgid")));
    let run = the_run(&f);
    assert_eq!(attempts(&f, &run), [(1, "agent-done".into(), None)]);
    fs::write(f.state("go"), "").unwrap();

    let r = resume(&f, &[]);
    r.expect_code(0);
    fixed(&f);
    assert_eq!(count(&f, "calls"), 1, "the agent is not run again");
    assert_eq!(
        count(&f, "gate-calls"),
        2,
        "the gate ran again, from the seal on"
    );
    assert_eq!(
        attempts(&f, &run),
        [(1, "finished".into(), Some("passed".into()))]
    );
    assert_eq!(since_resume(&r, "seal.passed"), 1, "{}", r.why());
    assert_eq!(since_resume(&r, "attempt.started"), 0, "{}", r.why());
}

/// Runs the fixing loop with mvk dying at FAILPOINT, then resumes it; returns the resume.
pub(crate) fn crash_at(failpoint: &str, strategy: &str) -> (Fixture, Run) {
    let f = Fixture::new(&loop_kdl(
        &agent_def("bot", "counted_fix.sh", &["@STATE"]),
        true,
        TESTS_GATE,
        &format!("budget iterations=3\n    merge strategy={strategy}"),
    ));
    let crashed = f.run_mvk(&["apply", "loops/t.kdl"], &[("MVK_FAILPOINT", failpoint)]);
    assert_eq!(
        crashed.code,
        -1,
        "mvk was killed at `{failpoint}`\n{}",
        crashed.why()
    );
    let r = resume(&f, &[]);
    (f, r)
}

#[test]
fn a_merge_interrupted_after_its_intent_lands_once() {
    let (f, r) = crash_at("merge-intent", "squash");
    r.expect_code(0);
    fixed(&f);
    assert_eq!(landings(&f), 1, "{}", f.git(&["log", "--oneline", "main"]));
    assert_eq!(count(&f, "calls"), 1);
    let settled = r.one("merge.settled");
    assert_eq!(settled["detail"]["landed"], false);
    r.one("merge.done");
}

#[test]
fn a_merge_interrupted_after_the_ref_moved_is_not_done_again() {
    let (f, r) = crash_at("merge-published", "squash");
    r.expect_code(0);
    fixed(&f);
    assert_eq!(landings(&f), 1, "{}", f.git(&["log", "--oneline", "main"]));
    let settled = r.one("merge.settled");
    assert_eq!(settled["detail"]["landed"], true);
    assert_eq!(since_resume(&r, "merge.done"), 0, "{}", r.why());
    assert_eq!(since_resume(&r, "merge.started"), 0, "{}", r.why());
    let states: Vec<String> = {
        let db = ledger(&f);
        let mut stmt = db.prepare("SELECT state FROM merges ORDER BY id").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(states, ["done"]);
}

#[test]
fn a_merge_interrupted_between_checkout_and_ref_lands_with_a_clean_checkout() {
    let (f, r) = crash_at("merge-checkout", "ff");
    r.expect_code(0);
    fixed(&f);
    assert_eq!(landings(&f), 1, "{}", f.git(&["log", "--oneline", "main"]));
    assert_eq!(
        f.git(&["status", "--porcelain"]),
        "",
        "nothing left uncommitted"
    );
}

/// An interrupted run of the paused agent (killed while the agent waits).
fn interrupted(extra: &str) -> (Fixture, String) {
    let f = Fixture::new(&simple_loop("paused.sh", extra));
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("started"), &mut child);
    crash(&mut child, Some(&f.state("agent.pgid")));
    fs::write(f.state("go"), "").unwrap();
    let run = the_run(&f);
    (f, run)
}

#[test]
fn an_edited_loop_file_is_drift_reported_field_by_field_and_accepted_on_request() {
    let (f, run) = interrupted("budget iterations=3");
    let path = f.root().join("loops/t.kdl");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace("iterations=3", "iterations=5")).unwrap();

    let out = f.mvk().args(["resume"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(5), "{stdout}{stderr}");
    for needle in [
        "`budget` of task `t` changed since the run began",
        "budget.iterations: 3 → 5",
        "loops/t.kdl (when run",
        "--accept-drift",
    ] {
        assert!(
            stderr.contains(needle) || stdout.contains(needle),
            "no `{needle}` in:\n{stdout}{stderr}"
        );
    }
    assert_eq!(count(&f, "calls"), 1, "nothing ran");

    let why = f.mvk().args(["why", "--json"]).output().unwrap();
    assert_eq!(why.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&why.stdout).unwrap();
    assert_eq!(doc["run"], run.as_str());
    assert_eq!(doc["drift"]["changed"][0]["fields"][0]["field"], "budget");
    assert_eq!(
        doc["drift"]["changed"][0]["fields"][0]["changes"][0]["path"],
        "budget.iterations"
    );
    assert_eq!(doc["tasks"][0]["verdict"], "changed");

    let r = resume(&f, &["--accept-drift"]);
    r.expect_code(0);
    fixed(&f);
    r.one("task.replanned");
    let drift: String = ledger(&f)
        .query_row(
            "SELECT drift_json FROM resumptions WHERE run = ?1",
            [&run],
            |r| r.get(0),
        )
        .unwrap();
    assert!(drift.contains("\"budget.iterations\""), "{drift}");
}

#[test]
fn a_cosmetic_edit_is_not_drift() {
    let (f, _) = interrupted("budget iterations=3");
    let path = f.root().join("loops/t.kdl");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(
        &path,
        format!(
            "// a comment\n{}",
            text.replace("iterations=3", "iterations=3   ")
        ),
    )
    .unwrap();
    let r = resume(&f, &[]);
    r.expect_code(0);
    fixed(&f);
}

#[test]
fn a_sealed_file_changed_on_the_target_is_drift() {
    let (f, _) = interrupted("budget iterations=3");
    let test = f.root().join("tests/test_calc.sh");
    let text = fs::read_to_string(&test).unwrap();
    fs::write(&test, format!("{text}\n# weakened\n")).unwrap();
    f.git(&["commit", "-qam", "change the oracle"]);
    let out = f.mvk().args(["resume"]).output().unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(5), "{all}");
    assert!(all.contains("`seal.content` of task `t` changed"), "{all}");
    assert!(all.contains("tests/test_calc.sh"), "{all}");
}

#[test]
fn a_second_run_of_a_live_loop_is_refused_naming_the_holder() {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("started"), &mut child);
    let run = the_run(&f);
    for args in [vec!["apply", "loops/t.kdl"], vec!["resume"]] {
        let out = f.mvk().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("run `{run}`")),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("--wait"), "{stderr}");
    }
    crash(&mut child, Some(&f.state("agent.pgid")));
    assert!(!alive(child.id()));
}

#[test]
fn a_finished_run_is_not_resumed() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=3"));
    f.apply().expect_code(0);
    let out = f.mvk().args(["resume"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already finished"));
    assert_eq!(count(&f, "calls"), 1);
}

/// An interrupted run of a loop file that TEXT replaces after FILES are written and committed.
fn interrupted_with(files: &[(&str, &str)], text: &str) -> (Fixture, String) {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    for (path, content) in files {
        let path = f.root().join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
    let text = text
        .replace("@AGENTS", super::support::agents_dir().to_str().unwrap())
        .replace("@STATE", f.state.path().to_str().unwrap());
    fs::write(f.root().join("loops/t.kdl"), text).unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-qm", "the loop for this test"]);
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("started"), &mut child);
    crash(&mut child, Some(&f.state("agent.pgid")));
    fs::write(f.state("go"), "").unwrap();
    let run = the_run(&f);
    (f, run)
}

/// `mvk resume` without `--accept-drift`: exit 5, and everything it printed.
fn refused(f: &Fixture) -> String {
    let out = f.mvk().args(["resume"]).output().unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(5), "{all}");
    all
}

#[test]
fn an_imported_gate_library_changed_is_drift_located_in_the_library() {
    let library = "gate calc { run \"sh\" \"tests/test_calc.sh\"; }\n";
    let text = format!(
        "import \"gates.kdl\"\n{}",
        loop_kdl(
            &agent_def("bot", "paused.sh", &["@STATE"]),
            true,
            "gate tests use=calc",
            "budget iterations=3"
        )
    );
    let (f, _) = interrupted_with(&[("loops/gates.kdl", library)], &text);
    fs::write(
        f.root().join("loops/gates.kdl"),
        "gate calc timeout=\"5m\" { run \"sh\" \"tests/test_calc.sh\"; }\n",
    )
    .unwrap();
    let all = refused(&f);
    assert!(all.contains("`gate.tests` of task `t` changed"), "{all}");
    assert!(all.contains("gate.tests.timeout"), "{all}");
    assert_eq!(count(&f, "calls"), 1, "nothing ran");
}

#[test]
fn a_prompt_template_changed_is_drift() {
    let text = loop_kdl(
        &agent_def("bot", "paused.sh", &["@STATE"]),
        true,
        TESTS_GATE,
        "budget iterations=3\n    prompt \"p.hbs\"",
    );
    let (f, _) = interrupted_with(&[("loops/p.hbs", "Do this: {{goal}}\n")], &text);
    fs::write(f.root().join("loops/p.hbs"), "Do this now: {{goal}}\n").unwrap();
    let all = refused(&f);
    assert!(all.contains("`prompt` of task `t` changed"), "{all}");
}

#[test]
fn a_flow_resumed_does_not_run_its_finished_task_again() {
    let text = format!(
        "{}{}\nflow t {{\n    task first {{\n        goal \"Fix add.\"\n        agent fixer\n        seal \"tests/**\"\n        {TESTS_GATE}\n    }}\n    task second {{\n        after first\n        goal \"Check add again.\"\n        agent bot\n        seal \"tests/**\"\n        {TESTS_GATE}\n    }}\n}}\n",
        agent_def("fixer", "counted_fix.sh", &["@STATE", "fixer-calls"]),
        agent_def("bot", "paused.sh", &["@STATE"]),
    );
    let (f, run) = interrupted_with(&[], &text);
    assert_eq!(count(&f, "fixer-calls"), 1);
    let r = resume(&f, &[]);
    r.expect_code(0);
    fixed(&f);
    assert_eq!(
        count(&f, "fixer-calls"),
        1,
        "the finished task did not run again"
    );
    assert_eq!(
        count(&f, "calls"),
        2,
        "the interrupted task's agent ran again"
    );
    let outcomes = task_outcomes(&f, &run);
    assert_eq!(
        outcomes,
        [
            ("first".to_string(), "accepted".to_string()),
            ("second".to_string(), "accepted".to_string())
        ]
    );
    assert_eq!(since_resume(&r, "task.started"), 0, "{}", r.why());
    assert_eq!(since_resume(&r, "task.resumed"), 1, "{}", r.why());
}

#[test]
fn a_task_replanned_by_accepted_drift_gets_a_fresh_iterations_budget() {
    let f = Fixture::new(&simple_loop("fail_then_pause.sh", "budget iterations=2"));
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("started"), &mut child);
    crash(&mut child, Some(&f.state("agent.pgid")));
    fs::write(f.state("go"), "").unwrap();
    let path = f.root().join("loops/t.kdl");
    let text = fs::read_to_string(&path).unwrap();
    fs::write(&path, text.replace("return the sum", "return the true sum")).unwrap();
    let r = resume(&f, &["--accept-drift"]);
    r.expect_code(0);
    fixed(&f);
    assert_eq!(
        count(&f, "calls"),
        3,
        "two attempts before, one after the re-plan"
    );
    let run = the_run(&f);
    let rows: Vec<(u32, String)> = attempts(&f, &run)
        .into_iter()
        .map(|(n, state, _)| (n, state))
        .collect();
    assert_eq!(
        rows,
        [
            (1, "finished".into()),
            (2, "abandoned".into()),
            (3, "finished".into())
        ],
        "numbers go on across the re-plan"
    );
}

/// A flow task: fix add with AGENT, after AFTER (a whole `after …` line, or nothing).
fn flow_task(name: &str, after: &str, agent: &str) -> String {
    format!(
        "    task {name} {{\n        {after}\n        goal \"Fix add ({name}).\"\n        agent {agent}\n        seal \"tests/**\"\n        {TESTS_GATE}\n    }}\n"
    )
}

/// Flow `t` of `first` (fixes at once) then `second` (hangs), interrupted during `second`;
/// then a task `third` after `second` added to the loop file (not committed).
fn interrupted_flow_grown_by_a_third_task() -> (Fixture, String) {
    let defs = format!(
        "{}{}",
        agent_def("fixer", "counted_fix.sh", &["@STATE", "fixer-calls"]),
        agent_def("bot", "paused.sh", &["@STATE"]),
    );
    let text = format!(
        "{defs}\nflow t {{\n{}{}}}\n",
        flow_task("first", "", "fixer"),
        flow_task("second", "after first", "bot")
    );
    let (f, run) = interrupted_with(&[], &text);
    let text = fs::read_to_string(f.root().join("loops/t.kdl")).unwrap();
    let grown = text.replace(
        "}\n}\n",
        &format!("}}\n{}}}\n", flow_task("third", "after second", "fixer")),
    );
    assert_ne!(grown, text);
    fs::write(f.root().join("loops/t.kdl"), grown).unwrap();
    (f, run)
}

#[test]
fn a_task_added_by_accepted_drift_runs() {
    let (f, run) = interrupted_flow_grown_by_a_third_task();
    let r = resume(&f, &["--accept-drift"]);
    r.expect_code(0);
    let outcome = task_outcomes(&f, &run)
        .into_iter()
        .find_map(|(name, outcome)| (name == "third").then_some(outcome))
        .unwrap();
    assert_eq!(outcome, "accepted");
    assert_eq!(
        count(&f, "fixer-calls"),
        2,
        "first before the crash, third after"
    );
}

#[test]
fn a_resumed_loop_lands_on_the_branch_its_run_began_on() {
    let (f, _) = interrupted("budget iterations=3");
    f.git(&["checkout", "-q", "-b", "release"]);
    let release = f.tip("release");
    let r = resume(&f, &[]);
    r.expect_code(0);
    assert_eq!(
        f.show("main", "src/calc.sh").as_deref(),
        Some(super::support::FIXED)
    );
    assert_eq!(
        f.tip("release"),
        release,
        "the branch checked out now is not the target"
    );
}

#[test]
fn a_change_captured_just_before_a_crash_is_kept_on_a_branch() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=3"));
    let crashed = f.run_mvk(
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", "agent-captured")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    let run = the_run(&f);
    let r = resume(&f, &[]);
    r.expect_code(0);
    fixed(&f);
    let kept: Vec<String> = f
        .git(&[
            "branch",
            "--format=%(refname:short)",
            "--list",
            &format!("mvk/{run}/t/1-abandoned-*"),
        ])
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        f.show(&kept[0], "src/calc.sh").as_deref(),
        Some(super::support::FIXED)
    );
}

/// `--temporal-address` names the server of a run on Temporal: given for a local run, it is
/// refused rather than ignored, and the run stays resumable.
#[test]
fn a_temporal_address_for_a_local_run_is_refused() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=3"));
    let crashed = f.run_mvk(
        &["apply", "loops/t.kdl"],
        &[("MVK_FAILPOINT", "agent-captured")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    let out = f
        .mvk()
        .args(["resume", "--temporal-address", "127.0.0.1:7233"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("`--temporal-address` names the server"),
        "{err}"
    );
    resume(&f, &[]).expect_code(0);
    fixed(&f);
}

// Regression: a second resume compared the grown program with the tasks the run began with and
// dropped the task accepted drift had added.
#[test]
fn a_task_added_by_accepted_drift_survives_a_crash_of_that_resume() {
    let (f, run) = interrupted_flow_grown_by_a_third_task();
    let crashed = f.run_mvk(
        &["resume", "--accept-drift"],
        &[("MVK_FAILPOINT", "agent-captured")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    let r = resume(&f, &[]);
    r.expect_code(0);
    let outcome = task_outcomes(&f, &run)
        .into_iter()
        .find_map(|(name, outcome)| (name == "third").then_some(outcome))
        .unwrap_or_else(|| panic!("no task third\n{}", r.why()));
    assert_eq!(outcome, "accepted");
}

// Regression: a flow whose first task lands elsewhere recorded that branch as the run's target,
// and a resume landed the later tasks there instead of on the branch the run began on. (The
// tasks share no `after`: one may not wait for work landing on another branch. Neither has a
// scope, so they take turns, in order.)
#[test]
fn a_resumed_flow_lands_tasks_without_a_target_where_the_run_began() {
    let defs = format!(
        "{}{}",
        agent_def("fixer", "counted_fix.sh", &["@STATE", "fixer-calls"]),
        agent_def("bot", "paused.sh", &["@STATE"]),
    );
    let text = format!(
        "{defs}\nflow t {{\n    task first {{\n        goal \"Fix add on release.\"\n        agent fixer\n        seal \"tests/**\"\n        {TESTS_GATE}\n        merge into=release\n    }}\n    task second {{\n        goal \"Fix add.\"\n        agent bot\n        seal \"tests/**\"\n        {TESTS_GATE}\n    }}\n}}\n"
    );
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let text = text
        .replace("@AGENTS", super::support::agents_dir().to_str().unwrap())
        .replace("@STATE", f.state.path().to_str().unwrap());
    fs::write(f.root().join("loops/t.kdl"), text).unwrap();
    f.git(&["add", "-A"]);
    f.git(&["commit", "-qm", "the flow"]);
    f.git(&["branch", "release"]);
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("started"), &mut child);
    crash(&mut child, Some(&f.state("agent.pgid")));
    fs::write(f.state("go"), "").unwrap();
    let r = resume(&f, &[]);
    r.expect_code(0);
    assert_eq!(
        f.show("release", "src/calc.sh").as_deref(),
        Some(super::support::FIXED)
    );
    assert_eq!(
        f.show("main", "src/calc.sh").as_deref(),
        Some(super::support::FIXED),
        "{}",
        r.why()
    );
}

#[test]
fn a_removed_loop_file_is_drift_with_the_way_back() {
    let (f, _) = interrupted("budget iterations=3");
    f.git(&["rm", "-q", "loops/t.kdl"]);
    f.git(&["commit", "-qm", "drop the loop"]);
    let out = f.mvk().args(["resume"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("`loops/t.kdl` is gone"), "{stderr}");
    assert!(stderr.contains("git checkout"), "{stderr}");
    assert_eq!(count(&f, "calls"), 1, "nothing ran");
}

// Regression: the HTML report called a dead run `running` and ended its clock at its start.
#[test]
fn the_report_of_an_interrupted_run_says_so() {
    let (f, _) = interrupted("budget iterations=3");
    let out = f.mvk().args(["report", "--html"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains("id=\"outcome\">interrupted"), "{page}");
}

// Regression: in batch mode, mvk dying between an attempt's pass and its checkpoint let the
// resume land the change without asking anyone.
#[test]
fn a_batch_run_killed_before_its_checkpoint_still_asks_a_person_after_resume() {
    let f = Fixture::new(&simple_loop("counted_fix.sh", "budget iterations=3"));
    let crashed = f.run_mvk(
        &["apply", "loops/t.kdl", "--mode", "batch"],
        &[("MVK_FAILPOINT", "attempt-passed")],
    );
    assert_eq!(crashed.code, -1, "{}", crashed.why());
    let r = resume(&f, &[]);
    r.expect_code(4);
    assert_eq!(f.tip("main"), f.base, "nothing landed without a person");
    assert_eq!(since_resume(&r, "checkpoint.waiting"), 1, "{}", r.why());
}

/// Regression: an `mvk attempt` killed midway was continued by `mvk resume` as a whole run,
/// which landed work nobody asked to land.
#[test]
fn an_interrupted_attempt_is_not_resumed_as_a_run_and_lands_nothing() {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let mut child = attempt_started(&f);
    crash(&mut child, Some(&f.state("agent.pgid")));
    let run = the_run(&f);
    let command: String = ledger(&f)
        .query_row("SELECT command FROM runs WHERE id = ?1", [&run], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(command, "attempt");
    // What a person (or an agent) sees: make another attempt, not a resume.
    let status = f.mvk().args(["status", "--json"]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(
        status["waiting_for"]["command"], "mvk attempt loops/t.kdl",
        "{status:#}"
    );
    // Not a `resume` (which it refuses): a kind of its own.
    assert_eq!(
        status["waiting_for"]["kind"], "another-attempt",
        "{status:#}"
    );
    // Were it resumed, the agent would now fix the bug and the run would land it.
    fs::write(f.state("go"), "").unwrap();
    // The first refusal closes the dead attempt (see
    // `resume_of_a_dead_attempt_kills_what_it_left_and_closes_it_as_interrupted`); the second
    // finds it finished.
    for (args, says) in [
        (
            &["resume"][..],
            format!("run `{run}` is one attempt (`mvk attempt`), which lands nothing"),
        ),
        (
            &["resume", run.as_str()][..],
            format!("run `{run}` already finished: interrupted (exit 130)"),
        ),
    ] {
        let out = f.mvk().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains(&says), "{stderr}");
        assert!(stderr.contains("mvk attempt loops/t.kdl"), "{stderr}");
    }
    assert_eq!(f.tip("main"), f.base, "nothing landed");
    assert_eq!(landings(&f), 0);
    let merges: i64 = ledger(&f)
        .query_row("SELECT count(*) FROM merges", [], |r| r.get(0))
        .unwrap();
    assert_eq!(merges, 0);
    assert_eq!(count(&f, "calls"), 1, "no agent ran again");
}

/// `mvk attempt` of the loop, once its (hanging) agent runs.
fn attempt_started(f: &Fixture) -> Child {
    let mut cmd = f.mvk_std();
    cmd.args(["attempt", "loops/t.kdl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    wait_for(&f.state("started"), &mut child);
    child
}

/// Starts `mvk attempt` with the hanging agent, waits until the agent runs and kills mvk alone
/// (SIGKILL, as when its MCP server dies): its agent and the agent's writer live on. Returns the
/// run and the agent's process group and writer.
fn attempt_killed_alone(f: &Fixture) -> (String, u32, u32) {
    let mut child = attempt_started(f);
    crash(&mut child, None);
    let pid = |name: &str| -> u32 {
        fs::read_to_string(f.state(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (agent, writer) = (pid("agent.pgid"), pid("writer.pid"));
    assert!(alive(agent) && alive(writer), "the agent outlived mvk");
    (the_run(f), agent, writer)
}

fn run_end(f: &Fixture, run: &str) -> (String, Option<String>, Option<i64>) {
    ledger(f)
        .query_row(
            "SELECT state, outcome, exit_code FROM runs WHERE id = ?1",
            [run],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap()
}

/// Regression: an `mvk attempt` killed alone left its agents running (only a resume killed
/// orphans, and resume refuses attempts) and its run `running` forever, so `mvk gc` never
/// removed its branch. `mvk resume RUN` now kills them and closes the run as `interrupted`.
#[test]
fn resume_of_a_dead_attempt_kills_what_it_left_and_closes_it_as_interrupted() {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let (run, agent, writer) = attempt_killed_alone(&f);
    let out = f.mvk().args(["resume", &run]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("closed as `interrupted`"), "{stderr}");
    assert!(!alive(agent), "the orphaned agent was killed");
    assert!(!alive(writer), "and its child that had left the worktree");
    assert_eq!(
        run_end(&f, &run),
        ("finished".into(), Some("interrupted".into()), Some(130))
    );
    let states: Vec<(String, Option<String>)> = {
        let db = ledger(&f);
        let mut stmt = db
            .prepare("SELECT state, outcome FROM tasks WHERE run = ?1")
            .unwrap();
        stmt.query_map([&run], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(states, [("finished".into(), Some("interrupted".into()))]);
    assert_eq!(attempts(&f, &run), [(1, "abandoned".into(), None)]);
    let status = f.mvk().args(["status", "--json", &run]).output().unwrap();
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["outcome"], "interrupted", "{status:#}");
    // Finished, so `mvk gc` takes its branch like any other finished run's.
    let gc = f.mvk().args(["gc"]).output().unwrap();
    assert_eq!(
        gc.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    let branches = std::process::Command::new("git")
        .args(["branch", "--list", &format!("*{run}*")])
        .current_dir(f.root())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&branches.stdout).trim(),
        "",
        "gc removed its branch"
    );
    assert_eq!(f.tip("main"), f.base, "nothing landed");
}

/// The same for the next `mvk attempt` of the loop: it closes the dead attempt before it makes
/// its own, so the two agents never work side by side.
#[test]
fn the_next_attempt_closes_a_dead_attempt_of_its_loop() {
    let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
    let (run, agent, writer) = attempt_killed_alone(&f);
    fs::write(f.state("go"), "").unwrap();
    let out = f.mvk().args(["attempt", "loops/t.kdl"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("closed attempt run `{run}` as interrupted")),
        "{stderr}"
    );
    assert!(
        !alive(agent) && !alive(writer),
        "what it left running was killed"
    );
    assert_eq!(
        run_end(&f, &run),
        ("finished".into(), Some("interrupted".into()), Some(130))
    );
}

/// Regression: only the next attempt of the same loop closed a dead attempt, and `mvk apply`
/// closed none; the pool slot's lock died with the killed mvk, so the next run of another loop
/// leased the slot while the dead attempt's orphaned writer went on writing into it, and its
/// junk was committed as that run's work. Every command that leases a slot now closes every
/// dead attempt of the repository first.
#[test]
fn a_run_of_another_loop_closes_a_dead_attempt_before_it_leases_its_slot() {
    for command in ["attempt", "apply"] {
        let f = Fixture::new(&simple_loop("paused.sh", "budget iterations=3"));
        let other = simple_loop("fix.sh", "")
            .replace("loop t", "loop other")
            .replace("@AGENTS", crate::support::agents_dir().to_str().unwrap())
            .replace("@STATE", f.state.path().to_str().unwrap());
        fs::write(f.root().join("loops/other.kdl"), other).unwrap();
        f.git(&["add", "-A"]);
        f.git(&["commit", "-q", "-m", "another loop"]);
        let (run, agent, writer) = attempt_killed_alone(&f);
        let out = f
            .mvk()
            .args([command, "loops/other.kdl"])
            .args((command == "attempt").then_some("--json"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let head = if command == "attempt" {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            doc["head"].as_str().unwrap().to_string()
        } else {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            f.tip("main")
        };
        assert_eq!(
            f.show(&head, "src/calc.sh").as_deref(),
            Some(crate::support::FIXED),
            "{command}"
        );
        assert_eq!(
            f.show(&head, "junk.txt"),
            None,
            "{command}: the dead attempt's writer wrote into the new run's slot"
        );
        assert!(
            stderr.contains(&format!("closed attempt run `{run}` as interrupted")),
            "{command}: {stderr}"
        );
        assert!(
            !alive(agent) && !alive(writer),
            "{command}: the dead attempt's orphans were killed"
        );
        assert_eq!(
            run_end(&f, &run),
            ("finished".into(), Some("interrupted".into()), Some(130))
        );
    }
}

/// Ctrl-C (and any stop signal from outside) is a person's stop: recorded as such, named by
/// `mvk status` (never a silent death), with the run's true duration in `mvk runs`; the run
/// waits for `mvk resume`, which clears it and finishes the work.
#[test]
fn ctrl_c_is_a_persons_stop_that_status_names_and_resume_continues() {
    let f = Fixture::new(&simple_loop("wait_fix.sh", "budget iterations=2"));
    let mut child = spawn_apply(&f, &[]);
    wait_for(&f.state("agent-started"), &mut child);
    std::thread::sleep(Duration::from_millis(1500));
    // As a terminal's Ctrl-C does: SIGINT from outside the run.
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("stopped by SIGINT (Ctrl-C)"), "{err}");
    let run = the_run(&f);

    let status = f.mvk().args(["status", "--json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["diagnosis"]["pattern"], "stopped", "{doc}");
    assert!(
        doc["diagnosis"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("stopped by SIGINT (Ctrl-C)"),
        "{doc}"
    );
    let runs = f.mvk().args(["runs", "--json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&runs.stdout).unwrap();
    let ms = doc["runs"][0]["duration_ms"].as_i64().unwrap();
    assert!(
        ms >= 1500,
        "the run lasted at least 1.5 s, not {ms} ms: {doc}"
    );
    let log = f.mvk().args(["log", &run]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("run.interrupted stopped by SIGINT"),
        "{}",
        String::from_utf8_lossy(&log.stdout)
    );

    fs::write(f.state("go"), "").unwrap();
    let resumed = resume(&f, &[&run]);
    resumed.expect_code(0);
    fixed(&f);
    let status = f.mvk().args(["status", "--json", &run]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(doc["diagnosis"].is_null(), "{doc}");
}
