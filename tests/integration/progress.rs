//! What a person sees while a run goes on: the live view in a real terminal (tmux), heartbeat
//! lines off a terminal, a failing gate's last lines, and nothing with `--quiet`. The agent
//! (`talk_wait.sh`) prints a line, then waits for the test's `go`, so that the long step is as
//! long as the test needs and no assertion depends on timing.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use regex::Regex;

use crate::support::*;

/// The loop: agent `bot` runs `talk_wait.sh`, judged by the tests gate, with a token budget.
fn talking_fixture() -> Fixture {
    Fixture::new(&simple_loop(
        "talk_wait.sh",
        "budget iterations=2 tokens=100000",
    ))
}

/// A spinner glyph of indicatif's (the Braille block).
fn has_glyph(text: &str) -> bool {
    text.chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c))
}

/// `mvk apply loops/t.kdl ARGS…` in a 100×30 terminal.
fn apply_in_tmux(fixture: &Fixture, args: &[&str]) -> Tmux {
    let mut all = vec!["apply", "loops/t.kdl"];
    all.extend_from_slice(args);
    Tmux::mvk(fixture, &all, (100, 30), &[])
}

/// Waits (a minute at most) for FILE to exist.
fn wait_for_file(file: &Path) {
    let start = Instant::now();
    while !file.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} did not appear within a minute",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Regression: a long attempt showed only `⠉ t #1: attempt.started`, no time, no budget, no
/// output; and a spinner glyph stayed above the run id.
#[test]
fn a_terminal_shows_each_running_task_live_and_keeps_one_clean_line_per_step() {
    let fixture = talking_fixture();
    let tmux = apply_in_tmux(&fixture, &[]);
    // The live entry, once its elapsed time has moved on from 0s: redrawn in place.
    let live = Regex::new(
        r"(?m)^\S t #1: agent bot running [1-9]\d*s · rung 1/1, attempt 1/2, 0/100k tokens$",
    )
    .unwrap();
    let screen = tmux.wait_for("live entry", |s| {
        live.is_match(s) && s.contains("agent.out: reading")
    });
    let run = screen.lines().next().unwrap().trim().to_string();
    assert!(
        Regex::new(r"^\d{8}T\d{6}-[0-9a-f]{4}$")
            .unwrap()
            .is_match(&run),
        "the run id is the first line, alone:\n{screen}"
    );
    // Under it: the agent's log and its last line.
    let output = format!("  .mvk/runs/{run}/t/1/agent.out: reading src/calc.sh: add() subtracts");
    assert!(
        screen.lines().any(|l| l.trim_end() == output),
        "no `{output}` line:\n{screen}"
    );
    assert_eq!(screen.lines().filter(|l| live.is_match(l)).count(), 1);

    std::fs::write(fixture.state("go"), "").unwrap();
    tmux.wait_for("end of mvk", |s| s.contains("[mvk exited "));
    let all = tmux.everything();
    assert!(all.contains("[mvk exited 0]"), "{all}");
    assert!(!has_glyph(&all), "a spinner glyph was left:\n{all}");
    assert!(
        !all.contains("agent.out") && !all.contains("running"),
        "the live entry was left:\n{all}"
    );
    assert_eq!(all.lines().next().map(str::trim_end), Some(run.as_str()));
    // One line per finished step, each a line of its own.
    for step in [
        "t #1: agent exited 0 after ",
        "t #1: gate tests pass",
        "t #1: landed on main as ",
    ] {
        assert_eq!(
            all.lines().filter(|l| l.starts_with(step)).count(),
            1,
            "`{step}` once, at the start of a line:\n{all}"
        );
        assert_eq!(all.matches(step).count(), 1, "{all}");
    }
    assert!(all.contains("✓ t: "), "{all}");
}

/// Regression: Ctrl-C left the live entry's first line, spinner and all, above the run's last
/// words (the terminal's `^C` echo moved the cursor under the live view); and the terminal's
/// settings are given back as they were.
#[test]
fn ctrl_c_on_a_terminal_leaves_no_live_entry_behind() {
    let fixture = talking_fixture();
    let tmux = apply_in_tmux(&fixture, &[]);
    tmux.wait_for("live entry", |s| s.contains("agent.out: reading"));
    std::thread::sleep(Duration::from_millis(300));
    tmux.keys(&["C-c"]);
    tmux.wait_for("end of mvk", |s| s.contains("[mvk exited "));
    let all = tmux.everything();
    assert!(all.contains("[mvk exited 130]"), "{all}");
    assert!(all.contains("stopped by SIGINT (Ctrl-C)"), "{all}");
    assert!(!has_glyph(&all), "a spinner glyph was left:\n{all}");
    assert!(
        !all.contains("running ·"),
        "the live entry was left:\n{all}"
    );
}

/// Regression: off a terminal nothing was written until the agent exited.
#[test]
fn off_a_terminal_a_long_step_says_where_it_is_at_the_heartbeats_interval() {
    let fixture = talking_fixture();
    let mut child = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .env("MVK_PROGRESS_EVERY", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut run = String::new();
    out.read_line(&mut run).unwrap();
    let run = run.trim().to_string();
    let (tx, lines) = mpsc::channel::<String>();
    let err = BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in err.lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let beat = Regex::new(&format!(
        r"^t #1: agent bot running [1-9]\d*s \(rung 1/1, attempt 1/2, 0/100k tokens\), log \.mvk/runs/{run}/t/1/agent\.out$"
    ))
    .unwrap();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no heartbeat within a minute:\n{}", seen.join("\n")));
        let found = beat.is_match(&line);
        seen.push(line);
        if found {
            break;
        }
    }
    // The agent waits for `go`: the heartbeat came while it ran.
    assert!(!seen.iter().any(|l| l.contains("agent exited")), "{seen:?}");
    std::fs::write(fixture.state("go"), "").unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    seen.extend(lines.try_iter());
    let text = seen.join("\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("t #1: agent exited 0 after "), "{text}");
    assert!(!has_glyph(&text) && !text.contains('\u{1b}'), "{text}");
}

/// The loop: agent `bot` runs SCRIPT, judged by `checks/noisy.sh` (fifteen coloured lines, then
/// the failure, exit 1) alone, one attempt.
fn noisy_gate_fixture(script: &str) -> Fixture {
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", script, &["@STATE"]),
        true,
        r#"gate noisy evidence="none" { run "sh" "checks/noisy.sh"; }"#,
        "budget iterations=1",
    ));
    std::fs::write(
        fixture.root().join("checks/noisy.sh"),
        "i=1\nwhile [ $i -le 15 ]; do printf '\\033[2mline %s\\033[0m\\n' $i; i=$((i + 1)); done\nprintf '\\033[31mFAIL: add 2 3 is -1\\033[0m\\n\\n'\nexit 1\n",
    )
    .unwrap();
    fixture.git(&["add", "checks/noisy.sh"]);
    fixture.git(&["commit", "-q", "-m", "a noisy gate"]);
    fixture
}

/// Regression: a failing gate's cause was not on the console, only in its log.
#[test]
fn a_failing_gates_last_lines_are_on_the_console_without_escape_codes() {
    let fixture = noisy_gate_fixture("noop.sh");
    let out = fixture
        .mvk()
        .args(["apply", "loops/t.kdl"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let run = stdout.lines().next().unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    let gate = lines
        .iter()
        .position(|l| l.starts_with("t #1: gate noisy fail"))
        .unwrap_or_else(|| panic!("no gate line:\n{stderr}"));
    // The last ten lines with something in them, then where the whole log is.
    let mut expected: Vec<String> = (7..=15).map(|i| format!("  │ line {i}")).collect();
    expected.push("  │ FAIL: add 2 3 is -1".into());
    expected.push(format!("  └ .mvk/runs/{run}/t/1/gate-noisy.log"));
    assert_eq!(
        lines[gate + 1..=gate + expected.len()],
        expected.iter().map(String::as_str).collect::<Vec<_>>()[..],
        "{stderr}"
    );
    assert!(!stderr.contains("line 6\n"), "ten lines at most:\n{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "escape codes stripped:\n{stderr}"
    );
}

/// `--quiet` prints only errors: no live view, no step lines, no heartbeat, no gate tail.
#[test]
fn quiet_shows_no_progress_on_a_terminal_or_off_one() {
    // Off a terminal, with a heartbeat every second and a gate that fails.
    let fixture = noisy_gate_fixture("talk_wait.sh");
    let child = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl", "--quiet"])
        .env("MVK_PROGRESS_EVERY", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&fixture.state("agent-started"));
    // Three heartbeats' time: a heartbeat that --quiet let through would be written by now.
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(fixture.state("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stderr, "", "--quiet: nothing on stderr");
    assert!(
        stdout.contains("✗ t: "),
        "the summary is the result:\n{stdout}"
    );

    // On a terminal.
    let fixture = talking_fixture();
    let tmux = apply_in_tmux(&fixture, &["--quiet"]);
    wait_for_file(&fixture.state("agent-started"));
    // Eight redraws' time: a live view --quiet let through would be drawn by now.
    std::thread::sleep(Duration::from_secs(1));
    let screen = tmux.screen();
    assert_eq!(
        screen.trim_end().lines().count(),
        1,
        "only the run id while the agent runs:\n{screen}"
    );
    std::fs::write(fixture.state("go"), "").unwrap();
    tmux.wait_for("end of mvk", |s| s.contains("[mvk exited "));
    let all = tmux.everything();
    let lines: Vec<&str> = all.trim_end().lines().map(str::trim_end).collect();
    assert_eq!(lines.len(), 4, "the run id, the summary, the exit:\n{all}");
    assert!(
        lines[1].starts_with("✓ t: ") && lines[3] == "[mvk exited 0]",
        "{all}"
    );
    assert!(!has_glyph(&all), "{all}");
}
