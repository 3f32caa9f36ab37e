//! The stdlib's agents as shipped, run by `mvk apply` with the real CLIs (Claude Code, Codex,
//! the Gemini CLI, aider; pinned and installed by tests/tools/install.sh), each pointed at the
//! scripted model API of tests/tools/model_api on 127.0.0.1: the program is real (it reads the
//! prompt, edits with its own tools, runs the tests, prints its own JSON, usage and cost); only
//! the model's answers are scripted. Nothing can go beyond 127.0.0.1: as root, the stub and
//! `mvk apply` run in a network namespace of their own with only loopback up.
//!
//! For each agent: a bug fixed and landed on main after a 429 that the CLI gave up on (mvk
//! waits and runs the same attempt again), with mvk's tokens and dollars equal to what the agent
//! printed (or to the price table's figure where it prints none), and nothing but the fix
//! landed; and, as a reviewer, a rejection whose blockers reach the maker's next prompt, then an
//! approval. When the tests run as root, each runs again as an ordinary user (`nobody`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Fixture, Run};

/// The bug: `total(n)` leaves out `n`.
const CALC: &str =
    "def total(n):\n    \"\"\"Sum of 1..n inclusive.\"\"\"\n    return sum(range(1, n))\n";
const FIXED: &str =
    "def total(n):\n    \"\"\"Sum of 1..n inclusive.\"\"\"\n    return sum(range(1, n + 1))\n";
const TEST: &str = "import unittest\n\nfrom calc import total\n\n\nclass TotalTest(unittest.TestCase):\n    def test_total(self):\n        self.assertEqual(total(3), 6)\n\n\nif __name__ == \"__main__\":\n    unittest.main()\n";

/// The reviewer's first answer: a rejection with a blocker the maker's next prompt must carry.
const BLOCKER: &str = "total(0) must stay 0: say so in the docstring";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cli {
    Claude,
    Codex,
    Gemini,
    Aider,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Aider => "aider",
        }
    }

    /// The stdlib agent as a loop names it (aider through an OpenAI-compatible endpoint).
    fn agent_use(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Aider => "aider model=\"openai/stub\"",
        }
    }

    /// The environment (and configuration files under HOME) that point the CLI at the stub, with
    /// its own retries of a 429 turned off so that mvk sees the limit.
    fn setup(self, stub: &Stub, home: &Path) -> Vec<(String, String)> {
        let base = format!("http://127.0.0.1:{}", stub.port);
        let mut env = vec![("HOME".to_string(), home.display().to_string())];
        let mut set = |k: &str, v: &str| env.push((k.to_string(), v.to_string()));
        match self {
            Cli::Claude => {
                set("ANTHROPIC_BASE_URL", &base);
                set("ANTHROPIC_API_KEY", "sk-ant-stub");
                set("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
                set("CLAUDE_CODE_MAX_RETRIES", "0");
            }
            Cli::Codex => {
                let codex_home = home.join(".codex");
                fs::create_dir_all(&codex_home).unwrap();
                fs::write(
                    codex_home.join("config.toml"),
                    format!(
                        "model_provider = \"stub\"\n\n[model_providers.stub]\nname = \"Stub\"\n\
                         base_url = \"{base}/v1\"\nenv_key = \"STUB_API_KEY\"\n\
                         stream_max_retries = 0\n"
                    ),
                )
                .unwrap();
                set("CODEX_HOME", &codex_home.display().to_string());
                set("STUB_API_KEY", "sk-stub");
            }
            Cli::Gemini => {
                let dir = home.join(".gemini");
                fs::create_dir_all(&dir).unwrap();
                let settings = json!({
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "privacy": {"usageStatisticsEnabled": false},
                    "telemetry": {"enabled": false},
                    "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false, "maxAttempts": 1}
                });
                fs::write(dir.join("settings.json"), settings.to_string()).unwrap();
                set("GOOGLE_GEMINI_BASE_URL", &base);
                set("GEMINI_API_KEY", "stub-key");
            }
            Cli::Aider => {
                // aider prices a model from litellm's table, here given for the stub's model
                // (litellm's own copy, not a download).
                let metadata = home.join("model-metadata.json");
                let price = json!({"openai/stub": {
                    "max_input_tokens": 128000, "max_output_tokens": 16384,
                    "input_cost_per_token": 1e-05, "output_cost_per_token": 3e-05,
                    "litellm_provider": "openai", "mode": "chat"
                }});
                fs::write(&metadata, price.to_string()).unwrap();
                set("AIDER_MODEL_METADATA_FILE", &metadata.display().to_string());
                set("LITELLM_LOCAL_MODEL_COST_MAP", "True");
                set("BROWSER", "true");
                set("OPENAI_API_BASE", &format!("{base}/v1"));
                set("OPENAI_API_KEY", "sk-stub");
            }
        }
        env
    }

    /// Tokens and micro-dollars as the CLI itself printed them in one stdout log (dollars
    /// priced from the stdlib's table where it prints none).
    fn printed(self, log: &Path) -> (u64, u64) {
        let text = fs::read_to_string(log).unwrap_or_default();
        let per_mtok = |tokens: u64, usd: f64| (tokens as f64 * usd).round() as u64;
        match self {
            Cli::Claude => {
                let Some(v) = text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find(|v| v["type"] == "result")
                else {
                    return (0, 0);
                };
                let u = &v["usage"];
                let tokens = [
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                    "output_tokens",
                ]
                .iter()
                .map(|k| u[*k].as_u64().unwrap_or(0))
                .sum();
                let usd = v["total_cost_usd"].as_f64().unwrap_or(0.0);
                (tokens, (usd * 1e6).round() as u64)
            }
            Cli::Codex => {
                let (mut input, mut cached, mut output) = (0, 0, 0);
                for v in text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                {
                    if v["type"] == "turn.completed" {
                        input += v["usage"]["input_tokens"].as_u64().unwrap_or(0);
                        cached += v["usage"]["cached_input_tokens"].as_u64().unwrap_or(0);
                        output += v["usage"]["output_tokens"].as_u64().unwrap_or(0);
                    }
                }
                // std/prices.kdl: gpt-6.1-sol, $2.00 in, $0.10 cached, $10.00 out per million.
                let usd =
                    per_mtok(input - cached, 2.0) + per_mtok(cached, 0.1) + per_mtok(output, 10.0);
                (input + output, usd)
            }
            Cli::Gemini => {
                // stream-json (the stdlib's): its `result` event's totals.
                if let Some(v) = text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find(|v| v["type"] == "result")
                {
                    let st = &v["stats"];
                    let n = |k: &str| st[k].as_u64().unwrap_or(0);
                    let (input, cached) = (n("input_tokens"), n("cached"));
                    let output = n("output_tokens").max(n("total_tokens").saturating_sub(input));
                    let usd = per_mtok(input - cached, 1.25)
                        + per_mtok(cached, 0.125)
                        + per_mtok(output, 10.0);
                    return (input + output, usd);
                }
                let Ok(v) = serde_json::from_str::<Value>(text.trim()) else {
                    return (0, 0);
                };
                let (mut prompt, mut cached, mut output) = (0, 0, 0);
                for m in v["stats"]["models"]
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.values())
                {
                    let t = &m["tokens"];
                    prompt += t["prompt"].as_u64().unwrap_or(0) + t["tool"].as_u64().unwrap_or(0);
                    cached += t["cached"].as_u64().unwrap_or(0);
                    output +=
                        t["candidates"].as_u64().unwrap_or(0) + t["thoughts"].as_u64().unwrap_or(0);
                }
                // std/prices.kdl: gemini-2.5-pro, $1.25 in, $0.125 cached, $10.00 out per million.
                let usd = per_mtok(prompt - cached, 1.25)
                    + per_mtok(cached, 0.125)
                    + per_mtok(output, 10.0);
                (prompt + output, usd)
            }
            Cli::Aider => aider_printed(&text),
        }
    }
}

/// aider's `Tokens: N sent, M received. Cost: $X message, $Y session.` lines: the tokens and the
/// sum of the message costs.
fn aider_printed(text: &str) -> (u64, u64) {
    let count = |s: &str| -> u64 {
        let (num, mult) = match s.chars().last() {
            Some('k') => (&s[..s.len() - 1], 1e3),
            Some('M') => (&s[..s.len() - 1], 1e6),
            _ => (s, 1.0),
        };
        (num.parse::<f64>().unwrap_or(0.0) * mult).round() as u64
    };
    let (mut tokens, mut usd) = (0u64, 0u64);
    for line in text.lines() {
        if let Some(rest) = line.split("Tokens: ").nth(1) {
            let sent = rest.split(" sent").next().unwrap_or("0");
            let received = rest
                .split(", ")
                .find(|p| p.ends_with(" received.") || p.contains(" received"))
                .and_then(|p| p.split(' ').next())
                .unwrap_or("0");
            tokens += count(sent) + count(received);
        }
        if let Some(rest) = line.split("Cost: $").nth(1) {
            let message = rest.split(' ').next().unwrap_or("0");
            usd += (message.parse::<f64>().unwrap_or(0.0) * 1e6).round() as u64;
        }
    }
    (tokens, usd)
}

/// The model API stub, serving SCRIPT on a port of its own until dropped.
struct Stub {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Stub {
    fn start(script: &Value, netns: Option<&Netns>) -> Stub {
        let dir = tempfile::tempdir().unwrap();
        let script_path = dir.path().join("script.json");
        fs::write(&script_path, script.to_string()).unwrap();
        let port_file = dir.path().join("port");
        let log = dir.path().join("requests.jsonl");
        let api = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools/model_api");
        let mut cmd = match netns {
            Some(n) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &n.name, "python3"]);
                c
            }
            None => Command::new("python3"),
        };
        let child = cmd
            .arg(&api)
            .arg("--script")
            .arg(&script_path)
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs the model API stub");
        let started = Instant::now();
        let port = loop {
            if let Some(p) = fs::read_to_string(&port_file)
                .ok()
                .and_then(|t| t.trim().parse().ok())
            {
                break p;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the model API stub did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Stub {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// Every request the stub answered.
    fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The maker's conversation: write the fix with the agent's own tool, run the tests, say so.
fn fixing_steps() -> Value {
    json!([
        {"write": {"path": "calc.py", "content": FIXED}},
        {"shell": "python3 -m pytest -q test_calc.py"},
        {"text": "Fixed the off-by-one in total(): the range now includes n."}
    ])
}

/// A verdict as the contract has it, as the reviewer's final message.
fn verdict(approve: bool) -> String {
    if approve {
        json!({"verdict": "approve", "blockers": [], "notes": ["the range now includes n"]})
            .to_string()
    } else {
        json!({
            "verdict": "reject",
            "blockers": [{"category": "correctness", "evidence": BLOCKER, "location": "calc.py:2"}],
            "notes": []
        })
        .to_string()
    }
}

/// A repository with calc.py (the bug), its sealed test, and the loop: AGENT makes the change,
/// REVIEW (if any) reviews it.
fn project(agent: &str, review: Option<&str>, defs: &str) -> (Fixture, String) {
    let review = review
        .map(|r| format!("    review agent={r} rounds=2\n"))
        .unwrap_or_default();
    let text = format!(
        "import \"std/agents.kdl\"\n{defs}\n\
         loop t {{\n    \
         goal \"Make test_calc.py pass: total(n) sums 1..n inclusive. Do not change the test.\"\n    \
         agent {agent}\n    \
         scope \"calc.py\"\n    \
         seal \"test_calc.py\"\n    \
         gate tests {{ run \"python3\" \"-m\" \"pytest\" \"-q\" \"test_calc.py\"; }}\n\
         {review}    \
         budget iterations=3 usd=1.0 wall=\"15m\"\n}}\n"
    );
    let fixture = Fixture::new(&text);
    fs::write(fixture.root().join("calc.py"), CALC).unwrap();
    fs::write(fixture.root().join("test_calc.py"), TEST).unwrap();
    fixture.git(&["add", "calc.py", "test_calc.py"]);
    fixture.git(&["commit", "-q", "-m", "calc"]);
    let start = fixture.tip("main");
    (fixture, start)
}

/// Runs `mvk apply` with ENV (as USER when given: the repository, the worktrees and HOME are
/// theirs while it runs).
fn apply(
    fixture: &Fixture,
    env: &[(String, String)],
    user: Option<&User>,
    netns: Option<&Netns>,
) -> Run {
    let dirs = [
        fixture.root(),
        fixture.worktrees.path(),
        fixture.state.path(),
    ];
    // In the namespace, when there is one: `ip netns exec NAME` first.
    let start = |program: &Path| match netns {
        Some(n) => {
            let mut c = fixture.mvk_at(Path::new("ip"));
            c.args(["netns", "exec", &n.name]).arg(program);
            c
        }
        None => fixture.mvk_at(program),
    };
    let mut cmd = match user {
        None => start(&assert_cmd::cargo::cargo_bin("mvk")),
        Some(u) => {
            for dir in dirs {
                u.own(dir);
            }
            let mut c = start(Path::new("setpriv"));
            c.args([
                format!("--reuid={}", u.uid),
                format!("--regid={}", u.gid),
                "--clear-groups".into(),
                "--".into(),
            ])
            .arg(assert_cmd::cargo::cargo_bin("mvk"))
            // Root's tools (under /root) are out of their reach: the agents' own, and the system.
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", u.agents.display()),
            );
            c
        }
    };
    // What the machine running the tests may have set must not decide the test.
    cmd.env_remove("IS_SANDBOX")
        .env("NO_UPDATE_NOTIFIER", "1")
        .args(["apply", "loops/t.kdl"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    if let Some(u) = user {
        // Back to this process's user: git refuses a repository another user owns.
        for dir in dirs {
            u.disown(dir);
        }
    }
    fixture.run_of(&out, false)
}

/// A network namespace with only loopback up, made when the tests run as root: the stub and
/// `mvk apply` (so every agent and gate) run in it, so nothing can reach beyond 127.0.0.1.
struct Netns {
    name: String,
}

impl Netns {
    /// `None` when this process is not root, or the machine cannot make one (no `ip`, no
    /// CAP_SYS_ADMIN in a container): the tests then run in the machine's network, and say so.
    fn new() -> Option<Netns> {
        let out = Command::new("id").arg("-u").output().ok()?;
        if String::from_utf8_lossy(&out.stdout).trim() != "0" {
            eprintln!(
                "real_agents: not root, so no network namespace: 127.0.0.1 only by configuration"
            );
            return None;
        }
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("mvk-agents-{}-{n}", std::process::id());
        let ip = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ip(&["netns", "add", &name]) {
            eprintln!(
                "real_agents: `ip netns add` failed, so no network namespace: 127.0.0.1 only by configuration"
            );
            return None;
        }
        let netns = Netns { name };
        ip(&[
            "netns",
            "exec",
            &netns.name,
            "ip",
            "link",
            "set",
            "lo",
            "up",
        ])
        .then_some(netns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}

/// An ordinary user the tests can become (when they run as root), and where the agents it can
/// run are (tests/tools/install.sh puts them under /opt as root).
struct User {
    uid: u32,
    gid: u32,
    agents: PathBuf,
}

impl User {
    /// `nobody`, when this process is root; `None` otherwise (the tests already run as one).
    fn ordinary() -> Option<User> {
        let id = |args: &[&str]| -> u32 {
            let out = Command::new("id").args(args).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        if id(&["-u"]) != 0 {
            return None;
        }
        let agents = std::env::var_os("MVK_TEST_AGENTS")
            .map_or_else(|| PathBuf::from("/opt/mvk-test-agents"), PathBuf::from)
            .join("bin");
        assert!(
            agents.join("claude").exists(),
            "{} holds no agents: run tests/tools/install.sh first",
            agents.display()
        );
        Some(User {
            uid: id(&["-u", "nobody"]),
            gid: id(&["-g", "nobody"]),
            agents,
        })
    }

    fn own(&self, dir: &Path) {
        chown(dir, self.uid, self.gid);
    }

    fn disown(&self, dir: &Path) {
        chown(dir, 0, 0);
    }
}

fn chown(dir: &Path, uid: u32, gid: u32) {
    let status = Command::new("chown")
        .args(["-R", &format!("{uid}:{gid}")])
        .arg(dir)
        .status()
        .unwrap();
    assert!(status.success(), "chown {}", dir.display());
}

/// The run as root, then as an ordinary user when root.
fn as_each_user(test: impl Fn(Option<&User>)) {
    test(None);
    if let Some(user) = User::ordinary() {
        test(Some(&user));
    }
}

/// Every stdout log the agent left for attempt 1: its last try and each rate-limited one.
fn agent_logs(run: &Run, attempt: u32) -> Vec<PathBuf> {
    let dir = run.attempt_dir(attempt);
    let mut logs: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name == "agent.out" || (name.starts_with("agent.limited-") && name.ends_with(".out"))
        })
        .collect();
    logs.sort();
    logs
}

/// A fix landed after one 429 the CLI gave up on: the same attempt ran again after mvk's wait;
/// mvk's tokens and dollars are the CLI's own figures; main holds the fix and nothing else.
fn fixes_after_a_rate_limit(cli: Cli, user: Option<&User>) {
    let netns = Netns::new();
    // aider cannot be told to retry less: its own nine tries of three requests each must pass.
    let limits = if cli == Cli::Aider { 27 } else { 1 };
    let stub = Stub::start(
        &json!({
            "rate_limit": limits,
            "retry_after": 1,
            "usage": {"input": 1200, "output": 80, "cached": 300},
            "steps": fixing_steps(),
        }),
        netns.as_ref(),
    );
    let (fixture, start) = project(cli.agent_use(), None, "");
    let home = tempfile::tempdir().unwrap();
    let env = cli.setup(&stub, home.path());
    if let Some(u) = user {
        u.own(home.path());
    }
    let run = apply(&fixture, &env, user, netns.as_ref());
    let who = format!(
        "{} as {}",
        cli.name(),
        if user.is_some() { "nobody" } else { "root" }
    );
    run.expect_code(0);
    assert_eq!(run.attempts(), [1], "{who}: one attempt\n{}", run.why());
    let limited = run.named("agent.rate-limited");
    assert_eq!(
        limited.len(),
        1,
        "{who}: one rate limit, waited out\n{}",
        run.why()
    );
    assert_eq!(
        fixture.show("main", "calc.py").as_deref(),
        Some(FIXED),
        "{who}: the fix is on main\n{}",
        run.why()
    );
    let changed = fixture.git(&["diff", "--name-only", &start, "main"]);
    assert_eq!(
        changed.lines().collect::<Vec<_>>(),
        ["calc.py"],
        "{who}: nothing but the fix lands (no history, cache or .gitignore of the agent's)\n{}",
        run.why()
    );
    let logs = agent_logs(&run, 1);
    assert_eq!(
        logs.len(),
        2,
        "{who}: the limited try's output is kept beside the last one: {logs:?}"
    );
    let (tokens, usd) = logs.iter().fold((0, 0), |(t, u), log| {
        let (t2, u2) = cli.printed(log);
        (t + t2, u + u2)
    });
    assert!(
        tokens > 0,
        "{who}: the CLI printed its usage\n{}",
        run.why()
    );
    let finished = &run.one("agent.finished")["detail"];
    assert_eq!(
        finished["tokens"].as_u64(),
        Some(tokens),
        "{who}: mvk's tokens are the CLI's\n{}",
        run.why()
    );
    let mvk_usd = finished["usd"].as_f64().map(|u| (u * 1e6).round() as u64);
    assert_eq!(
        mvk_usd,
        Some(usd),
        "{who}: mvk's dollars are the CLI's (or the price table's)\n{}",
        run.why()
    );
    assert!(usd > 0, "{who}: a cost is counted");
    assert!(
        !stub.requests().is_empty(),
        "{who}: the CLI talked to the stub"
    );
    if cli == Cli::Claude {
        // A maker is not held to the verdict's schema.
        assert!(
            !stub.requests().iter().any(|r| r["body"]["tools"]
                .as_array()
                .is_some_and(|tools| tools.iter().any(|t| t["name"] == "StructuredOutput"))),
            "{who}: the maker was not given the verdict's schema"
        );
    }
    if cli == Cli::Codex {
        // A model its catalogue knows (else it warns that it falls back and degrades), and a
        // maker is not held to the verdict's schema.
        let out = fs::read_to_string(run.attempt_dir(1).join("agent.out")).unwrap();
        assert!(!out.contains("Model metadata for"), "{who}: {out}");
        assert!(
            !stub
                .requests()
                .iter()
                .any(|r| r["body"]["text"]["format"]["type"] == "json_schema"),
            "{who}: the maker was not given the verdict's schema"
        );
    }
}

/// As a reviewer: its first verdict rejects with a blocker, which the maker's second prompt
/// carries; its second approves, and the change lands.
fn reviews_and_rejects_then_approves(cli: Cli, user: Option<&User>) {
    let netns = Netns::new();
    let stub = Stub::start(
        &json!({
            "usage": {"input": 900, "output": 40, "cached": 0},
            "conversations": [
                {"match": ["independent reviewer", "Blockers you raised before"], "steps": [{"text": verdict(true)}]},
                {"match": ["independent reviewer"], "steps": [{"text": verdict(false)}]}
            ]
        }),
        netns.as_ref(),
    );
    // The maker is a plain command that writes the fix: the reviewer is what is tested.
    let defs = format!(
        "agent fixer {{\n    sh \"printf '%s' '{}' > calc.py\"\n}}\n",
        FIXED.replace('\n', "\\n").replace('"', "\\\"")
    );
    let (fixture, _) = project("fixer", Some(cli.agent_use()), &defs);
    let home = tempfile::tempdir().unwrap();
    let env = cli.setup(&stub, home.path());
    if let Some(u) = user {
        u.own(home.path());
    }
    let run = apply(&fixture, &env, user, netns.as_ref());
    let who = format!(
        "{} as {}",
        cli.name(),
        if user.is_some() { "nobody" } else { "root" }
    );
    run.expect_code(0);
    assert_eq!(
        run.attempts(),
        [1, 2],
        "{who}: rejected once, approved once\n{}",
        run.why()
    );
    let verdicts: Vec<&str> = run
        .named("review.finished")
        .iter()
        .map(|e| e["detail"]["verdict"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(verdicts, ["reject", "approve"], "{who}\n{}", run.why());
    let second = fs::read_to_string(run.attempt_dir(2).join("prompt.md")).unwrap();
    assert!(
        second.contains(BLOCKER),
        "{who}: the blocker reaches the next prompt:\n{second}"
    );
    assert_eq!(
        fixture.show("main", "calc.py").as_deref(),
        Some(FIXED),
        "{who}\n{}",
        run.why()
    );
    if cli == Cli::Claude {
        // Claude Code is asked for exactly the contract's JSON (`--json-schema`): it offers
        // the model its StructuredOutput tool with the verdict's schema.
        let schema = stub
            .requests()
            .into_iter()
            .find_map(|r| {
                r["body"]["tools"].as_array().and_then(|tools| {
                    tools
                        .iter()
                        .find(|t| t["name"] == "StructuredOutput")
                        .map(|t| t["input_schema"].clone())
                })
            })
            .unwrap_or_else(|| panic!("{who}: no request offered the verdict's schema"));
        assert_eq!(
            schema["required"],
            json!(["verdict", "blockers", "notes"]),
            "{who}: {schema}"
        );
    }
    if cli == Cli::Codex {
        // Codex is asked for exactly the contract's JSON (`--output-schema`).
        let schema = stub
            .requests()
            .into_iter()
            .find_map(|r| {
                let format = &r["body"]["text"]["format"];
                (format["type"] == "json_schema").then(|| format["schema"].clone())
            })
            .unwrap_or_else(|| panic!("{who}: no request carried the verdict's schema"));
        assert_eq!(
            schema["required"],
            json!(["verdict", "blockers", "notes"]),
            "{who}: {schema}"
        );
    }
}

/// A model that keeps asking for tool calls, each answer 11,000 tokens: the agent is stopped by
/// the task's `tokens` budget within one answer of it, exit 3, nothing landed. Claude Code
/// streams its usage; Codex and the Gemini CLI print it once, at their end, so their stop is
/// read from the session (or chat) log each writes as each answer comes.
fn a_runaway_is_stopped_by_the_budget(cli: Cli) {
    let script = json!({
        "endless": true,
        "usage": {"input": 10000, "output": 1000},
        "steps": [{"shell": "echo still working"}]
    });
    let stub = Stub::start(&script, None);
    let home = tempfile::tempdir().unwrap();
    let env = cli.setup(&stub, home.path());
    let (fixture, start) = project(cli.agent_use(), None, "");
    // A tokens budget: Claude Code has no flag of its own for that, so only mvk's meter can stop
    // it (its dollars, held by `--max-budget-usd` too, stay far off).
    let text = fs::read_to_string(fixture.root().join("loops/t.kdl"))
        .unwrap()
        .replace("usd=1.0", "usd=1.0 tokens=25000");
    fs::write(fixture.root().join("loops/t.kdl"), text).unwrap();
    let run = apply(&fixture, &env, None, None);
    run.expect_code(3);
    assert_eq!(fixture.tip("main"), start, "nothing lands\n{}", run.why());
    run.none("gate.finished");
    let stopped = run.one("agent.stopped");
    assert_eq!(stopped["detail"]["budget"], "tokens", "{}", run.why());
    // One turn is 11,000 tokens; the agent may not go past the budget by more.
    let tokens = run.one("agent.finished")["detail"]["tokens"]
        .as_u64()
        .unwrap();
    assert!(tokens <= 25_000 + 11_000, "{tokens} tokens\n{}", run.why());
}

#[test]
fn claude_is_stopped_by_the_budget() {
    a_runaway_is_stopped_by_the_budget(Cli::Claude);
}

#[test]
fn claude_fixes_after_a_rate_limit() {
    as_each_user(|u| fixes_after_a_rate_limit(Cli::Claude, u));
}

#[test]
fn claude_reviews() {
    as_each_user(|u| reviews_and_rejects_then_approves(Cli::Claude, u));
}

#[test]
fn codex_is_stopped_by_the_budget() {
    a_runaway_is_stopped_by_the_budget(Cli::Codex);
}

#[test]
fn codex_fixes_after_a_rate_limit() {
    as_each_user(|u| fixes_after_a_rate_limit(Cli::Codex, u));
}

#[test]
fn codex_reviews() {
    as_each_user(|u| reviews_and_rejects_then_approves(Cli::Codex, u));
}

#[test]
fn gemini_is_stopped_by_the_budget() {
    a_runaway_is_stopped_by_the_budget(Cli::Gemini);
}

#[test]
fn gemini_fixes_after_a_rate_limit() {
    as_each_user(|u| fixes_after_a_rate_limit(Cli::Gemini, u));
}

#[test]
fn gemini_reviews() {
    as_each_user(|u| reviews_and_rejects_then_approves(Cli::Gemini, u));
}

#[test]
fn aider_fixes_after_a_rate_limit() {
    as_each_user(|u| fixes_after_a_rate_limit(Cli::Aider, u));
}

#[test]
fn aider_reviews() {
    as_each_user(|u| reviews_and_rejects_then_approves(Cli::Aider, u));
}
