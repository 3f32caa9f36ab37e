//! The crash campaign (issue 23). An 8-task flow (a diamond, a fan-out over three files, a task
//! whose first attempt fails and whose second passes) is run once uninterrupted, which gives the
//! expected result. Then, trial after trial, in a fresh copy of the repository, `mvk apply` is
//! killed — SIGKILL of every process of its session, of its process group or of mvk alone, or
//! SIGTERM, at a random moment, or SIGKILL at a random failpoint (`MVK_FAILPOINT`) — and
//! `mvk resume`d, the resume itself sometimes killed again, until the run ends. Each trial must
//! end as the uninterrupted run did: its exit code, the files on main and in the main checkout,
//! one commit per task (no task landed twice, no line doubled), a clean checkout with no git lock
//! left, a sound ledger whose tasks all ended, and no process of the trial left running.
//!
//! The settings are read in one place, [`Settings::from_env`]: `MVK_CRASH_TRIALS` (default 8),
//! `MVK_CRASH_SEED` (default 23, so CI is reproducible), `MVK_CRASH_ONLY=N` (trial N of the seed
//! alone) and `MVK_CRASH_KEEP=1` (keep a failed trial's directory). A failed trial prints its
//! seed, kill plan, each stage's stderr and `mvk log`; `benches/crash-campaign.sh` runs 200
//! trials and prints the figure. Moments are fractions of the uninterrupted run's duration, so a
//! seed names the same plan on any machine, though not the same instant in mvk's work.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tempfile::TempDir;

use super::support::{agents_dir, git, git_output};

/// Every process a trial starts carries this variable (mvk passes its environment on to agents
/// and gates), so that whatever is left running can be found, wherever its session.
const MARK: &str = "CRASH_TRIAL_MARK";
/// The failpoints a local flow passes (`review-recorded` needs a reviewer, the `coordinator-*`
/// ones the temporal executor).
const FAILPOINTS: &[&str] = &[
    "agent-captured",
    "attempt-passed",
    "merge-intent",
    "merge-locked",
    "merge-files-half",
    "merge-checkout",
    "merge-ref-moved",
    "merge-unlocked",
    "merge-published",
];
/// A stage that has not ended by then is hung: the trial fails (nothing is timed otherwise).
const STAGE_LIMIT: Duration = Duration::from_secs(180);
/// The flow's tasks, by name, as the ledger lists them.
const TASKS: &[&str] = &[
    "join",
    "left",
    "port[items/a.txt]",
    "port[items/b.txt]",
    "port[items/c.txt]",
    "retry",
    "right",
    "root",
];

/// The campaign's settings, from the environment.
struct Settings {
    trials: u64,
    seed: u64,
    only: Option<u64>,
    keep: bool,
}

impl Settings {
    fn from_env() -> Settings {
        fn number(name: &str) -> Option<u64> {
            let text = std::env::var(name).ok()?;
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            Some(parsed.unwrap_or_else(|e| panic!("{name}={text:?} is not a number: {e}")))
        }
        Settings {
            trials: number("MVK_CRASH_TRIALS").unwrap_or(8),
            seed: number("MVK_CRASH_SEED").unwrap_or(23),
            only: number("MVK_CRASH_ONLY"),
            keep: std::env::var_os("MVK_CRASH_KEEP").is_some_and(|v| v == "1"),
        }
    }
}

/// SplitMix64: a few lines, and the same sequence for a seed everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How one stage is cut short. A moment is in thousandths of the uninterrupted run's duration.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// SIGKILL to every process of mvk's session (mvk, its agents and gates): a power cut.
    Session(u64),
    /// SIGKILL to mvk's process group (its agents and gates have groups of their own).
    Group(u64),
    /// SIGKILL to mvk alone.
    Alone(u64),
    /// SIGTERM to mvk, which stops what it started and exits 130.
    Term(u64),
    /// mvk kills itself with SIGKILL when it first reaches this step boundary.
    Failpoint(&'static str),
}

impl Kill {
    fn pick(rng: &mut Rng) -> Kill {
        // Up to 110% of the uninterrupted run: some stages end before their moment.
        let at = rng.below(1101);
        match rng.below(5) {
            0 => Kill::Session(at),
            1 => Kill::Group(at),
            2 => Kill::Alone(at),
            3 => Kill::Term(at),
            _ => {
                let i = usize::try_from(rng.below(FAILPOINTS.len() as u64)).unwrap();
                Kill::Failpoint(FAILPOINTS[i])
            }
        }
    }

    /// The kind of kill, without its moment.
    fn kind(self) -> &'static str {
        match self {
            Kill::Session(_) => "SIGKILL of the session",
            Kill::Group(_) => "SIGKILL of the group",
            Kill::Alone(_) => "SIGKILL of mvk alone",
            Kill::Term(_) => "SIGTERM",
            Kill::Failpoint(p) => p,
        }
    }

    /// When to strike, for a timed kill, given the uninterrupted run's duration.
    fn moment(self, whole: Duration) -> Option<Duration> {
        match self {
            Kill::Session(at) | Kill::Group(at) | Kill::Alone(at) | Kill::Term(at) => {
                Some(whole * u32::try_from(at).unwrap() / 1000)
            }
            Kill::Failpoint(_) => None,
        }
    }
}

impl fmt::Display for Kill {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |f: &mut fmt::Formatter<'_>, what: &str, at: u64| {
            write!(f, "{what} at {}.{}%", at / 10, at % 10)
        };
        match *self {
            Kill::Session(t) => at(f, "SIGKILL of its whole session", t),
            Kill::Group(t) => at(f, "SIGKILL of its process group", t),
            Kill::Alone(t) => at(f, "SIGKILL of mvk alone", t),
            Kill::Term(t) => at(f, "SIGTERM", t),
            Kill::Failpoint(p) => write!(f, "SIGKILL at failpoint `{p}`"),
        }
    }
}

/// A trial's kills: the first for `mvk apply`, the others for the resumes after it; the last
/// resume runs undisturbed.
struct Plan {
    trial: u64,
    kills: Vec<Kill>,
}

impl Plan {
    fn new(seed: u64, trial: u64) -> Plan {
        // Each trial its own stream, so that trial N of a seed can be run alone.
        let mut rng = Rng(seed ^ trial.wrapping_mul(0xD1B5_4A32_D192_ED03));
        rng.next();
        let count = match rng.below(10) {
            0..=4 => 1,
            5..=7 => 2,
            _ => 3,
        };
        Plan {
            trial,
            kills: (0..count).map(|_| Kill::pick(&mut rng)).collect(),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, kill) in self.kills.iter().enumerate() {
            let what = if i == 0 { "apply" } else { "resume" };
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{what}: {kill}")?;
        }
        f.write_str("; then resume until the run ends")
    }
}

/// The flow: `root`, then `left` and `right`, then `join` (the diamond, with an after-merge gate);
/// `port` fanned out over three files; `retry`, whose first attempt fails its gate. Each agent
/// appends one line naming its task, each gate checks for it.
const FLOW: &str = r#"agent work timeout="60s" { run "sh" "@AGENTS/crash_append.sh" "0.3"; }
agent port timeout="60s" { run "sh" "@AGENTS/crash_append.sh" "0.3" "item"; }
agent flaky timeout="60s" { run "sh" "@AGENTS/crash_append.sh" "0.3" "fail-first"; }

flow t {
    parallel 3
    task root {
        goal "Note root."
        agent work
        scope "out/root.txt"
        gate noted evidence=none { run "sh" "-c" "grep -qxF \"$MVK_TASK\" \"out/$MVK_TASK.txt\""; }
        budget iterations=1
    }
    task left {
        after root
        goal "Note left."
        agent work
        scope "out/left.txt"
        gate noted evidence=none { run "sh" "-c" "grep -qx root out/root.txt && grep -qxF \"$MVK_TASK\" \"out/$MVK_TASK.txt\""; }
        budget iterations=1
    }
    task right {
        after root
        goal "Note right."
        agent work
        scope "out/right.txt"
        gate noted evidence=none { run "sh" "-c" "grep -qx root out/root.txt && grep -qxF \"$MVK_TASK\" \"out/$MVK_TASK.txt\""; }
        budget iterations=1
    }
    task join {
        after left right
        goal "Note join."
        agent work
        scope "out/join.txt"
        gate noted evidence=none { run "sh" "-c" "grep -qx left out/left.txt && grep -qx right out/right.txt && grep -qxF \"$MVK_TASK\" \"out/$MVK_TASK.txt\""; }
        merge {
            gate whole evidence=none { run "sh" "-c" "grep -qx root out/root.txt && grep -qx join out/join.txt"; }
        }
        budget iterations=1
    }
    task port each="items/*.txt" {
        goal "Port {{item}}."
        agent port
        scope "{{item}}"
        gate ported evidence=none { run "sh" "-c" "grep -qxF \"$MVK_TASK\" '{{item}}'"; }
        budget iterations=1
    }
    task retry {
        goal "Note retry."
        agent flaky
        scope "out/retry.txt"
        gate noted evidence=none { run "sh" "-c" "grep -qxF \"$MVK_TASK\" \"out/$MVK_TASK.txt\""; }
        budget iterations=2
    }
}
"#;

/// The repository every trial copies: the flow and the three files `port` fans out over,
/// committed on `main`. The loop file names only the agents' directory, the same for every
/// copy, so every copy holds the same commits.
fn template() -> (TempDir, String) {
    let dir = tempfile::tempdir().expect("make the template's directory");
    let root = dir.path().join("repo");
    fs::create_dir_all(root.join("loops")).expect("make loops/");
    fs::create_dir_all(root.join("items")).expect("make items/");
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["config", "user.name", "Test"]);
    git(&root, &["config", "user.email", "test@example.com"]);
    git(&root, &["config", "commit.gpgsign", "false"]);
    let flow = FLOW.replace("@AGENTS", agents_dir().to_str().expect("a UTF-8 path"));
    fs::write(root.join("loops/t.kdl"), flow).expect("write the flow");
    for item in ["a", "b", "c"] {
        fs::write(
            root.join(format!("items/{item}.txt")),
            format!("item {item}\n"),
        )
        .expect("write an item");
    }
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "init"]);
    let base = git(&root, &["rev-parse", "HEAD"]).trim().to_string();
    (dir, base)
}

/// One process of a trial: `mvk apply` or `mvk resume`, perhaps cut short.
struct Stage {
    command: &'static str,
    kill: Option<Kill>,
    /// The signal was sent (a timed kill whose moment came before mvk ended).
    fired: bool,
    status: Option<ExitStatus>,
    took: Duration,
    stderr: String,
}

impl Stage {
    /// Whether the stage was cut short: mvk did not end of itself.
    fn interrupted(&self) -> bool {
        self.fired
            || matches!(self.kill, Some(Kill::Failpoint(_)))
                && self.status.and_then(|s| s.signal()) == Some(9)
    }

    fn describe(&self) -> String {
        let kill = match (self.kill, self.fired) {
            (Some(Kill::Failpoint(p)), _) => format!("MVK_FAILPOINT={p}"),
            (Some(k), true) => k.to_string(),
            (Some(k), false) => format!("{k} (ended before its moment)"),
            (None, _) => "undisturbed".to_string(),
        };
        let ended = match self.status {
            None => "hung: killed by the harness".to_string(),
            Some(s) => match (s.code(), s.signal()) {
                (Some(code), _) => format!("exit {code}"),
                (_, Some(sig)) => format!("signal {sig}"),
                _ => s.to_string(),
            },
        };
        format!(
            "mvk {}: {kill}: {ended} after {} ms",
            self.command,
            self.took.as_millis()
        )
    }
}

/// One trial: a copy of the template, its worktree pool, and what ran in it.
struct Trial {
    dir: TempDir,
    mark: String,
    /// The session of each stage (its mvk's pid: each stage starts in a session of its own).
    sessions: Vec<u32>,
    stages: Vec<Stage>,
}

impl Trial {
    fn new(template: &Path, mark: String) -> Trial {
        let dir = tempfile::tempdir().expect("make a trial's directory");
        let out = Command::new("cp")
            .arg("-a")
            .arg(template.join("repo"))
            .arg(dir.path().join("repo"))
            .output()
            .expect("run cp");
        assert!(
            out.status.success(),
            "cp: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        fs::create_dir(dir.path().join("worktrees")).expect("make the worktree root");
        Trial {
            dir,
            mark,
            sessions: Vec::new(),
            stages: Vec::new(),
        }
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    /// `mvk ARGS…` in the trial's repository, hermetic, in a session of its own (through
    /// `setsid`, which, started by a process that is not a group leader, calls `setsid` and
    /// runs mvk in its place: mvk's pid is the session's and the group's id).
    fn mvk(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("setsid");
        cmd.arg(assert_cmd::cargo::cargo_bin("mvk"))
            .args(args)
            .current_dir(self.repo())
            .env("MVK_WORKTREE_ROOT", self.dir.path().join("worktrees"))
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("NO_COLOR", "1")
            .env(MARK, &self.mark)
            .env_remove("MVK_REPO")
            .env_remove("MVK_FAILPOINT")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs one stage, cut short by KILL (its moment a fraction of WHOLE).
    fn stage(&mut self, command: &'static str, kill: Option<Kill>, whole: Duration) -> &Stage {
        let n = self.stages.len();
        let err_path = self.dir.path().join(format!("stage-{n}.err"));
        let mut cmd = self.mvk(&[command]);
        if command == "apply" {
            cmd.arg("loops/t.kdl");
        }
        if let Some(Kill::Failpoint(point)) = kill {
            cmd.env("MVK_FAILPOINT", point);
        }
        cmd.stdout(fs::File::create(self.dir.path().join(format!("stage-{n}.out"))).unwrap())
            .stderr(fs::File::create(&err_path).unwrap());
        let start = Instant::now();
        let mut child = cmd.spawn().expect("start setsid mvk");
        let session = child.id();
        self.sessions.push(session);
        let moment = kill.and_then(|k| k.moment(whole));
        let mut fired = false;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for mvk") {
                break Some(status);
            }
            if let (Some(kill), Some(at)) = (kill, moment)
                && !fired
                && start.elapsed() >= at
            {
                strike(kill, session);
                fired = true;
            }
            if start.elapsed() > STAGE_LIMIT {
                kill_session(session);
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        self.stages.push(Stage {
            command,
            kill,
            fired,
            status,
            took: start.elapsed(),
            stderr: String::from_utf8_lossy(&fs::read(&err_path).unwrap_or_default()).into_owned(),
        });
        &self.stages[n]
    }

    /// Applies, then resumes after each interruption, following PLAN; the code the run ended
    /// with (None: it never ended, or a stage hung).
    fn run(&mut self, plan: &Plan, whole: Duration) -> Option<i32> {
        let mut kills = plan.kills.iter().copied();
        let mut command = "apply";
        // Each kill costs a stage; the rest are undisturbed resumes, of which one should do.
        while self.stages.len() < plan.kills.len() + 3 {
            let stage = self.stage(command, kills.next(), whole);
            // A hung stage ends the trial, which then fails.
            let status = stage.status?;
            if !stage.interrupted() {
                return status.code();
            }
            command = match self.run_row() {
                // Killed before the run was recorded: start it again, as a person would.
                None => "apply",
                // Killed after the run was recorded finished: that is how it ended.
                Some((state, code)) if state == "finished" => return code,
                Some(_) => "resume",
            };
        }
        None
    }

    /// The run's `(state, exit_code)` in the ledger, if one was recorded.
    fn run_row(&self) -> Option<(String, Option<i32>)> {
        let path = self.repo().join(".mvk/ledger.db");
        if !path.exists() {
            return None;
        }
        let db = Connection::open(path).ok()?;
        db.query_row(
            "SELECT state, exit_code FROM runs WHERE command = 'apply' ORDER BY started_at DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .ok()
    }

    /// `mvk ARGS…` run to its end (for the report): its stdout and stderr.
    fn output(&self, args: &[&str]) -> String {
        match self.mvk(args).output() {
            Ok(out) => format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => format!("cannot run mvk {args:?}: {e}"),
        }
    }
}

/// Sends KILL's signal to the stage whose mvk (and session) is SESSION.
fn strike(kill: Kill, session: u32) {
    use rustix::process::{Pid, Signal, kill_process, kill_process_group};
    let pid = Pid::from_raw(i32::try_from(session).unwrap()).unwrap();
    match kill {
        Kill::Session(_) => kill_session(session),
        Kill::Group(_) => {
            let _ = kill_process_group(pid, Signal::KILL);
        }
        Kill::Alone(_) => {
            let _ = kill_process(pid, Signal::KILL);
        }
        Kill::Term(_) => {
            let _ = kill_process(pid, Signal::TERM);
        }
        Kill::Failpoint(_) => {}
    }
}

/// A live process, as `/proc` shows it.
struct Proc {
    pid: u32,
    session: u32,
    environ: Vec<u8>,
    cmdline: String,
}

/// Every live process but this one (zombies are dead: they only wait to be reaped).
fn processes() -> Vec<Proc> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name, in parentheses: state, ppid, pgrp, session.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            if matches!(fields.first(), Some(&"Z" | &"X")) {
                return None;
            }
            let session = fields.get(3)?.parse().ok()?;
            let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            Some(Proc {
                pid,
                session,
                environ,
                cmdline,
            })
        })
        .collect()
}

/// SIGKILL to every process of SESSION, again until none is left (one may fork meanwhile).
fn kill_session(session: u32) {
    for _ in 0..200 {
        let members: Vec<u32> = processes()
            .into_iter()
            .filter(|p| p.session == session)
            .map(|p| p.pid)
            .collect();
        if members.is_empty() {
            return;
        }
        for pid in members {
            super::support::kill9(pid);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The trial's processes still running: those carrying its mark or in one of its sessions.
/// A process killed a moment ago may still be dying: looked for again for up to 2 s.
fn leftovers(trial: &Trial) -> Vec<Proc> {
    let needle = format!("{MARK}={}\0", trial.mark).into_bytes();
    let start = Instant::now();
    loop {
        let found: Vec<Proc> = processes()
            .into_iter()
            .filter(|p| {
                trial.sessions.contains(&p.session)
                    || p.environ.windows(needle.len()).any(|w| w == needle)
            })
            .collect();
        if found.is_empty() || start.elapsed() > Duration::from_secs(2) {
            return found;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The files of REV in REPO, by path.
fn files_at(repo: &Path, rev: &str) -> BTreeMap<String, String> {
    git(repo, &["ls-tree", "-r", "--name-only", rev])
        .lines()
        .map(|path| {
            let text = git(repo, &["show", &format!("{rev}:{path}")]);
            (path.to_string(), text)
        })
        .collect()
}

/// The files of REPO's checkout (not `.git`, not `.mvk`), by path.
fn files_checked_out(repo: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut dirs = vec![repo.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("list the checkout").flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(repo)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" || rel == ".mvk" {
                continue;
            }
            if entry.file_type().expect("a file's type").is_dir() {
                dirs.push(path);
            } else {
                let text =
                    String::from_utf8_lossy(&fs::read(&path).unwrap_or_default()).into_owned();
                files.insert(rel, text);
            }
        }
    }
    files
}

/// What the uninterrupted run ended with.
struct Expected {
    code: i32,
    base: String,
    files: BTreeMap<String, String>,
    took: Duration,
}

/// The ways TRIAL's result differs from EXPECTED (none: identical).
fn problems(trial: &Trial, code: Option<i32>, expected: &Expected) -> Vec<String> {
    let repo = trial.repo();
    let mut out = Vec::new();
    if code != Some(expected.code) {
        out.push(format!(
            "the run ended with {code:?}, the uninterrupted one with {}",
            expected.code
        ));
    }
    // SIGTERM stops a run with 130; a signal that comes as the run ends may let it end (its
    // result is judged like any other), never with another code than the run's own.
    let recorded: Option<i32> = Connection::open(repo.join(".mvk/ledger.db"))
        .and_then(|db| {
            db.query_row(
                "SELECT exit_code FROM runs WHERE state = 'finished'",
                [],
                |r| r.get(0),
            )
        })
        .ok()
        .flatten();
    for stage in &trial.stages {
        let code = stage.status.and_then(|s| s.code());
        if matches!(stage.kill, Some(Kill::Term(_)))
            && stage.fired
            && code.is_some_and(|c| c != 130)
            && code != recorded
        {
            out.push(format!(
                "`mvk {}` stopped by SIGTERM exited {code:?}, not 130 (the run recorded {recorded:?})",
                stage.command
            ));
        }
    }
    compare(&mut out, "main", &files_at(&repo, "main"), &expected.files);
    compare(
        &mut out,
        "the main checkout",
        &files_checked_out(&repo),
        &expected.files,
    );
    // One commit per task on main, each naming its task.
    let log = git(
        &repo,
        &[
            "log",
            "--format=%x1e%h %s%n%(trailers:key=Mvk-Task,valueonly)",
            &format!("{}..main", expected.base),
        ],
    );
    let mut landed: BTreeMap<String, usize> = BTreeMap::new();
    for commit in log.split('\x1e').filter(|c| !c.trim().is_empty()) {
        let mut lines = commit.lines();
        let subject = lines.next().unwrap_or_default();
        let tasks: Vec<&str> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
        if tasks.len() != 1 {
            out.push(format!("commit `{subject}` on main names tasks {tasks:?}"));
        }
        for task in tasks {
            *landed.entry(task.to_string()).or_default() += 1;
        }
    }
    for task in TASKS {
        let n = landed.remove(*task).unwrap_or(0);
        if n != 1 {
            out.push(format!("task `{task}` landed {n} times on main"));
        }
    }
    for (task, n) in landed {
        out.push(format!(
            "`{task}`, no task of the flow, landed {n} times on main"
        ));
    }
    let head = git_output(&repo, &["symbolic-ref", "HEAD"]);
    let head = String::from_utf8_lossy(&head.stdout);
    if head.trim() != "refs/heads/main" {
        out.push(format!("the main checkout's HEAD is {:?}", head.trim()));
    }
    let status = git_output(&repo, &["status", "--porcelain"]);
    let status = String::from_utf8_lossy(&status.stdout);
    if !status.is_empty() {
        out.push(format!("`git status --porcelain` is not empty:\n{status}"));
    }
    for lock in git_locks(&repo.join(".git")) {
        out.push(format!("git lock left: {}", lock.display()));
    }
    ledger_problems(&repo, expected.code, &mut out);
    for p in leftovers(trial) {
        out.push(format!(
            "process {} left running (session {}): {}",
            p.pid, p.session, p.cmdline
        ));
    }
    out
}

/// Adds to OUT how the files of WHERE differ from EXPECTED.
fn compare(
    out: &mut Vec<String>,
    place: &str,
    found: &BTreeMap<String, String>,
    expected: &BTreeMap<String, String>,
) {
    for (path, text) in expected {
        match found.get(path) {
            None => out.push(format!("{place}: {path} is missing")),
            Some(have) if have != text => {
                out.push(format!("{place}: {path} holds {have:?}, expected {text:?}"));
            }
            Some(_) => {}
        }
    }
    for path in found.keys().filter(|p| !expected.contains_key(*p)) {
        out.push(format!("{place}: {path} should not be there"));
    }
}

/// The `*.lock` files under a git directory (the main checkout's index, a ref, a worktree's).
fn git_locks(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                // Objects are never locked by name; skipping them keeps the walk short.
                if path.file_name().is_none_or(|n| n != "objects") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "lock") {
                found.push(path);
            }
        }
    }
    found
}

/// Adds to OUT what is wrong with the ledger: its integrity, a run or task not ended, an attempt
/// or a merge left half-way.
fn ledger_problems(repo: &Path, code: i32, out: &mut Vec<String>) {
    let db = match Connection::open(repo.join(".mvk/ledger.db")) {
        Ok(db) => db,
        Err(e) => return out.push(format!("the ledger cannot be opened: {e}")),
    };
    let query = |sql: &str| -> Result<Vec<Vec<String>>, rusqlite::Error> {
        let mut stmt = db.prepare(sql)?;
        let n = stmt.column_count();
        stmt.query_map([], |r| {
            (0..n)
                .map(|i| {
                    r.get::<_, Option<rusqlite::types::Value>>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect()
        })?
        .collect()
    };
    let mut check = |what: &str, sql: &str, want: &[&[&str]]| match query(sql) {
        Ok(rows) => {
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|r| r.iter().map(|s| (*s).to_string()).collect())
                .collect();
            if rows != want {
                out.push(format!("ledger: {what}: {rows:?}"));
            }
        }
        Err(e) => out.push(format!("ledger: {what}: {e}")),
    };
    check(
        "integrity_check",
        "PRAGMA integrity_check",
        &[&["Some(Text(\"ok\"))"]],
    );
    let code = format!("Some(Integer({code}))");
    check(
        "runs (state, exit code)",
        "SELECT state, exit_code FROM runs",
        &[&["Some(Text(\"finished\"))", &code]],
    );
    check(
        "tasks not finished accepted",
        "SELECT name, state, outcome FROM tasks WHERE state != 'finished' OR outcome IS NOT 'accepted'",
        &[],
    );
    check(
        "tasks",
        "SELECT count(*) FROM tasks",
        &[&["Some(Integer(8))"]],
    );
    check(
        "attempts left half-way",
        "SELECT task, number, state FROM attempts WHERE state NOT IN ('finished', 'abandoned')",
        &[],
    );
    check(
        "merges left as intents",
        "SELECT task, state FROM merges WHERE state = 'intent'",
        &[],
    );
}

/// The last LINES lines of TEXT.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What a failed trial prints: enough to reproduce it and to see what went wrong.
fn report(settings: &Settings, plan: &Plan, trial: &Trial, problems: &[String]) -> String {
    let log = trial.output(&["log"]);
    // What mvk said went wrong, for the one-line summary: its last error, else the first task
    // that did not end accepted.
    let said = trial
        .stages
        .iter()
        .rev()
        .flat_map(|s| s.stderr.lines().rev())
        .find(|l| l.starts_with("error:"))
        .or_else(|| {
            log.lines()
                .find(|l| l.contains(" task.finished ") && !l.contains(" task.finished accepted"))
        })
        .unwrap_or("nothing");
    let mut text = format!(
        "CRASH-FAIL trial {} of seed {}: {} | mvk: {said}\n  reproduce: MVK_CRASH_SEED={} MVK_CRASH_ONLY={} cargo test --test integration crash_campaign -- --nocapture\n  plan: {plan}\n  stages:\n",
        plan.trial,
        settings.seed,
        problems.first().map(String::as_str).unwrap_or_default(),
        settings.seed,
        plan.trial,
    );
    for (i, stage) in trial.stages.iter().enumerate() {
        text.push_str(&format!("    {}. {}\n", i + 1, stage.describe()));
    }
    text.push_str("  problems:\n");
    for p in problems {
        text.push_str(&format!("    - {p}\n"));
    }
    for (i, stage) in trial.stages.iter().enumerate() {
        text.push_str(&format!(
            "--- stage {} (mvk {}) stderr, last 40 lines\n{}\n",
            i + 1,
            stage.command,
            tail(&stage.stderr, 40)
        ));
    }
    text.push_str(&format!("--- mvk log\n{log}\n"));
    // What each resume found and killed, which `mvk log` does not show.
    let events = fs::read_dir(trial.repo().join(".mvk/runs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|run| fs::read_to_string(run.path().join("events.jsonl")).ok())
        .collect::<String>();
    text.push_str("--- run.resumed and attempt.abandoned events\n");
    for line in events
        .lines()
        .filter(|l| l.contains("\"run.resumed\"") || l.contains("\"attempt.abandoned\""))
    {
        text.push_str(line);
        text.push('\n');
    }
    text.push_str(&format!(
        "--- git log --oneline --all\n{}",
        String::from_utf8_lossy(&git_output(&trial.repo(), &["log", "--oneline", "--all"]).stdout)
    ));
    text
}

/// The uninterrupted run, checked to be what the flow promises (else the campaign proves
/// nothing): exit 0, every task accepted, `retry` landed on its second attempt.
fn baseline(template: &Path, base: &str) -> (Expected, Trial) {
    let mut trial = Trial::new(template, format!("baseline-{}", std::process::id()));
    let stage = trial.stage("apply", None, Duration::ZERO);
    let took = stage.took;
    let code = stage.status.and_then(|s| s.code());
    let stderr = stage.stderr.clone();
    assert_eq!(code, Some(0), "the uninterrupted run failed:\n{stderr}");
    let repo = trial.repo();
    let expected = Expected {
        code: 0,
        base: base.to_string(),
        files: files_at(&repo, "main"),
        took,
    };
    let file = |path: &str| expected.files.get(path).map(String::as_str);
    assert_eq!(file("out/root.txt"), Some("root\n"), "{stderr}");
    assert_eq!(file("out/join.txt"), Some("join\n"), "{stderr}");
    assert_eq!(file("out/retry.txt"), Some("retry\n"), "{stderr}");
    assert_eq!(
        file("items/b.txt"),
        Some("item b\nport[items/b.txt]\n"),
        "{stderr}"
    );
    let db = Connection::open(repo.join(".mvk/ledger.db")).unwrap();
    let retry: Vec<(u32, String)> = db
        .prepare("SELECT number, outcome FROM attempts WHERE task = 'retry' ORDER BY number")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        retry,
        [(1, "failed".to_string()), (2, "passed".to_string())],
        "{stderr}"
    );
    let found = problems(&trial, code, &expected);
    assert!(
        found.is_empty(),
        "the uninterrupted run fails the campaign's own checks: {found:#?}\n{stderr}"
    );
    (expected, trial)
}

/// The checks can fail: on a copy of the uninterrupted run's result, a task landed twice (a
/// doubled line) and a process left running with the trial's mark are both reported.
fn the_checks_can_fail(done: &Trial, expected: &Expected) {
    let copy = Trial::new(
        done.dir.path(),
        format!("self-check-{}", std::process::id()),
    );
    let repo = copy.repo();
    fs::OpenOptions::new()
        .append(true)
        .open(repo.join("out/root.txt"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"root\n"))
        .expect("double a line");
    git(
        &repo,
        &["commit", "-q", "-am", "mvk: root again\n\nMvk-Task: root"],
    );
    let mut stray = Command::new("sleep")
        .arg("60")
        .env(MARK, &copy.mark)
        .spawn()
        .expect("start sleep");
    let found = problems(&copy, Some(expected.code), expected);
    let _ = stray.kill();
    let _ = stray.wait();
    let said = found.join("\n");
    for needle in [
        "main: out/root.txt holds \"root\\nroot\\n\"",
        "task `root` landed 2 times",
        &format!("process {} left running", stray.id()),
    ] {
        assert!(said.contains(needle), "`{needle}` not reported:\n{said}");
    }
}

#[test]
fn crash_campaign() {
    let settings = Settings::from_env();
    let (template, base) = template();
    let (expected, done) = baseline(template.path(), &base);
    the_checks_can_fail(&done, &expected);
    drop(done);
    let trials: Vec<u64> = match settings.only {
        Some(n) => vec![n],
        None => (0..settings.trials).collect(),
    };
    eprintln!(
        "crash campaign: seed {}, {} trials; the uninterrupted run took {} ms",
        settings.seed,
        trials.len(),
        expected.took.as_millis()
    );
    let mut failed = Vec::new();
    // By kind of kill: stages planned with it, and those it cut short (a timed kill whose
    // moment comes after mvk ended, or a failpoint mvk does not reach, cuts nothing).
    let mut struck: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    // SIGTERMs that came as mvk was ending the run, which it ended (not 130).
    let mut ended_anyway = 0;
    for &n in &trials {
        let plan = Plan::new(settings.seed, n);
        let mut trial = Trial::new(
            template.path(),
            format!("{}-{n}-{}", settings.seed, std::process::id()),
        );
        let code = trial.run(&plan, expected.took);
        let found = problems(&trial, code, &expected);
        // Whatever the trial left running goes now, reported or not.
        for p in leftovers(&trial) {
            super::support::kill9(p.pid);
        }
        for stage in &trial.stages {
            if let Some(kill) = stage.kill {
                let seen = struck.entry(kill.kind()).or_default();
                seen.0 += 1;
                seen.1 += usize::from(stage.interrupted());
                if matches!(kill, Kill::Term(_))
                    && stage.fired
                    && stage.status.and_then(|s| s.code()) != Some(130)
                {
                    ended_anyway += 1;
                }
            }
        }
        if found.is_empty() {
            let stages: Vec<String> = trial.stages.iter().map(Stage::describe).collect();
            eprintln!("trial {n}: identical: {}", stages.join("; "));
        } else {
            eprintln!("{}", report(&settings, &plan, &trial, &found));
            if settings.keep {
                eprintln!("  kept in {}", trial.dir.keep().display());
            }
            failed.push(n);
        }
    }
    let figure = format!(
        "{} of {} trials ended identical to an uninterrupted run (seed {}; failed: {failed:?})",
        trials.len() - failed.len(),
        trials.len(),
        settings.seed
    );
    for (kind, (planned, cut)) in &struck {
        eprintln!("crash campaign: {kind}: {cut} of {planned} stages cut short");
    }
    eprintln!("crash campaign: SIGTERM came as the run ended, which ended it: {ended_anyway}");
    eprintln!("crash campaign: {figure}");
    assert!(failed.is_empty(), "{figure}");
}
