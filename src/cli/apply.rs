//! `mvk apply FILE [--task NAME] [--json]`: compile FILE and run it to an end in its repository;
//! the run id first on stdout, progress on stderr, the exit code per the contract.

use std::io::{IsTerminal, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::run::driver::{self, Observer, RunError, RunOptions, RunReport};
use crate::run::exec::process::ProcessError;
use crate::run::git::land::LandError;
use crate::run::trail::Event;
use crate::run::worktree::WorktreeError;
use crate::run_lock::{Holder, LockError, RunLock};

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// The loop or flow file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Run only this task of a flow (from the target's current tip).
    #[arg(long, value_name = "NAME")]
    pub task: Option<String>,
    /// When to stop for a person: `auto` never does (batch and step need `mvk approve`, which
    /// this version does not have yet).
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub mode: Mode,
    /// Print one JSON document (schema `mvk.apply.v1`) at the end instead of text.
    #[arg(long)]
    pub json: bool,
    /// When another run of the same loop or flow is going on, wait for it to end instead of
    /// refusing.
    #[arg(long)]
    pub wait: bool,
    /// Start without `mvk doctor`'s checks of the agents and gates (for a CLI that accepts a
    /// flag its `--help` does not list).
    #[arg(long)]
    pub no_doctor: bool,
    /// Where attempts are made: `local` (by this process), or `temporal` (a Temporal workflow
    /// whose attempts `mvk worker` processes make, each in its own clone; this process records
    /// the run and lands the changes). `temporal` needs mvk built with the `temporal` feature,
    /// and does not yet take `--mode batch|step` or a `human` rung.
    #[arg(long, value_enum, default_value_t = Executor::Local)]
    pub executor: Executor,
    #[command(flatten)]
    pub temporal: TemporalArgs,
    /// With `--executor temporal`: where workers reach this repository, to fetch each
    /// attempt's base and push a passed change to a ref under `refs/mvk/temporal/` (any URL
    /// `git fetch` and `git push` take: `ssh://host/path`, `https://…`, `git://…`, a path).
    /// Default: this repository's path, which only workers on this machine (or a shared
    /// filesystem) can reach.
    #[arg(long, value_name = "URL")]
    pub repo_url: Option<String>,
}

/// Where the Temporal server is and which task queue the workers poll.
#[derive(Debug, Args)]
pub struct TemporalArgs {
    /// The Temporal server (frontend gRPC), for `--executor temporal` and `mvk worker`.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7233")]
    pub temporal_address: String,
    /// The task queue attempts are sent to and `mvk worker` polls.
    #[arg(long, value_name = "QUEUE", default_value = "mvk")]
    pub task_queue: String,
    /// The Temporal namespace the workflow runs in; the coordinator and its workers must name
    /// the same one.
    #[arg(long, value_name = "NAMESPACE", default_value = "default")]
    pub temporal_namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Executor {
    Local,
    Temporal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Auto,
    Batch,
    Step,
}

pub fn apply(cli: &Cli, printer: &Printer, args: &ApplyArgs) -> Result<Exit, CliError> {
    if args.executor == Executor::Temporal {
        refuse_for_temporal(args)?;
    } else if args.repo_url.is_some() {
        return Err(CliError::Usage {
            message: "`--repo-url` tells Temporal workers where this repository is; a local run has no workers".into(),
            hint: Some("add `--executor temporal`, or leave `--repo-url` out".into()),
        });
    }
    let program = super::compile(cli, printer, &args.file)?;
    refuse_library(&program, &args.file)?;
    if args.executor == Executor::Temporal {
        refuse_human_rung(&program)?;
    }
    sandbox_preflight(printer, &program)?;
    let repo_root = repository(cli, &args.file)?;
    if args.executor == Executor::Local && !args.no_doctor {
        refuse_unrunnable(printer, &program, &repo_root, args.task.as_deref())?;
    }
    super::resume::close_all_dead_attempts(printer, &repo_root)?;
    let run_id = driver::new_run_id().map_err(run_error)?;
    let _lock = lock(
        printer,
        &repo_root,
        &program.name,
        &run_id,
        "apply",
        args.wait,
    )?;
    let opts = RunOptions {
        file: shown_file(&args.file, &repo_root),
        repo_root,
        task: args.task.clone(),
        worktree_root: None,
        mode: match args.mode {
            Mode::Auto => driver::RunMode::Auto,
            Mode::Batch => driver::RunMode::Batch,
            Mode::Step => driver::RunMode::Step,
        },
        run_id,
    };
    let progress = Progress::new(printer, args.json);
    let executor = executor(args, &opts)?;
    execute(
        printer,
        args.json,
        &progress,
        executor.apply(&program, &opts, &progress),
    )
}

/// `mvk doctor`'s checks, before anything runs: an agent or gate that cannot start (not
/// installed, a flag its program refuses, Claude Code as root without `IS_SANDBOX`) is refused
/// as a usage error rather than burning attempts; what may fail (credentials) is a warning.
/// Temporal's workers run the agents elsewhere, so that executor is not checked here.
fn refuse_unrunnable(
    printer: &Printer,
    program: &crate::ir::Program,
    repo_root: &Path,
    task: Option<&str>,
) -> Result<(), CliError> {
    use crate::doctor::{self, Level};
    // `--task NAME` runs that task alone: only its agents and gates must start.
    let selected;
    let program = match task {
        Some(name) if program.tasks.iter().any(|t| t.name == name) => {
            selected = crate::ir::Program {
                tasks: program
                    .tasks
                    .iter()
                    .filter(|t| t.name == name)
                    .cloned()
                    .collect(),
                ..program.clone()
            };
            &selected
        }
        _ => program,
    };
    let findings = doctor::check_program(program, repo_root);
    for f in findings.iter().filter(|f| f.level == Level::Warn) {
        printer.warn(&format!("{}: {}", f.subject, f.detail));
    }
    let failed: Vec<_> = findings.iter().filter(|f| f.level == Level::Fail).collect();
    let Some(first) = failed.first() else {
        return Ok(());
    };
    for f in &failed[1..] {
        printer.error(&format!("{}: {}", f.subject, f.detail));
    }
    Err(CliError::Usage {
        message: format!("{}: {}", first.subject, first.detail),
        hint: Some(match &first.fix {
            Some(fix) => format!("{fix} (`mvk doctor FILE` checks every agent and gate; `--no-doctor` starts without these checks)"),
            None => "`mvk doctor FILE` checks every agent and gate; `--no-doctor` starts without these checks".into(),
        }),
    })
}

/// The executor `--executor` names.
fn executor(
    args: &ApplyArgs,
    opts: &RunOptions,
) -> Result<Box<dyn crate::run::executor::Executor>, CliError> {
    match args.executor {
        Executor::Local => Ok(Box::new(crate::run::executor::Local)),
        Executor::Temporal => {
            #[cfg(feature = "temporal")]
            {
                Ok(Box::new(crate::run::temporal::Temporal {
                    endpoint: crate::run::temporal::Endpoint {
                        address: args.temporal.temporal_address.clone(),
                        task_queue: args.temporal.task_queue.clone(),
                        namespace: args.temporal.temporal_namespace.clone(),
                    },
                    repo_url: args
                        .repo_url
                        .clone()
                        .unwrap_or_else(|| opts.repo_root.display().to_string()),
                }))
            }
            #[cfg(not(feature = "temporal"))]
            {
                let _ = opts;
                Err(without_temporal())
            }
        }
    }
}

/// What the temporal executor does not take yet, refused before anything runs.
fn refuse_for_temporal(args: &ApplyArgs) -> Result<(), CliError> {
    #[cfg(not(feature = "temporal"))]
    {
        let _ = args;
        Err(without_temporal())
    }
    #[cfg(feature = "temporal")]
    {
        let refused = if args.mode != Mode::Auto {
            Some("`--mode batch` and `--mode step`")
        } else {
            None
        };
        match refused {
            Some(what) => Err(CliError::Usage {
                message: format!("`--executor temporal` does not take {what} yet"),
                hint: Some("run it with `--executor local`".into()),
            }),
            None => Ok(()),
        }
    }
}

/// A ladder with a `human` rung, refused for `--executor temporal` before anything starts: the
/// local driver stops there at a checkpoint a person answers with `mvk approve` or `mvk reject`,
/// which go on through `mvk resume`, and that cannot continue a Temporal run yet (nor are a
/// worker's failed attempts, the work a person would finish, pushed anywhere they could).
fn refuse_human_rung(program: &crate::ir::Program) -> Result<(), CliError> {
    let Some(task) = program
        .tasks
        .iter()
        .find(|t| t.ladder.iter().any(|r| matches!(r, crate::ir::Rung::Human)))
    else {
        return Ok(());
    };
    Err(CliError::Usage {
        message: format!(
            "task `{}` has a `human` rung in its ladder, which `--executor temporal` does not take yet",
            task.name
        ),
        hint: Some("run the flow with `--executor local`, which stops there for a person".into()),
    })
}

/// The refusal of `--executor temporal` and `mvk worker` by a build without the feature.
#[cfg(not(feature = "temporal"))]
pub(crate) fn without_temporal() -> CliError {
    CliError::Usage {
        message: "this mvk was built without the `temporal` feature, so it cannot run flows on Temporal".into(),
        hint: Some("build mvk with `cargo build --features temporal` (or `cargo install --features temporal`)".into()),
    }
}

/// Checks the program's sandboxes against the kernel before anything runs: a warning for each
/// that will run less confined than it says, the refusal (exit 70) of one that is required.
pub(crate) fn sandbox_preflight(
    printer: &Printer,
    program: &crate::ir::Program,
) -> Result<(), CliError> {
    let warnings = crate::run::sandbox::preflight(program)
        .map_err(|e| CliError::Internal { message: chain(&e) })?;
    for w in warnings {
        printer.warn(&w);
    }
    Ok(())
}

/// Refuses a file of gate and agent definitions only: it has no task to run.
pub(crate) fn refuse_library(program: &crate::ir::Program, file: &Path) -> Result<(), CliError> {
    if program.kind == crate::ir::ProgramKind::Library {
        return Err(CliError::Usage {
            message: format!(
                "`{}` defines gates and agents only; there is no loop or flow to run",
                file.display()
            ),
            hint: Some("name a file with a `loop` or a `flow` that imports this one".into()),
        });
    }
    Ok(())
}

/// Takes the run lock of `program` in `repo_root/.mvk` for `run`, or says who holds it.
pub(crate) fn lock(
    printer: &Printer,
    repo_root: &Path,
    program: &str,
    run: &str,
    command: &str,
    wait: bool,
) -> Result<RunLock, CliError> {
    let me = Holder {
        run: run.to_string(),
        pid: std::process::id(),
        host: driver::host_name(),
        since: crate::clock::now().0,
        command: command.to_string(),
    };
    RunLock::acquire(&repo_root.join(".mvk"), program, &me, wait, |holder| {
        printer.status(&format!("waiting for {holder} to finish"));
    })
    .map_err(|e| match e {
        LockError::Held { .. } => CliError::Usage {
            message: e.to_string(),
            hint: Some(format!(
                "wait for it (`mvk status`), or add `--wait` to start when it ends; two runs of `{program}` at once would fight over its target"
            )),
        },
        LockError::Io { .. } => CliError::Internal {
            message: chain(&e),
        },
    })
}

/// Runs a driver future to its end on a runtime of its own, stopping every process it started
/// on Ctrl-C, SIGTERM or SIGHUP; prints the report and returns the contract's exit code.
pub(crate) fn execute(
    printer: &Printer,
    json: bool,
    progress: &Progress,
    run: impl std::future::Future<Output = Result<RunReport, RunError>>,
) -> Result<Exit, CliError> {
    let result = until_signal(run)?;
    progress.finish();
    let report = match result {
        // Dropping the run killed every process group it had started.
        None => {
            printer.error(
                "interrupted; every agent and gate this run started was stopped (the ledger still shows the run as running: continue it with `mvk resume`)",
            );
            return Ok(Exit::Interrupted);
        }
        Some(Err(e)) => return Err(run_error(e)),
        Some(Ok(report)) => report,
    };
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| CliError::Internal {
            message: format!("cannot encode the report as JSON: {e}"),
        })?;
        printer.out(&text);
    } else {
        printer.out(&summary(&report));
    }
    Ok(Exit::from_code(report.exit_code))
}

/// Runs `run` to its end on a runtime of its own; `None` when Ctrl-C, SIGTERM or SIGHUP came
/// first (dropping the run stops every process it started).
pub(crate) fn until_signal<T>(
    run: impl std::future::Future<Output = T>,
) -> Result<Option<T>, CliError> {
    Ok(runtime()?.block_on(async {
        // Ctrl-C, `kill`, a CI cancel or a closed terminal: stop every process the run started.
        // The same signals from the run's own agents and gates are counted, not obeyed.
        let warn = |text: String| Printer::new(false, false).warn(&text);
        let Ok(mut stop) = crate::run::exec::signals::watch(warn) else {
            return Some(run.await);
        };
        tokio::select! {
            r = run => Some(r),
            () = stop.stopped() => None,
        }
    }))
}

/// The async runtime a command runs on: two workers, timers and I/O.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Internal {
            message: format!("cannot start the async runtime: {e}"),
        })
}

pub(crate) use crate::run::error_chain as chain;

/// The repository to work in: `--repo`, else the git repository holding the loop file.
pub(crate) fn repository(cli: &Cli, file: &Path) -> Result<PathBuf, CliError> {
    repository_at(&start_of(cli, file))
}

/// The top of the checkout that holds `--repo` (or `file`): a linked worktree's own, not the
/// main checkout — what `mvk verify` checks, since that is where the change being judged is.
pub(crate) fn checkout(cli: &Cli, file: &Path) -> Result<PathBuf, CliError> {
    let (_, workdir) = discover(&start_of(cli, file))?;
    workdir.canonicalize().map_err(|e| CliError::Usage {
        message: format!("cannot resolve `{}`: {e}", workdir.display()),
        hint: None,
    })
}

/// Where a command about `file` looks for its repository: `--repo`, else the file's directory.
fn start_of(cli: &Cli, file: &Path) -> PathBuf {
    match &cli.repo {
        Some(r) => r.clone(),
        None => file
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .to_path_buf(),
    }
}

/// The main checkout of the git repository that holds `start`.
pub(crate) fn repository_at(start: &Path) -> Result<PathBuf, CliError> {
    let (repo, workdir) = discover(start)?;
    // A linked worktree works too, but the pool and `.mvk/` belong to the main checkout.
    let main = git2::Repository::open(repo.commondir())
        .ok()
        .and_then(|m| m.workdir().map(Path::to_path_buf))
        .unwrap_or(workdir);
    main.canonicalize().map_err(|e| CliError::Usage {
        message: format!("cannot resolve `{}`: {e}", main.display()),
        hint: None,
    })
}

/// The repository that holds `start` and the top of its checkout (refused when bare).
fn discover(start: &Path) -> Result<(git2::Repository, PathBuf), CliError> {
    let start = start.to_path_buf();
    let repo = git2::Repository::discover(&start).map_err(|e| CliError::Usage {
        message: format!(
            "`{}` is not inside a git repository: {}",
            start.display(),
            e.message()
        ),
        hint: Some(
            "run mvk inside the repository the loop works on, or name it with `--repo DIR`".into(),
        ),
    })?;
    let Some(workdir) = repo.workdir() else {
        return Err(CliError::Usage {
            message: format!(
                "`{}` is a bare repository; mvk needs a checkout",
                start.display()
            ),
            hint: None,
        });
    };
    let workdir = workdir.to_path_buf();
    Ok((repo, workdir))
}

pub(crate) fn shown_file(file: &Path, repo_root: &Path) -> String {
    let abs = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
    abs.strip_prefix(repo_root)
        .map_or_else(|_| file.display().to_string(), |p| p.display().to_string())
}

pub(crate) fn run_error(e: RunError) -> CliError {
    match e {
        RunError::Config { message } => CliError::Usage {
            message,
            hint: None,
        },
        RunError::Land(LandError::Detached) => CliError::Usage {
            message: "HEAD is detached, so there is no current branch to land on".into(),
            hint: Some("check out a branch, or say `merge into=BRANCH` in the loop".into()),
        },
        RunError::Land(LandError::NoSuchBranch { branch }) => CliError::Usage {
            message: format!("the target branch `{branch}` does not exist"),
            hint: Some(format!(
                "create it (`git branch {branch}`) or change `merge into=`"
            )),
        },
        RunError::Worktree(WorktreeError::NoCommits { repo }) => CliError::Usage {
            message: format!("repository `{}` has no commits yet", repo.display()),
            hint: Some("make a first commit: attempts start from one".into()),
        },
        RunError::Agent {
            agent,
            source: source @ ProcessError::ProgramNotFound { .. },
        } => CliError::Usage {
            message: format!("cannot run agent `{agent}`: {source}"),
            hint: Some("install it, or fix the `run` line of its definition".into()),
        },
        RunError::Agent {
            source: source @ ProcessError::GrantExposes { .. },
            ..
        }
        | RunError::Gate(crate::run::judge::gate::GateError::Process {
            source: source @ ProcessError::GrantExposes { .. },
            ..
        }) => CliError::Usage {
            message: source.to_string(),
            hint: Some(
                "mvk stopped here (what landed stays landed): remove the link, then continue the run with `mvk resume`, or start the flow again with `mvk apply`"
                    .into(),
            ),
        },
        other => {
            let mut message = chain(&other);
            // SQLite says "disk I/O error" for a full disk and for a file-size limit alike.
            if other.is_out_of_space() {
                message.push_str(
                    " (is the disk full, or a file-size limit (`ulimit -f`) reached? the ledger keeps every transition written before this one, and the run stands where it stopped: free some space, then continue it with `mvk resume`)",
                );
            }
            CliError::Internal { message }
        }
    }
}

fn summary(report: &RunReport) -> String {
    let mut out = String::new();
    for t in &report.tasks {
        out.push_str(&format!(
            "{} {}: {} ({} attempt{}{})\n",
            mark(t.outcome),
            t.name,
            t.reason,
            t.attempts,
            if t.attempts == 1 { "" } else { "s" },
            if t.usd > 0.0 || t.tokens > 0 {
                format!(
                    ", {} tokens, {}",
                    t.tokens,
                    crate::plan::format_usd((t.usd * 1e6).round() as u64)
                )
            } else {
                String::new()
            }
        ));
    }
    out.push_str(&format!(
        "run {}: {} (exit {})",
        report.run,
        report.outcome.name(),
        report.exit_code
    ));
    out
}

fn mark(o: driver::Outcome) -> &'static str {
    match o {
        driver::Outcome::Accepted => "✓",
        driver::Outcome::Skipped => "-",
        driver::Outcome::Human | driver::Outcome::Waiting => "?",
        _ => "✗",
    }
}

/// An event as `--verbose` shows it: who, the event's name, its description, and its details.
fn verbose_line(e: &Event, described: Option<&str>, who: &str) -> String {
    let who = if who == "run" {
        format!("run {}", e.run)
    } else {
        who.to_string()
    };
    let mut line = format!("{who}: [{}]", e.event);
    if let Some(text) = described {
        line.push(' ');
        line.push_str(text);
    }
    let empty = e.detail.as_object().is_some_and(serde_json::Map::is_empty);
    if !e.detail.is_null() && !empty {
        line.push_str(&format!(" {}", e.detail));
    }
    line
}

/// Shows events: the run id on stdout as soon as it exists, then a live line on a terminal
/// or plain lines otherwise, on stderr; with `--verbose`, every event with its details (the
/// durations, tokens, log files) as JSON.
pub(crate) struct Progress {
    quiet: bool,
    verbose: bool,
    json: bool,
    bar: Option<indicatif::ProgressBar>,
    printed_id: Mutex<bool>,
}

impl Progress {
    pub(crate) fn new(printer: &Printer, json: bool) -> Progress {
        let quiet = printer.quiet();
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            quiet,
            verbose: printer.verbose(),
            json,
            bar,
            printed_id: Mutex::new(false),
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }

    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(text),
            None => super::printer::err_line(text),
        }
    }
}

impl Observer for Progress {
    fn event(&self, e: &Event) {
        if (e.event == "run.started" || e.event == "run.resumed") && !self.json {
            let mut printed = self
                .printed_id
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !*printed {
                // Not `println!`: it panics when standard output is a closed pipe.
                let _ = writeln!(std::io::stdout().lock(), "{}", e.run);
                *printed = true;
            }
        }
        let who = match (&e.task, e.attempt) {
            (Some(t), Some(a)) => format!("{t} #{a}"),
            (Some(t), None) => t.clone(),
            _ => "run".to_string(),
        };
        // `task.finished`, `task.stuck` and `run.finished` repeat what the summary says.
        let shown = !matches!(
            e.event.as_str(),
            "task.finished" | "task.stuck" | "run.finished"
        );
        let described = crate::report::event_text::describe(&e.event, &e.detail);
        let text = if self.verbose {
            Some(verbose_line(e, described.as_deref(), &who))
        } else {
            described.filter(|_| shown).map(|t| match e.event.as_str() {
                "run.started" | "run.resumed" => format!("run {}: {t}", e.run),
                _ => format!("{who}: {t}"),
            })
        };
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{who}: {}", e.event));
        }
        if let Some(t) = text {
            self.line(&t);
        }
    }
}
