//! A compiled program's agents and gates in, what this machine lacks to run them out: for each,
//! whether its program is installed and which version, whether it accepts the flags its
//! definition passes (read from its own `--help`), whether the credentials it needs are present
//! (names only, never values), what running as root needs, and what the kernel allows a sandbox;
//! and, as a note, the worktree pools left by repositories that are gone.
//!
//! `mvk doctor` prints every [`Finding`]; `mvk apply` runs the same checks first and refuses to
//! start when one is a [`Level::Fail`], rather than burning attempts on an agent that cannot run.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::ir::{Adapter, Agent, Gate, Program, Sandbox};

/// How long a `--version` or `--help` may take (a Node CLI's first start can be slow).
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// At most this much of a probe's output is read.
const PROBE_OUTPUT: u64 = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Level {
    Ok,
    /// Worth knowing, harmless to a run: disk taken by what mvk left behind.
    Note,
    /// The run may fail: something could not be confirmed (credentials, a relative program).
    Warn,
    /// The run would fail: the program is missing, refuses a flag, or refuses to run as root.
    Fail,
}

/// One line of the report: an agent, a gate or the sandbox, and what was found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Finding {
    /// `agent claude (model=sonnet)`, `gate tests`, `sandbox`.
    pub(crate) subject: String,
    pub(crate) level: Level,
    /// What was found: the program's path and version, or the problem.
    pub(crate) detail: String,
    /// How to fix a problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
}

/// The pools under `home` whose repository is gone, as a note with the command that removes
/// them; `None` when there are none (or the pools cannot be listed: a note is not worth an
/// error).
pub(crate) fn orphan_pools(home: &Path) -> Option<Finding> {
    use crate::run::worktree::orphans::{Owner, survey};
    let pools = survey(home).ok()?;
    let orphans: Vec<_> = pools
        .iter()
        .filter(|p| matches!(p.owner, Owner::Gone(_)))
        .collect();
    if orphans.is_empty() {
        return None;
    }
    let bytes: u64 = orphans.iter().map(|p| p.bytes).sum();
    Some(Finding {
        subject: "worktree pools".into(),
        level: Level::Note,
        detail: format!(
            "{} pool(s) under {} belong to repositories that are gone ({})",
            orphans.len(),
            home.display(),
            crate::report::human_bytes(bytes)
        ),
        fix: Some("mvk gc --all".into()),
    })
}

/// Every distinct agent and gate of `program`, and its sandboxes, checked.
pub(crate) fn check_program(program: &Program, repo_root: &Path) -> Vec<Finding> {
    // (agent, its sandbox, whether it reviews), each distinct setting once.
    let mut agents: Vec<(&Agent, Option<&Sandbox>, bool)> = Vec::new();
    let mut gates: Vec<(&Gate, bool)> = Vec::new();
    let mut seen_agents = BTreeSet::new();
    let mut seen_gates = BTreeSet::new();
    for task in &program.tasks {
        for (agent, reviews) in task.agents() {
            // The agent's own sandbox, else its task's: what reaches it depends on which.
            let sandbox = agent.sandbox.as_ref().or(task.sandbox.as_ref());
            let passes = sandbox.map(|s| s.env.clone());
            if seen_agents.insert((agent.label(), agent.argv.clone(), passes, reviews)) {
                agents.push((agent, sandbox, reviews));
            }
        }
        for (i, gate) in task.gates.iter().chain(&task.merge.gates).enumerate() {
            if seen_gates.insert((gate.argv.clone(), gate.env.get("PATH").cloned())) {
                // A gate after another may run what the one before it made (`npm ci`, a build).
                gates.push((gate, i > 0));
            }
        }
    }
    let mut out: Vec<Finding> = agents
        .into_iter()
        .map(|(a, sandbox, reviews)| check_agent(a, sandbox, reviews, repo_root))
        .collect();
    out.extend(
        gates
            .into_iter()
            .map(|(g, after_another)| check_gate(g, repo_root, after_another)),
    );
    out.extend(check_sandbox(program));
    out
}

/// One agent, run under `sandbox` (its own or its task's) if any: installed, version, flags,
/// credentials, root. `reviews`: it is a reviewer somewhere, so its review-only flags
/// (`--output-schema={{verdict_schema}}`) are passed and checked.
pub(crate) fn check_agent(
    agent: &Agent,
    sandbox: Option<&Sandbox>,
    reviews: bool,
    repo_root: &Path,
) -> Finding {
    let mut notes: Vec<String> = Vec::new();
    // (level, what, fix): every check runs, the worst one decides.
    let mut problems: Vec<(Level, String, Option<String>)> = Vec::new();
    let Some(program) = agent.argv.first() else {
        return Finding {
            subject: format!("agent {}", agent.label()),
            level: Level::Fail,
            detail: "has an empty command".into(),
            fix: None,
        };
    };
    let found = if program.contains("{{") {
        notes.push(format!(
            "`{program}` is known when the attempt starts: not checked"
        ));
        None
    } else {
        let path_var = agent.env.get("PATH").map(OsString::from);
        let found = find_program(program, path_var.as_deref(), repo_root);
        if found.is_none() {
            if program.contains('/') && !program.starts_with('/') {
                // A path in the repository may be made in the worktree before the agent starts.
                problems.push((
                    Level::Warn,
                    format!("`{program}` is not in the repository"),
                    Some("an agent runs in the attempt's worktree, which holds the repository's tracked files only: name a program on PATH, or one the repository tracks".into()),
                ));
            } else {
                let not_found = if program.starts_with('/') {
                    format!("`{program}` does not exist or is not executable")
                } else {
                    format!("`{program}` is not installed (not found on PATH)")
                };
                problems.push((
                    Level::Fail,
                    not_found,
                    Some(install_hint(agent.adapter, program)),
                ));
            }
        }
        found
    };
    if let Some(found) = &found {
        notes.push(found.display().to_string());
    }
    // Only the tool's own program is asked: a launcher (`npx …`, a wrapper script) has other
    // flags, and runs whatever it is given.
    let own = agent.adapter != Adapter::Command
        && Path::new(program)
            .file_name()
            .is_some_and(|n| n == cli_name(agent.adapter));
    if agent.adapter != Adapter::Command && found.is_some() && !own {
        notes.push(format!(
            "version and flags not checked (`{program}` is not the {} program)",
            cli_name(agent.adapter)
        ));
    }
    if let (true, Some(found)) = (own, &found) {
        match probe_cached(found, &["--version"], agent) {
            Some(v) => notes.push(first_line(&v)),
            None => notes.push("version unknown (`--version` failed or printed nothing)".into()),
        }
        let subcommands: Vec<&str> = agent.argv[1..]
            .iter()
            .take_while(|a| !a.starts_with('-') && !a.contains("{{"))
            .map(String::as_str)
            .collect();
        let mut help_args = subcommands.clone();
        help_args.push("--help");
        match probe_cached(found, &help_args, agent) {
            Some(help) => {
                let refused: Vec<String> = flags(&agent.argv, reviews)
                    .into_iter()
                    .filter(|f| !mentions(&help, f))
                    .collect();
                if refused.is_empty() {
                    notes.push("flags ok".into());
                } else {
                    let help_cmd = std::iter::once(program.as_str())
                        .chain(help_args.iter().copied())
                        .collect::<Vec<_>>()
                        .join(" ");
                    let refused = refused
                        .iter()
                        .map(|f| format!("`{f}`"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    problems.push((
                        Level::Fail,
                        format!("does not accept {refused} (not in `{help_cmd}`)"),
                        Some("change the agent's `run` line to flags this version takes (this mvk's std/agents.kdl has the ones it was tested with: `mvk doctor` with no file checks them), or install the version the book's agent table names".into()),
                    ));
                }
            }
            None => notes.push("flags not checked (`--help` failed or printed nothing)".into()),
        }
    }
    let reaches = Reaches { agent, sandbox };
    if let Some(problem) = root_problem(&reaches) {
        problems.push((
            Level::Fail,
            problem,
            Some("add `env IS_SANDBOX=\"1\"` to the agent (std/agents.kdl's `claude` has it), or run mvk as an ordinary user".into()),
        ));
    }
    if agent.adapter == Adapter::Codex && sandbox.is_some() && codex_sandboxes_itself(agent) {
        problems.push((
            Level::Warn,
            "Codex's own sandbox cannot make its namespaces inside mvk's: every command the agent runs would fail".into(),
            Some("give the agent sandbox=\"danger-full-access\" (std/agents.kdl's codex), or pass `--sandbox danger-full-access`: mvk's sandbox confines it".into()),
        ));
    }
    match credentials(&reaches, repo_root) {
        Credentials::Found(name) => notes.push(format!("credentials: {name}")),
        Credentials::NotNeeded => {}
        Credentials::Missing { names, files } => problems.push((
            Level::Warn,
            format!("no credentials found (none of {names}{files})"),
            Some(format!(
                "set one of {names} in the environment mvk runs in, or log in with the tool itself once"
            )),
        )),
    }
    let level = problems.iter().map(|p| p.0).max().unwrap_or(Level::Ok);
    let fix = problems
        .iter()
        .find(|p| p.0 == level)
        .and_then(|p| p.1.clone().into())
        .and(
            problems
                .iter()
                .find(|p| p.0 == level)
                .and_then(|p| p.2.clone()),
        );
    let mut detail = notes.join(", ");
    for (_, what, _) in &problems {
        if !detail.is_empty() {
            detail.push_str(": ");
        }
        detail.push_str(what);
    }
    Finding {
        subject: format!("agent {}", agent.label()),
        level,
        detail,
        fix,
    }
}

/// Whether a Codex command line keeps Codex's own sandbox on (anything but full access).
fn codex_sandboxes_itself(agent: &Agent) -> bool {
    let argv = &agent.argv;
    let mode = argv.iter().enumerate().find_map(|(i, a)| {
        if a == "--sandbox" || a == "-s" {
            argv.get(i + 1).cloned()
        } else {
            a.strip_prefix("--sandbox=").map(str::to_string)
        }
    });
    let bypass = argv
        .iter()
        .any(|a| a == "--dangerously-bypass-approvals-and-sandbox");
    !bypass && mode.as_deref() != Some("danger-full-access")
}

/// One gate: its program is installed (a bare name on PATH, a path in the repository). A
/// relative program the repository does not track fails the check, unless an earlier gate of
/// its task (`after_another`) may make it.
pub(crate) fn check_gate(gate: &Gate, repo_root: &Path, after_another: bool) -> Finding {
    let subject = format!("gate {}", gate.name);
    let Some(program) = gate.argv.first() else {
        return Finding {
            subject,
            level: Level::Fail,
            detail: "has an empty command".into(),
            fix: None,
        };
    };
    if program.contains("{{") {
        return Finding {
            subject,
            level: Level::Ok,
            detail: format!("`{program}` is known when the attempt starts: not checked"),
            fix: None,
        };
    }
    let path_var = gate.env.get("PATH").map(OsString::from);
    match find_program(program, path_var.as_deref(), repo_root) {
        // The main checkout has it, but the attempt's worktree holds tracked files only.
        Some(_) if program.contains('/') && !program.starts_with('/') && !tracked(repo_root, program) => Finding {
            subject,
            level: if after_another { Level::Warn } else { Level::Fail },
            detail: format!("`{program}` is in the main checkout but git does not track it, so the attempt's worktree will not have it"),
            fix: Some("write the program's absolute path, or put it on PATH (for a virtualenv: activate it before `mvk apply` and name `python3`)".into()),
        },
        Some(found) => Finding {
            subject,
            level: Level::Ok,
            detail: found.display().to_string(),
            fix: None,
        },
        // A relative path may be made by an earlier gate in the attempt's worktree.
        None if program.contains('/') && !program.starts_with('/') => Finding {
            subject,
            level: Level::Warn,
            detail: format!("`{program}` is not in the repository"),
            fix: Some("a gate runs in the attempt's worktree, which holds the repository's tracked files only: name a program on PATH, or one the repository tracks".into()),
        },
        None => Finding {
            subject,
            level: Level::Fail,
            detail: format!("`{program}` is not installed (not found on PATH)"),
            fix: Some(format!("install `{program}`, or put the directory that holds it on PATH")),
        },
    }
}

/// What the kernel allows the program's sandboxes, if it has any.
fn check_sandbox(program: &Program) -> Option<Finding> {
    let has_sandbox = program
        .tasks
        .iter()
        .any(|t| t.sandbox.is_some() || t.agents().any(|(a, _)| a.sandbox.is_some()));
    if !has_sandbox {
        return None;
    }
    let f = |level, detail: String, fix: Option<&str>| Finding {
        subject: "sandbox".into(),
        level,
        detail,
        fix: fix.map(str::to_string),
    };
    Some(match crate::run::sandbox::preflight(program) {
        Ok(w) if w.is_empty() => f(
            Level::Ok,
            "the kernel confines as the sandboxes say".into(),
            None,
        ),
        Ok(w) => f(
            Level::Warn,
            w.join("; "),
            Some("see the book's sandbox chapter for what each kernel feature needs"),
        ),
        Err(e) => f(
            Level::Fail,
            e.to_string(),
            Some(
                "run on a kernel with Landlock (5.13 or later) and unprivileged namespaces, or set `required=#false`",
            ),
        ),
    })
}

/// The program an adapter's tool is installed as.
fn cli_name(adapter: Adapter) -> &'static str {
    match adapter {
        Adapter::Claude => "claude",
        Adapter::Codex => "codex",
        Adapter::Gemini => "gemini",
        Adapter::Aider => "aider",
        Adapter::Goose => "goose",
        Adapter::Command => "",
    }
}

/// Where `program` is: a path with a `/` (relative to the repository), else the first match on
/// `path` (the agent's own `PATH`) or this process's `PATH`.
pub(crate) fn find_program(
    program: &str,
    path: Option<&std::ffi::OsStr>,
    repo_root: &Path,
) -> Option<PathBuf> {
    if program.contains('/') {
        let p = repo_root.join(program);
        return is_executable(&p).then_some(p);
    }
    let path = path
        .map(OsString::from)
        .or_else(|| std::env::var_os("PATH"))?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

/// Whether `path` (relative to the repository's root) is in the tree of HEAD: what an attempt's
/// worktree, a checkout of a commit, holds.
fn tracked(repo_root: &Path, path: &str) -> bool {
    let Ok(repo) = git2::Repository::open(repo_root) else {
        // Not a repository: nothing to compare with; the run itself will say.
        return true;
    };
    let Ok(tree) = repo.head().and_then(|h| h.peel_to_tree()) else {
        return true;
    };
    tree.get_path(Path::new(path.trim_start_matches("./")))
        .is_ok()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// [`probe`], remembered in mvk's cache (`probes/`) by the program's file (its resolved path,
/// size and modification time), the arguments and the agent's environment: `mvk apply` asks
/// again only when the program changed (an upgrade), not on every run (aider's `--help` takes
/// seconds).
fn probe_cached(program: &Path, args: &[&str], agent: &Agent) -> Option<String> {
    let key = std::fs::canonicalize(program).ok().and_then(|real| {
        let meta = std::fs::metadata(&real).ok()?;
        let modified = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?;
        let mut h = blake3::Hasher::new();
        // The path as found too: version managers' shims (Volta, mise) are one binary for all.
        h.update(program.as_os_str().as_encoded_bytes());
        h.update(&[0]);
        h.update(real.as_os_str().as_encoded_bytes());
        h.update(&meta.len().to_le_bytes());
        h.update(&modified.as_nanos().to_le_bytes());
        for a in args {
            h.update(a.as_bytes());
            h.update(&[0]);
        }
        for (k, v) in &agent.env {
            h.update(k.as_bytes());
            h.update(&[0]);
            h.update(v.as_bytes());
            h.update(&[0]);
        }
        Some(h.finalize().to_hex().to_string())
    });
    let file = key.map(|k| crate::resolve::git::default_root().join("probes").join(k));
    if let Some(text) = file.as_ref().and_then(|f| std::fs::read_to_string(f).ok()) {
        return Some(text);
    }
    let text = probe(program, args, agent)?;
    if let Some(file) = &file
        && let Some(dir) = file.parent()
        && std::fs::create_dir_all(dir).is_ok()
    {
        // Written whole or not at all: a reader never sees half an answer.
        let tmp = file.with_extension(format!("tmp.{}", std::process::id()));
        if std::fs::write(&tmp, &text).is_ok() && std::fs::rename(&tmp, file).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Some(text)
}

/// Runs `program args…` with the agent's environment, stdin closed, for at most
/// [`PROBE_TIMEOUT`]; its standard output (or, if empty, its standard error), if it said anything.
fn probe(program: &Path, args: &[&str], agent: &Agent) -> Option<String> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(program);
    cmd.args(args)
        // Away from the repository: nothing it finds there may configure it.
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Node CLIs print colours and update notices to a terminal only; be sure.
        .env("NO_COLOR", "1")
        .env("NO_UPDATE_NOTIFIER", "1")
        // A group of its own, killed whole if it does not answer in time.
        .process_group(0);
    for (k, v) in &agent.env {
        if !v.contains("{{") {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().ok()?;
    let (tx, rx) = std::sync::mpsc::channel();
    for (n, pipe) in [
        (
            0,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            1,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(p) = pipe {
                let _ = p.take(PROBE_OUTPUT).read_to_end(&mut buf);
            }
            let _ = tx.send((n, String::from_utf8_lossy(&buf).into_owned()));
        });
    }
    drop(tx);
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let succeeded = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.success(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => break false,
        }
    };
    // The whole group, whether the program ended or not: what it left holds the pipes.
    if let Some(pid) = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.wait();
    let (mut out, mut err) = (String::new(), String::new());
    // What the pipes hold once the program is gone; a straggler holding them is not waited for.
    let grace = Instant::now() + Duration::from_secs(1);
    while let Ok((n, text)) = rx.recv_timeout(grace.saturating_duration_since(Instant::now())) {
        if n == 0 {
            out = text;
        } else {
            err = text;
        }
    }
    // A program that failed or did not answer in time said nothing about its flags.
    let text = if out.trim().is_empty() { err } else { out };
    (succeeded && !text.trim().is_empty()).then_some(text)
}

fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    line.chars().take(80).collect()
}

/// The long flags an argv passes (`--model`, `--output-format`), without values; those only a
/// reviewer gets (`run::attempt::review_only`) only when the agent reviews.
fn flags(argv: &[String], reviews: bool) -> Vec<String> {
    let makers_skip = crate::run::attempt::review_only(argv);
    let mut out: Vec<String> = Vec::new();
    for (a, skip) in argv.iter().zip(makers_skip).skip(1) {
        if !a.starts_with("--") || a.len() <= 2 || (skip && !reviews) {
            continue;
        }
        let name = a.split('=').next().unwrap_or(a).to_string();
        if !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// Whether a help text names `flag` as a whole word.
fn mentions(help: &str, flag: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    help.match_indices(flag).any(|(i, _)| {
        let before = help[..i].chars().next_back();
        let after = help[i + flag.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// Claude Code refuses `--dangerously-skip-permissions` as root unless told it runs sandboxed.
fn root_problem(reaches: &Reaches<'_>) -> Option<String> {
    let agent = reaches.agent;
    let skips = agent
        .argv
        .iter()
        .any(|a| a == "--dangerously-skip-permissions");
    // Exactly "1" (Claude Code 2.1 reads nothing else), as it reaches the agent.
    let told = reaches.var("IS_SANDBOX").is_some_and(|v| v == "1")
        || reaches.var("CLAUDE_CODE_BUBBLEWRAP").is_some();
    (agent.adapter == Adapter::Claude && skips && !told && rustix::process::geteuid().is_root())
        .then(|| "as root, Claude Code refuses `--dangerously-skip-permissions` unless `IS_SANDBOX=1` (exactly) says it runs confined".to_string())
}

enum Credentials {
    Found(String),
    Missing { names: String, files: String },
    NotNeeded,
}

/// The credentials an agent's tool reads, by name: an environment variable (the process's or
/// the agent's own `env`) or the file its own login writes.
/// The environment an agent's process gets: its definition's `env`, then mvk's own, of which a
/// sandbox passes only the base variables and those it names.
struct Reaches<'a> {
    agent: &'a Agent,
    sandbox: Option<&'a Sandbox>,
}

impl Reaches<'_> {
    fn var(&self, name: &str) -> Option<String> {
        if let Some(v) = self.agent.env.get(name) {
            return Some(v.clone());
        }
        let passed = self.sandbox.is_none_or(|s| {
            crate::run::sandbox::BASE_ENV.contains(&name) || s.env.iter().any(|n| n == name)
        });
        passed.then(|| std::env::var(name).ok()).flatten()
    }
}

fn credentials(reaches: &Reaches<'_>, repo_root: &Path) -> Credentials {
    let agent = reaches.agent;
    let (vars, files): (&[&str], &[&str]) = match agent.adapter {
        Adapter::Claude => (
            &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_USE_VERTEX",
            ],
            &["~/.claude/.credentials.json"],
        ),
        Adapter::Codex => (
            &["OPENAI_API_KEY", "CODEX_API_KEY"],
            &["$CODEX_HOME/auth.json", "~/.codex/auth.json"],
        ),
        Adapter::Gemini => (
            &[
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_APPLICATION_CREDENTIALS",
                "GOOGLE_GENAI_USE_VERTEXAI",
            ],
            &["~/.gemini/oauth_creds.json"],
        ),
        Adapter::Aider => (
            &[
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GEMINI_API_KEY",
                "OPENROUTER_API_KEY",
                "DEEPSEEK_API_KEY",
                "AIDER_API_KEY",
            ],
            &["~/.aider.conf.yml", ".aider.conf.yml", ".env"],
        ),
        Adapter::Goose => (&["GOOSE_PROVIDER"], &["~/.config/goose/config.yaml"]),
        Adapter::Command => return Credentials::NotNeeded,
    };
    let set = |name: &str| reaches.var(name).is_some_and(|v| !v.is_empty());
    if let Some(name) = vars.iter().find(|n| set(n)) {
        return Credentials::Found((*name).to_string());
    }
    let home = reaches.var("HOME").map(PathBuf::from);
    let codex_home = reaches.var("CODEX_HOME").map(PathBuf::from);
    let expand = |f: &str| -> Option<PathBuf> {
        if let Some(rest) = f.strip_prefix("~/") {
            return home.as_ref().map(|h| h.join(rest));
        }
        if let Some(rest) = f.strip_prefix("$CODEX_HOME/") {
            return codex_home.as_ref().map(|h| h.join(rest));
        }
        Some(repo_root.join(f))
    };
    if let Some(f) = files
        .iter()
        .find(|f| expand(f).is_some_and(|p| p.is_file()))
    {
        return Credentials::Found((*f).to_string());
    }
    if reaches.sandbox.is_some() && vars.iter().any(|n| std::env::var_os(n).is_some()) {
        // Set here, but the sandbox does not pass it on.
        return Credentials::Missing {
            names: vars.join(", "),
            files: "; set here, but the sandbox passes only the variables its `env` names".into(),
        };
    }
    Credentials::Missing {
        names: vars.join(", "),
        files: if files.is_empty() {
            String::new()
        } else {
            format!("; nor {}", files.join(", "))
        },
    }
}

/// How a missing agent program is installed.
fn install_hint(adapter: Adapter, program: &str) -> String {
    match adapter {
        Adapter::Claude => "npm install -g @anthropic-ai/claude-code".into(),
        Adapter::Codex => "npm install -g @openai/codex".into(),
        Adapter::Gemini => "npm install -g @google/gemini-cli".into(),
        Adapter::Aider => {
            "python3 -m pip install aider-install && aider-install (or: pipx install aider-chat)"
                .into()
        }
        Adapter::Goose => "see https://block.github.io/goose/ for goose's installer".into(),
        Adapter::Command => {
            format!("install `{program}`, or put the directory that holds it on PATH")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_long_options_without_values() {
        let argv: Vec<String> = [
            "codex",
            "exec",
            "--json",
            "--model",
            "m",
            "--sandbox=workspace-write",
            "-c",
            "x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(flags(&argv, false), ["--json", "--model", "--sandbox"]);
        let codex: Vec<String> = [
            "codex",
            "exec",
            "--output-schema={{verdict_schema}}",
            "--json-schema",
            "{{verdict_schema_json}}",
            "--json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(flags(&codex, false), ["--json"]);
        // A flag before a review-only flag is not its option.
        let claude: Vec<String> = [
            "claude",
            "--dangerously-skip-permissions",
            "--json-schema={{verdict_schema_json}}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(flags(&claude, false), ["--dangerously-skip-permissions"]);
        assert_eq!(
            flags(&codex, true),
            ["--output-schema", "--json-schema", "--json"]
        );
    }

    #[test]
    fn a_flag_is_mentioned_only_as_a_whole_word() {
        let help = "  --json  print JSON\n  --full-auto-x  no\n      --model <MODEL>\n";
        assert!(mentions(help, "--json"));
        assert!(mentions(help, "--model"));
        assert!(!mentions(help, "--full-auto"));
        assert!(!mentions(help, "--js"));
    }

    #[test]
    fn a_program_is_found_on_the_given_path_only_when_executable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let prog = dir.path().join("tool");
        std::fs::write(&prog, "#!/bin/sh\n").expect("write");
        let path = OsString::from(dir.path());
        assert_eq!(find_program("tool", Some(&path), dir.path()), None);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert_eq!(
            find_program("tool", Some(&path), dir.path()),
            Some(prog.clone())
        );
        assert_eq!(
            find_program("./tool", None, dir.path()),
            Some(dir.path().join("./tool"))
        );
        assert_eq!(find_program("missing", Some(&path), dir.path()), None);
    }
}
