//! `mvk watch` in a real terminal of 80×24 (tmux): it follows a two-task flow that another
//! process runs to its end, approves a waiting checkpoint with a key (recorded as `mvk approve`
//! records it, and the run goes on), draws no colour under `NO_COLOR`, replays a copied event
//! stream read-only, and refuses to start off a terminal. Every wait polls the screen until
//! what is expected shows; the deadline only bounds a failure.

use std::time::{Duration, Instant};

use regex::Regex;
use rusqlite::Connection;

use crate::flows::{task, worker};
use crate::human::decisions;
use crate::knots::run_row;
use crate::reading::spawn_apply;
use crate::support::*;

const SIZE: (u16, u16) = (80, 24);

/// Waits (90 s at most) until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{what} did not happen within 90 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loop whose one attempt passes, run with `--mode step`: paused at the step checkpoint
/// (exit 4), waiting for a person.
fn paused_at_a_step_checkpoint() -> (Fixture, Run) {
    let f = Fixture::new(&simple_loop("fix.sh", "budget iterations=2"));
    let run = f.apply_with(&["--mode", "step"], &[]);
    run.expect_code(4);
    assert_eq!(decisions(&f), [("step".to_string(), "-".to_string())]);
    (f, run)
}

#[test]
fn watch_follows_a_two_task_flow_that_another_process_runs_to_its_end() {
    // `a` works until the test says `go`, so the view sees it running; `b` starts after it.
    let mut text = worker("slow", "file:@STATE/go", &[]);
    text.push_str(&worker("quick", "0.1", &[]));
    text.push_str("flow t {\n    parallel 2\n");
    text.push_str(&task("a", "slow", "out/a.txt", ""));
    text.push_str(&task("b", "quick", "out/b.txt", "after a"));
    text.push_str("}\n");
    let f = Fixture::new(&text);
    let (mut apply, id) = spawn_apply(&f);
    // `a`'s agent has started: the run is in the ledger, and `mvk watch` (no RUN) finds it as
    // the latest.
    let log = f.state("log");
    wait_until("a's agent starting", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("start a"))
    });

    let tmux = Tmux::mvk(&f, &["watch"], SIZE, &[]);
    let a_running = Regex::new(r"(?m)^│● a +running +agent +1/1 +1 +slow +\d").unwrap();
    let b_waiting = Regex::new(r"(?m)^│◌ b +waiting ").unwrap();
    let screen = tmux.wait_for("`a` running and `b` waiting", |s| {
        a_running.is_match(s) && b_waiting.is_match(s)
    });
    assert!(screen.contains(&format!("run {id} · running")), "{screen}");
    assert!(screen.contains("DAG 0/2 accepted"), "{screen}");
    assert!(screen.contains("1 running · 1 waiting"), "{screen}");
    // Every line fits the 80 columns.
    assert!(screen.lines().all(|l| l.chars().count() <= 80), "{screen}");

    std::fs::write(f.state("go"), "").unwrap();
    let a_done = Regex::new(r"(?m)^│✓ a +accepted ").unwrap();
    let b_done = Regex::new(r"(?m)^│✓ b +accepted ").unwrap();
    let screen = tmux.wait_for("both tasks accepted and the outcome", |s| {
        a_done.is_match(s) && b_done.is_match(s) && s.contains("accepted (exit 0)")
    });
    assert!(screen.contains("DAG 2/2 accepted"), "{screen}");
    assert!(
        screen.contains("run.finished accepted (exit 0)"),
        "{screen}"
    );
    assert_eq!(apply.wait().unwrap().code(), Some(0));

    // The view stays until `q`; then the terminal is the shell's again, with the outcome.
    tmux.keys(&["q"]);
    let screen = tmux.wait_for("mvk watch to exit", |s| s.contains("[mvk exited "));
    assert!(screen.contains("[mvk exited 0]"), "{screen}");
    assert!(
        screen.contains(&format!("run {id}: accepted (exit 0)")),
        "{screen}"
    );
    assert!(
        !screen.contains("DAG"),
        "the view was left on the screen:\n{screen}"
    );
}

#[test]
fn watch_approves_a_waiting_checkpoint_with_a_key_and_the_run_goes_on() {
    let (f, run) = paused_at_a_step_checkpoint();
    let tmux = Tmux::mvk(&f, &["watch", &run.id], SIZE, &[]);
    let screen = tmux.wait_for("the checkpoint", |s| {
        s.contains("waits for a person: step checkpoint, attempt 1 · a approve · r reject")
    });
    assert!(screen.contains("waits for a person (exit 4)"), "{screen}");
    assert!(
        Regex::new(r"(?m)^│\? t +person +answer step +1/2 ")
            .unwrap()
            .is_match(&screen),
        "{screen}"
    );

    // A key asks first; nothing is recorded until the answer is confirmed.
    tmux.keys(&["a"]);
    tmux.wait_for("the question", |s| {
        s.contains("Approve attempt 1 of task `t` (step checkpoint)?")
    });
    assert_eq!(decisions(&f), [("step".to_string(), "-".to_string())]);
    tmux.keys(&["y"]);
    let screen = tmux.wait_for("the run's end", |s| s.contains("accepted (exit 0)"));
    assert!(
        Regex::new(r"(?m)^│✓ t +accepted ")
            .unwrap()
            .is_match(&screen),
        "{screen}"
    );
    // Recorded as `mvk approve` records it, and the same run went on to land the attempt.
    assert_eq!(decisions(&f), [("step".to_string(), "approve".to_string())]);
    assert_eq!(
        run_row(&f, &run.id),
        ("finished".to_string(), Some("accepted".to_string()))
    );
    assert_eq!(f.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    let events = std::fs::read_to_string(run.dir.join("events.jsonl")).unwrap();
    assert!(
        events.contains(r#""event":"checkpoint.answered""#),
        "{events}"
    );
    assert!(events.contains(r#""decision":"approve""#), "{events}");
    // The resume's output is kept in the run's directory.
    let logs: Vec<_> = std::fs::read_dir(&run.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("resume-") && n.ends_with(".log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");

    tmux.keys(&["q"]);
    let screen = tmux.wait_for("mvk watch to exit", |s| s.contains("[mvk exited "));
    assert!(screen.contains("[mvk exited 0]"), "{screen}");
}

#[test]
fn watch_rejects_with_a_reason_typed_in_the_view() {
    let (f, run) = paused_at_a_step_checkpoint();
    let tmux = Tmux::mvk(&f, &["watch"], SIZE, &[]);
    tmux.wait_for("the checkpoint", |s| s.contains("a approve · r reject"));
    tmux.keys(&["r"]);
    tmux.wait_for("the reason's prompt", |s| s.contains("): why?"));
    // An empty reason is refused in the view.
    tmux.keys(&["Enter"]);
    tmux.wait_for("the refusal", |s| s.contains("a rejection needs a reason"));
    tmux.keys(&["-l", "name the function sum"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the question", |s| {
        s.contains("Reject attempt 1 of task `t` (step checkpoint)?")
            && s.contains("reason: name the function sum")
    });
    tmux.keys(&["y"]);
    // Rejected: attempt 2 is made (it passes too) and waits at the step checkpoint again.
    tmux.wait_for("attempt 2 at the checkpoint", |s| {
        s.contains("step checkpoint, attempt 2")
    });
    assert_eq!(
        decisions(&f),
        [
            ("step".to_string(), "reject".to_string()),
            ("step".to_string(), "-".to_string())
        ]
    );
    let reason: String = Connection::open(f.root().join(".mvk/ledger.db"))
        .unwrap()
        .query_row(
            "SELECT reason FROM checkpoints WHERE decision = 'reject'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(reason, "name the function sum");
    // The reason is in the next attempt's prompt, as `mvk reject`'s would be.
    let prompt = std::fs::read_to_string(run.dir.join("t/2/prompt.md")).unwrap();
    assert!(prompt.contains("name the function sum"), "{prompt}");
}

/// The SGR parameters in TEXT (`\x1b[…m`), one list per sequence.
fn sgr_parameters(text: &str) -> Vec<Vec<u32>> {
    let sgr = Regex::new(r"\x1b\[([0-9;:]*)m").unwrap();
    sgr.captures_iter(text)
        .map(|c| {
            c[1].split([';', ':'])
                .map(|p| p.parse().unwrap_or(0))
                .collect()
        })
        .collect()
}

/// Whether an SGR parameter list sets a colour (foreground or background: 8, 16, 256 or RGB).
/// 39 and 49 (the terminal's default colours) set none: tmux writes them after every reset
/// (`0`) when it captures a pane with `-e`, colour or not.
fn sets_colour(params: &[u32]) -> bool {
    params
        .iter()
        .any(|p| matches!(p, 30..=38 | 40..=48 | 90..=97 | 100..=107))
}

#[test]
fn watch_draws_no_colour_under_no_color_and_colour_without_it() {
    let f = Fixture::new(&simple_loop("fix.sh", "budget iterations=2"));
    let run = f.apply();
    run.expect_code(0);

    let plain = Tmux::mvk(&f, &["watch"], SIZE, &[("NO_COLOR", Some("1"))]);
    plain.wait_for("the outcome", |s| s.contains("accepted (exit 0)"));
    let cells = plain.screen_with_attributes();
    let sgr = sgr_parameters(&cells);
    assert!(
        !sgr.is_empty(),
        "capture-pane -e shows no attribute at all (the header is bold):\n{cells:?}"
    );
    let coloured: Vec<_> = sgr.iter().filter(|p| sets_colour(p)).collect();
    assert!(
        coloured.is_empty(),
        "colour under NO_COLOR: {coloured:?}\n{cells:?}"
    );
    drop(plain);

    // The same view without NO_COLOR has colour: the check above can fail.
    let coloured = Tmux::mvk(&f, &["watch"], SIZE, &[("NO_COLOR", None)]);
    coloured.wait_for("the outcome", |s| s.contains("accepted (exit 0)"));
    let cells = coloured.screen_with_attributes();
    assert!(
        sgr_parameters(&cells).iter().any(|p| sets_colour(p)),
        "no colour without NO_COLOR:\n{cells:?}"
    );
}

#[test]
fn watch_replays_a_copied_event_stream_read_only() {
    let (f, run) = paused_at_a_step_checkpoint();
    // A copy outside the repository, as a CI artifact would be.
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("events.jsonl");
    std::fs::copy(run.dir.join("events.jsonl"), &copy).unwrap();
    let copy = copy.to_str().unwrap();

    let tmux = Tmux::mvk(&f, &["watch", "--events", copy], SIZE, &[]);
    let screen = tmux.wait_for("the paused run", |s| {
        s.contains("waits for a person (exit 4)") && s.contains("read-only replay of ")
    });
    assert!(screen.contains(&format!("run {}", run.id)), "{screen}");
    assert!(
        screen.contains("step checkpoint, attempt 1 · read-only here"),
        "{screen}"
    );
    tmux.keys(&["a"]);
    // The footer wraps the message onto two lines at 80 columns.
    let screen = tmux.wait_for("the refusal", |s| {
        s.contains("read-only replay: answer where the run's ledger is, with `mvk approve")
    });
    assert!(screen.contains(&format!("{} t`", run.id)), "{screen}");
    assert_eq!(decisions(&f), [("step".to_string(), "-".to_string())]);
    tmux.keys(&["q"]);
    tmux.wait_for("mvk watch to exit", |s| s.contains("[mvk exited 0]"));
    drop(tmux);

    // For a script: leave by itself when the run is over, with the run's exit code.
    let tmux = Tmux::mvk(
        &f,
        &["watch", "--events", copy, "--exit-when-done"],
        SIZE,
        &[],
    );
    let screen = tmux.wait_for("mvk watch to exit", |s| s.contains("[mvk exited "));
    assert!(screen.contains("[mvk exited 4]"), "{screen}");
    assert!(
        screen.contains(&format!("run {}: waits for a person (exit 4)", run.id)),
        "{screen}"
    );
}

#[test]
fn watch_off_a_terminal_is_a_usage_error_that_names_the_commands_for_scripts() {
    let (f, _) = paused_at_a_step_checkpoint();
    let out = f.mvk().args(["watch"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("needs a terminal"), "{stderr}");
    assert!(stderr.contains("mvk status [RUN]"), "{stderr}");
    assert!(stderr.contains("mvk log --follow [RUN]"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn watch_leaves_when_its_terminal_hangs_up() {
    let (f, _run) = paused_at_a_step_checkpoint();
    let tmux = Tmux::mvk(&f, &["watch"], SIZE, &[]);
    tmux.wait_for("the paused run", |s| {
        s.contains("waits for a person (exit 4)")
    });
    // The pane's shell runs mvk: its child.
    let shell = tmux.tmux(&["list-panes", "-F", "#{pane_pid}"]);
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", shell.trim())).unwrap();
    let mvk: u32 = children
        .split_whitespace()
        .next()
        .expect("the pane's shell runs mvk")
        .parse()
        .unwrap();
    assert!(crate::support::alive(mvk));
    // The window closes: the terminal hangs up under the view.
    tmux.tmux(&["kill-server"]);
    wait_until("mvk watch to leave a terminal that hung up", || {
        !crate::support::alive(mvk)
    });
}
