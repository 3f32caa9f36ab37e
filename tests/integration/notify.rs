//! Notifications through the binary: webhooks against an HTTP server the test serves on
//! 127.0.0.1 (the documented body, a retry after a 500, a refusal not retried, a timeout, a Slack
//! body, a stop signal heard), a command told of a waiting checkpoint, and the secrets named in
//! the loop found nowhere mvk writes or prints.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::support::{Fixture, Run, simple_loop};

/// What the test server does with one request.
#[derive(Clone, Copy)]
enum Answer {
    Status(u16, &'static str),
    /// Reads the request and never answers.
    Silence,
}

/// One request the server got.
#[derive(Debug, Clone)]
struct Request {
    head: String,
    body: Value,
}

impl Request {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// An HTTP server on 127.0.0.1 that answers requests in turn as `answers` says (the last one
/// for every request after) and records them.
struct Hook {
    port: u16,
    got: Arc<Mutex<Vec<Request>>>,
}

impl Hook {
    fn serve(answers: &[Answer]) -> Hook {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let (answers, seen) = (answers.to_vec(), Arc::clone(&got));
        std::thread::spawn(move || {
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let answer = answers[n.min(answers.len() - 1)];
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || answer_one(stream, answer, &seen));
            }
        });
        Hook { port, got }
    }

    /// The URL the loop reads from the environment: its path is the secret.
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks/T0/{SECRET_PATH}", self.port)
    }

    fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

fn answer_one(stream: TcpStream, answer: Answer, seen: &Mutex<Vec<Request>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    seen.lock().unwrap().push(Request {
        head,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let mut stream = stream;
    match answer {
        Answer::Status(code, text) => {
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
        Answer::Silence => std::thread::sleep(Duration::from_secs(60)),
    }
}

const SECRET_PATH: &str = "s3cr3t-hook-path-7f3a";
const TOKEN: &str = "tok-s3cr3t-bearer-91c2";

/// A loop whose agent fixes the bug at once, and whose notification `chat` (NOTIFY's settings)
/// posts to `$MVK_TEST_HOOK` with the bearer token of `$MVK_TEST_TOKEN`; plus EXTRA.
fn hooked(notify: &str, webhook: &str, extra: &str) -> Fixture {
    Fixture::new(&simple_loop(
        "fix.sh",
        &format!(
            "notify chat {notify} {{\n        webhook env=\"MVK_TEST_HOOK\" {webhook} {{\n            header \"Authorization\" env=\"MVK_TEST_TOKEN\" prefix=\"Bearer \"\n        }}\n    }}\n    {extra}"
        ),
    ))
}

fn apply_hooked(f: &Fixture, hook: &Hook, args: &[&str]) -> (Run, String) {
    let url = hook.url();
    let mut cmd = f.mvk();
    cmd.args(["apply", "loops/t.kdl"])
        .args(args)
        .env("MVK_TEST_HOOK", &url)
        .env("MVK_TEST_TOKEN", TOKEN);
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (f.run_of(&out, false), stderr)
}

/// The secrets appear nowhere mvk writes (the ledger and its WAL, the trail, the status files)
/// nor in what it printed.
fn nothing_leaked(f: &Fixture, run: &Run, stderr: &str) {
    let mvk = f.root().join(".mvk");
    let mut places: Vec<(String, String)> = vec![
        ("stdout".into(), run.stdout.clone()),
        ("stderr".into(), stderr.to_string()),
    ];
    for entry in walkdir::WalkDir::new(&mvk).into_iter().flatten() {
        if entry.file_type().is_file() {
            let bytes = std::fs::read(entry.path()).unwrap_or_default();
            places.push((
                entry.path().display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    assert!(places.iter().any(|(p, _)| p.ends_with("ledger.db")));
    for (place, text) in places {
        for secret in [SECRET_PATH, TOKEN] {
            assert!(
                !text.contains(secret),
                "`{secret}` leaked into {place}\n{}",
                run.why()
            );
        }
    }
}

#[test]
fn a_webhook_hears_the_run_finish_with_the_documented_body_after_a_500() {
    let hook = Hook::serve(&[Answer::Status(500, "busy"), Answer::Status(200, "ok")]);
    let f = hooked("on=\"finished\" retries=2", "", "");
    let (run, stderr) = apply_hooked(&f, &hook, &[]);
    run.expect_code(0);
    let got = hook.requests();
    assert_eq!(
        got.len(),
        2,
        "one try and one retry: {got:?}\n{}",
        run.why()
    );
    // The retry sends the same delivery, so a receiver can drop a repeat.
    assert_eq!(got[0].body, got[1].body);
    let req = &got[1];
    assert!(
        req.head
            .starts_with(&format!("POST /hooks/T0/{SECRET_PATH} ")),
        "{}",
        req.head
    );
    assert_eq!(req.header("authorization"), Some(format!("Bearer {TOKEN}")));
    assert_eq!(
        req.header("content-type").as_deref(),
        Some("application/json")
    );
    let body = &req.body;
    assert_eq!(body["schema"], "mvk.notify.v1");
    assert_eq!(body["event"], "finished");
    assert_eq!(body["notification"], "chat");
    assert_eq!(body["run"], run.id.as_str());
    assert_eq!(body["program"], "t");
    assert_eq!(body["file"], "loops/t.kdl");
    assert_eq!(body["outcome"], "accepted");
    assert_eq!(body["exit_code"], 0);
    assert_eq!(body["commands"]["status"], format!("mvk status {}", run.id));
    assert_eq!(req.header("x-mvk-delivery").as_deref(), body["id"].as_str());
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("finished accepted"),
        "{body}"
    );
    // Heard once: the run's end, not also the task's (the loop is the run).
    let sent = run.one("notify.sent");
    assert_eq!(sent["detail"]["tries"], 2, "{}", run.why());
    assert_eq!(sent["detail"]["event"], "finished");
    run.none("notify.failed");
    nothing_leaked(&f, &run, &stderr);
}

#[test]
fn a_webhook_that_never_answers_times_out_and_the_run_keeps_its_exit_code() {
    let hook = Hook::serve(&[Answer::Silence]);
    // The agent changes nothing: one attempt, and the iterations budget ends the run (exit 3).
    let f = Fixture::new(&simple_loop(
        "noop.sh",
        "budget iterations=1\n    notify chat on=\"finished\" timeout=\"1s\" retries=1 {\n        webhook env=\"MVK_TEST_HOOK\"\n    }",
    ));
    let started = Instant::now();
    let (run, stderr) = apply_hooked(&f, &hook, &[]);
    run.expect_code(3);
    // Two tries of a second each, a pause between, then the process ends: bounded.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(hook.requests().len(), 2, "{}", run.why());
    let failed = run.one("notify.failed");
    assert_eq!(failed["detail"]["tries"], 2);
    let error = failed["detail"]["error"].as_str().unwrap();
    assert!(
        error.contains("$MVK_TEST_HOOK gave no answer within 1s"),
        "{error}"
    );
    assert!(stderr.contains("notification `chat`"), "{stderr}");
    nothing_leaked(&f, &run, &stderr);
}

#[test]
fn a_slack_webhook_gets_text_and_a_refusal_is_not_retried() {
    let hook = Hook::serve(&[Answer::Status(404, "no_service")]);
    let f = hooked("on=\"finished\" retries=3", "format=\"slack\"", "");
    let (run, stderr) = apply_hooked(&f, &hook, &[]);
    run.expect_code(0);
    let got = hook.requests();
    assert_eq!(got.len(), 1, "a 4xx is not tried again: {got:?}");
    let text = got[0].body["text"].as_str().unwrap();
    assert!(
        text.starts_with(":white_check_mark: *mvk* `t` finished accepted"),
        "{text}"
    );
    assert!(text.contains(&format!("`mvk status {}`", run.id)), "{text}");
    let failed = run.one("notify.failed");
    assert_eq!(failed["detail"]["tries"], 1);
    assert_eq!(
        failed["detail"]["error"],
        "$MVK_TEST_HOOK answered HTTP 404: no_service"
    );
    nothing_leaked(&f, &run, &stderr);
}

#[test]
fn a_command_hears_a_waiting_checkpoint_with_the_event_s_fields() {
    let f = Fixture::new(&simple_loop(
        "fix.sh",
        "notify desk on=\"waiting\" {\n        run \"sh\" \"@AGENTS/notify_record.sh\" \"@STATE/desk\" \"{{event}}\" \"{{task}}\" \"{{checkpoint}}\" \"{{approve_command}}\"\n    }",
    ));
    let run = f.apply_with(&["--mode", "step"], &[]);
    run.expect_code(4);
    run.one("checkpoint.waiting");
    assert_eq!(run.one("notify.sent")["detail"]["event"], "waiting");
    let argv = std::fs::read_to_string(f.state("desk.argv")).unwrap();
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        ["waiting", "t", "step", &format!("mvk approve {} t", run.id)]
    );
    let body: Value =
        serde_json::from_str(&std::fs::read_to_string(f.state("desk.json")).unwrap()).unwrap();
    assert_eq!(body["event"], "waiting");
    assert_eq!(body["task"], "t");
    assert_eq!(body["attempt"], 1);
    assert_eq!(body["checkpoint"]["kind"], "step");
    assert_eq!(
        body["commands"]["reject"],
        format!("mvk reject {} t --reason \"what to do instead\"", run.id)
    );
    let env = std::fs::read_to_string(f.state("desk.env")).unwrap();
    assert_eq!(env.trim(), "waiting t");
}

#[test]
fn a_failing_command_is_logged_and_leaves_the_exit_code_alone() {
    let f = Fixture::new(&simple_loop(
        "fix.sh",
        "notify desk retries=1 { sh \"echo about to fail >&2; exit 7\"; }",
    ));
    let run = f.apply();
    run.expect_code(0);
    let failed = run.one("notify.failed");
    assert_eq!(failed["detail"]["tries"], 2);
    let error = failed["detail"]["error"].as_str().unwrap();
    assert!(error.contains("`sh` exited with 7"), "{error}");
    let log = std::fs::read_to_string(run.dir.join("notify/desk.log")).unwrap();
    assert_eq!(log.matches("about to fail").count(), 2, "{log}");
}

#[test]
fn a_stop_signal_is_heard_before_the_process_exits() {
    let hook = Hook::serve(&[Answer::Status(200, "ok")]);
    let f = hooked("on=\"interrupted finished\"", "", "");
    // An agent that hangs until told to go: the run is stopped while it works.
    std::fs::write(
        f.root().join("loops/t.kdl"),
        std::fs::read_to_string(f.root().join("loops/t.kdl"))
            .unwrap()
            .replace("fix.sh", "paused.sh"),
    )
    .unwrap();
    f.git(&["commit", "-q", "-am", "a hanging agent"]);
    let child = f
        .mvk_std()
        .args(["apply", "loops/t.kdl"])
        .env("MVK_TEST_HOOK", hook.url())
        .env("MVK_TEST_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f.state("started").exists() {
        assert!(Instant::now() < deadline, "the agent never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let run = f.run_of(&out, false);
    run.expect_code(130);
    let got = hook.requests();
    assert_eq!(got.len(), 1, "{got:?}\n{}", run.why());
    let body = &got[0].body;
    assert_eq!(body["event"], "interrupted");
    assert_eq!(body["outcome"], "interrupted");
    assert_eq!(body["commands"]["resume"], format!("mvk resume {}", run.id));
    assert!(
        body["message"].as_str().unwrap().contains("SIGINT"),
        "{body}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    nothing_leaked(&f, &run, &stderr);
}

#[test]
fn a_budget_reaching_its_fraction_is_heard_once_with_its_figures() {
    // One attempt spends $0.25 of a $0.30 budget (83%): `at=0.8` is reached, `at` 0.9 of
    // another notification is not.
    let f = Fixture::new(&simple_loop(
        "usage_fix.sh",
        "budget usd=0.3\n    notify desk on=\"budget\" at=0.8 {\n        run \"sh\" \"@AGENTS/notify_record.sh\" \"@STATE/desk\" \"{{budget}}\" \"{{spent}}\" \"{{limit}}\" \"{{at}}\"\n    }\n    notify late on=\"budget\" at=0.9 { sh \"touch @STATE/late\"; }",
    ));
    let run = f.apply();
    run.expect_code(0);
    let reached = run.one("budget.threshold");
    assert_eq!(reached["task"], "t");
    assert_eq!(reached["detail"]["budget"], "usd");
    assert_eq!(reached["detail"]["spent"], 250_000);
    assert_eq!(reached["detail"]["limit"], 300_000);
    assert_eq!(reached["detail"]["at"], 800);
    let argv = std::fs::read_to_string(f.state("desk.argv")).unwrap();
    assert_eq!(
        argv.lines().collect::<Vec<_>>(),
        ["usd", "$0.25", "$0.30", "80%"]
    );
    let body: Value =
        serde_json::from_str(&std::fs::read_to_string(f.state("desk.json")).unwrap()).unwrap();
    assert_eq!(body["event"], "budget");
    assert_eq!(body["budget"]["unit"], "usd");
    assert_eq!(body["budget"]["at"], 0.8);
    assert!(!f.state("late").exists(), "{}", run.why());
    assert_eq!(run.one("notify.sent")["detail"]["notification"], "desk");
}
