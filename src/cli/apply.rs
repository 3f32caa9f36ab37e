//! `mvk apply FILE [--task NAME] [--json]`: compile FILE and run it to an end in its repository;
//! the run id first on stdout, progress on stderr, the exit code per the contract.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use super::printer::Printer;
use super::progress::Progress;
use super::repo::{repository, shown_file};
#[cfg(not(feature = "temporal"))]
use super::running::without_temporal;
use super::running::{execute, lock, refuse_library, run_error, sandbox_preflight};
use super::{Cli, CliError, Exit};
use crate::run::driver::{self, RunOptions};

#[derive(Debug, Args)]
pub(crate) struct ApplyArgs {
    /// The loop or flow file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Run only this task of a flow (from the target's current tip).
    #[arg(long, value_name = "NAME")]
    pub(crate) task: Option<String>,
    /// When to stop for a person: `auto` only where the loop says (a `human` rung, review
    /// rounds run out); `step` after each attempt, `batch` before each landing (the run pauses,
    /// exit 4, until `mvk approve` or `mvk reject`).
    #[arg(long, value_enum, default_value_t = Mode::Auto)]
    pub(crate) mode: Mode,
    /// Print one JSON document (schema `mvk.apply.v1`) at the end instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// When another run of the same loop or flow is going on, wait for it to end instead of
    /// refusing.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Start without `mvk doctor`'s checks of the agents and gates (for a CLI that accepts a
    /// flag its `--help` does not list).
    #[arg(long)]
    pub(crate) no_doctor: bool,
    /// Where attempts are made: `local` (by this process), or `temporal` (a Temporal workflow
    /// whose attempts `mvk worker` processes make, each in its own clone; this process records
    /// the run and lands the changes). `temporal` needs mvk built with the `temporal` feature,
    /// and does not yet take `--mode batch|step` or a `human` rung.
    #[arg(long, value_enum, default_value_t = Executor::Local)]
    pub(crate) executor: Executor,
    #[command(flatten)]
    pub(crate) temporal: TemporalArgs,
    /// With `--executor temporal`: where workers reach this repository, to fetch each
    /// attempt's base and push a passed change to a ref under `refs/mvk/temporal/` (any URL
    /// `git fetch` and `git push` take: `ssh://host/path`, `https://…`, `git://…`, a path).
    /// Default: this repository's path, which only workers on this machine (or a shared
    /// filesystem) can reach.
    #[arg(long, value_name = "URL")]
    pub(crate) repo_url: Option<String>,
}

/// Where the Temporal server is and which task queue the workers poll.
#[derive(Debug, Args)]
pub(crate) struct TemporalArgs {
    /// The Temporal server (frontend gRPC), for `--executor temporal` and `mvk worker`.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7233")]
    pub(crate) temporal_address: String,
    /// The task queue attempts are sent to and `mvk worker` polls.
    #[arg(long, value_name = "QUEUE", default_value = "mvk")]
    pub(crate) task_queue: String,
    /// The Temporal namespace the workflow runs in; the coordinator and its workers must name
    /// the same one.
    #[arg(long, value_name = "NAMESPACE", default_value = "default")]
    pub(crate) temporal_namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Executor {
    Local,
    Temporal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    Auto,
    Batch,
    Step,
}

pub(crate) fn apply(cli: &Cli, printer: &Printer, args: &ApplyArgs) -> Result<Exit, CliError> {
    if args.executor == Executor::Temporal {
        refuse_for_temporal(args)?;
    } else if args.repo_url.is_some() {
        return Err(CliError::Usage {
            message: "`--repo-url` tells Temporal workers where this repository is; a local run has no workers".into(),
            hint: Some("add `--executor temporal`, or leave `--repo-url` out".into()),
        });
    }
    let (program, warnings) = super::compile_for_run(cli, printer, &args.file)?;
    refuse_library(&program, &args.file)?;
    super::refuse_paths_matching_nothing(&warnings)?;
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
    // Temporal's workers write the attempts' logs in their own clones.
    let files = (args.executor == Executor::Local).then_some(opts.repo_root.as_path());
    let progress = Progress::new(printer, args.json, &program, files);
    let notifier = super::running::notifier(printer, &program, &opts);
    let watching = notifier.watching(&progress);
    let executor = executor(args, &opts)?;
    execute(
        printer,
        args.json,
        (&progress, &notifier),
        (&opts.repo_root, &opts.run_id),
        executor.apply(&program, &opts, &watching),
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
