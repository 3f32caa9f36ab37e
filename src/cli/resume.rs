//! `mvk resume [RUN] [--accept-drift] [--wait] [--json]`: a run id (or the latest run) in; the
//! interrupted or paused run continued to its end out, after its definition was recompiled and
//! compared with what the run began with: drift stops with exit 5 and a report unless accepted.

use std::path::Path;

use clap::Args;

use super::printer::Printer;
use super::progress::Progress;
use super::reading::open_ledger;
use super::repo::repo_root;
use super::running::{execute, lock, run_error};
use super::{Cli, CliError, Exit};
use crate::ledger::{Ledger, RunRow};
use crate::run::driver::{self, ResumeFrom, RunOptions};

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The run to continue (an id or a unique prefix of one; default: the latest run of `mvk
    /// apply`).
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Go on although the definition changed: the changed tasks and those after them are
    /// planned again (fresh budgets and ladder); the acceptance is recorded in the ledger.
    #[arg(long)]
    pub(crate) accept_drift: bool,
    /// When the run's process is still alive, wait for it to end instead of refusing.
    #[arg(long)]
    pub(crate) wait: bool,
    /// Print one JSON document (schema `mvk.apply.v1`) at the end instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// For a run on Temporal: the server's address, when it is no longer the one the run
    /// recorded (the task queue and the repository's URL stay the run's).
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) temporal_address: Option<String>,
}

pub(crate) fn resume(cli: &Cli, printer: &Printer, args: &ResumeArgs) -> Result<Exit, CliError> {
    let repo_root = repo_root(cli)?;
    let run = match args.run.as_deref() {
        Some(given) => super::reading::run_named(cli, Some(given))?,
        None => latest_apply_run(cli)?,
    };
    if stopped_on_error(&repo_root, &run)?.is_none() {
        refuse_finished(&run)?;
    }
    refuse_attempt(printer, &repo_root, &run)?;
    close_all_dead_attempts(printer, &repo_root)?;
    let _lock = lock(
        printer,
        &repo_root,
        &run.program,
        &run.id,
        "resume",
        args.wait,
    )?;
    // Read again under the lock: the holder we waited for may have finished the run.
    let mut run = super::reading::run_named(cli, Some(&run.id))?;
    let mut ledger = open_ledger(&repo_root)?;
    match crate::run::driver::resume::stopped_on_error(&ledger, &run).map_err(run_error)? {
        // An earlier mvk recorded the run finished on its own error with tasks still going:
        // it did not end, so it goes on as an interrupted run.
        Some(unended) => {
            ledger
                .reopen_stopped_run(&run.id)
                .map_err(|e| CliError::Internal {
                    message: super::running::chain(&e),
                })?;
            printer.status(&format!(
                "run `{}` was recorded finished on mvk's own error (exit {}) while {} had not ended; it goes on",
                run.id,
                run.exit_code.unwrap_or(70),
                names(unended.iter())
            ));
            run = super::reading::run_named(cli, Some(&run.id))?;
        }
        None => refuse_finished(&run)?,
    }
    let checkpoints = ledger
        .checkpoints(&run.id)
        .map_err(|e| CliError::Internal {
            message: super::running::chain(&e),
        })?;
    // A paused run goes on once a person answered one of its checkpoints; the tasks still
    // waiting stay where they are.
    let answered = ledger
        .answered_checkpoints(&run.id)
        .map_err(|e| CliError::Internal {
            message: super::running::chain(&e),
        })?;
    // A landing stopped on someone else's index lock asked only for the lock to go: gone, the
    // resume itself is the answer.
    let unlocked = crate::run::git::land::index_unlocked(&repo_root);
    let news = checkpoints.iter().any(|c| {
        (c.decision.is_some() && !answered.contains(&c.id))
            || (c.decision.is_none() && c.kind == "landing" && unlocked)
    });
    if run.state == "paused"
        && !news
        && let Some(c) = super::reading::undecided(&checkpoints).first()
    {
        printer.error(&format!(
            "run `{}` waits for a person at attempt {} of task `{}`: {}",
            run.id, c.attempt, c.task, c.question
        ));
        printer.hint(&format!(
            "answer with `mvk approve {id}` or `mvk reject {id} --reason TEXT`; the run goes on from there",
            id = run.id
        ));
        return Ok(Exit::Human);
    }
    let found = if run.state == "paused" {
        "paused"
    } else {
        "interrupted"
    };
    let file = repo_root.join(&run.file);
    if !file.exists() {
        // The definition was removed: the most drastic drift, and nothing to accept it for.
        printer.error(&format!(
            "run `{}` was not resumed: its loop file `{}` is gone since the run began",
            run.id, run.file
        ));
        printer.hint(&format!(
            "restore it (`git checkout {} -- {}`); the ledger keeps the program the run began with (`mvk why {}` once it is back)",
            &run.base_commit[..12.min(run.base_commit.len())],
            run.file,
            run.id
        ));
        return Ok(Exit::Drift);
    }
    let program = super::compile(cli, printer, &file)?;
    super::running::sandbox_preflight(printer, &program)?;
    let drift = crate::run::driver::resume::drift(&ledger, &run, &program, &repo_root)
        .map_err(run_error)?;
    let began = crate::run::driver::resume::began(&ledger, &run).map_err(run_error)?;
    let elsewhere = match began.executor.as_deref() {
        None if args.temporal_address.is_some() => {
            return Err(CliError::Usage {
                message: format!(
                    "run `{}` ran here (`--executor local`): `--temporal-address` names the server of a run on Temporal",
                    run.id
                ),
                hint: Some(format!("leave it out: `mvk resume {}`", run.id)),
            });
        }
        None => None,
        Some(executor) => Some(remote_resume(
            executor,
            &ledger,
            &run,
            args,
            !drift.is_empty(),
        )?),
    };
    // What each task spent before this resume, which its budget counts (best effort: only
    // the progress shown reads it).
    let spent_before: std::collections::BTreeMap<String, (u64, f64)> = program
        .tasks
        .iter()
        .filter_map(|t| {
            let s = ledger.spent(&run.id, Some(&t.name)).ok()?;
            let tokens = s.input_tokens.saturating_add(s.output_tokens);
            Some((t.name.clone(), (tokens, s.usd_micros as f64 / 1e6)))
        })
        .collect();
    drop(ledger);
    let accepted = if drift.is_empty() {
        None
    } else if args.accept_drift {
        printer.status(&format!(
            "drift accepted: re-planning {}",
            names(drift.replanned().iter())
        ));
        Some(drift)
    } else {
        super::printer::print_drift(printer, &drift);
        printer.error(&format!(
            "run `{}` was not resumed: its definition drifted since it began",
            run.id
        ));
        if elsewhere.is_some() {
            printer.hint(&temporal_drift_hint(&run.id));
        } else {
            printer.hint(&format!(
                "review the change; `mvk resume {} --accept-drift` plans the changed tasks and those after them again",
                run.id
            ));
        }
        return Ok(Exit::Drift);
    };
    let opts = RunOptions {
        file: run.file.clone(),
        repo_root,
        task: None,
        worktree_root: None,
        mode: crate::run::driver::RunMode::parse(&run.mode).ok_or_else(|| CliError::Internal {
            message: format!(
                "run {} was started in mode `{}`, which this mvk does not know",
                run.id, run.mode
            ),
        })?,
        run_id: run.id.clone(),
    };
    let from = ResumeFrom {
        run,
        drift: accepted,
        found: found.into(),
    };
    // A run on Temporal writes its attempts' logs on the workers.
    let files = elsewhere.is_none().then_some(opts.repo_root.as_path());
    let progress = Progress::new(printer, args.json, &program, files);
    progress.spent_before(spent_before);
    let notifier = super::running::notifier(printer, &program, &opts);
    let watching = notifier.watching(&progress);
    match elsewhere {
        None => execute(
            printer,
            args.json,
            (&progress, &notifier),
            (&opts.repo_root, &opts.run_id),
            driver::resume(&program, &opts, &watching, from),
        ),
        #[cfg(feature = "temporal")]
        Some(Remote::Temporal(endpoint, repo_url)) => execute(
            printer,
            args.json,
            (&progress, &notifier),
            (&opts.repo_root, &opts.run_id),
            crate::run::temporal::resume(&program, &opts, &watching, (&endpoint, &repo_url), from),
        ),
    }
}

/// What to do about the drift of run `run` on Temporal, whose workflow cannot be re-planned.
fn temporal_drift_hint(run: &str) -> String {
    format!(
        "its workflow goes on with what the run began with: put back what changed (the definition, or sealed files a commit on the target changed; `mvk why {run}` names them) and resume, or start the flow again with `mvk apply` (what landed stays landed)"
    )
}

/// Where a run made by workers goes on.
enum Remote {
    #[cfg(feature = "temporal")]
    Temporal(crate::run::temporal::Endpoint, String),
}

/// How the run `run`, made by `executor`'s workers, goes on: its workflow runs the program it
/// began with (the workflow's stored IR), so drift cannot be accepted there; refused by a build
/// without that executor.
fn remote_resume(
    executor: &str,
    ledger: &Ledger,
    run: &RunRow,
    args: &ResumeArgs,
    drifted: bool,
) -> Result<Remote, CliError> {
    if executor != "temporal" {
        return Err(CliError::Usage {
            message: format!(
                "run `{}` ran with `--executor {executor}`, which this mvk does not know",
                run.id
            ),
            hint: None,
        });
    }
    if drifted && args.accept_drift {
        return Err(CliError::Usage {
            message: format!(
                "run `{}` runs on Temporal, whose workflow goes on with the definition it began with: `--accept-drift` cannot plan its tasks again",
                run.id
            ),
            hint: Some(temporal_drift_hint(&run.id)),
        });
    }
    #[cfg(feature = "temporal")]
    {
        let (mut endpoint, repo_url) =
            crate::run::temporal::recorded_endpoint(ledger, &run.id).map_err(run_error)?;
        if let Some(address) = &args.temporal_address {
            endpoint.address.clone_from(address);
        }
        Ok(Remote::Temporal(endpoint, repo_url))
    }
    #[cfg(not(feature = "temporal"))]
    {
        let _ = (ledger, args);
        Err(super::running::without_temporal())
    }
}

fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<String> = it.map(|n| format!("`{n}`")).collect();
    if v.is_empty() {
        "nothing (only settings that need no re-run changed)".into()
    } else {
        v.join(", ")
    }
}

/// The tasks that did not end of `run`, when an earlier mvk recorded it finished on its own
/// error all the same (see [`crate::run::driver::resume::stopped_on_error`]).
fn stopped_on_error(repo_root: &Path, run: &RunRow) -> Result<Option<Vec<String>>, CliError> {
    if run.state != "finished" || run.outcome.as_deref() != Some("error") {
        return Ok(None);
    }
    let ledger = open_ledger(repo_root)?;
    crate::run::driver::resume::stopped_on_error(&ledger, run).map_err(run_error)
}

fn refuse_finished(run: &RunRow) -> Result<(), CliError> {
    if run.state != "finished" {
        return Ok(());
    }
    Err(CliError::Usage {
        message: format!(
            "run `{}` already finished: {} (exit {}); there is nothing to resume",
            run.id,
            run.outcome.as_deref().unwrap_or("?"),
            run.exit_code.unwrap_or(-1)
        ),
        hint: Some(if run.command == "attempt" {
            format!("make another attempt with `mvk attempt {}`", run.file)
        } else {
            format!("start a new run with `mvk apply {}`", run.file)
        }),
    })
}

/// An interrupted `mvk attempt` is not continued: a resume goes on as a run, and would land work
/// nobody asked to land (the attempt promised to land nothing). A dead one is closed instead:
/// what it left running is killed and the run recorded as `interrupted`.
fn refuse_attempt(printer: &Printer, repo_root: &Path, run: &RunRow) -> Result<(), CliError> {
    if run.command != "attempt" {
        return Ok(());
    }
    let closed = close_dead_attempts(printer, repo_root, std::slice::from_ref(run))?;
    Err(CliError::Usage {
        message: format!(
            "run `{}` is one attempt (`mvk attempt`), which lands nothing; `mvk resume` does not continue it{}",
            run.id,
            if closed > 0 {
                "; its process was gone, so it is closed as `interrupted`"
            } else {
                ""
            }
        ),
        hint: Some(format!(
            "make another attempt with `mvk attempt {}`, or run the loop with `mvk apply {}`",
            run.file, run.file
        )),
    })
}

/// Closes every `mvk attempt` of the repository whose process died (killed, its MCP server
/// gone), whatever its loop, before a command leases a worktree: the pool's slot lock died with
/// the killed mvk, so its orphaned agent could otherwise go on writing into the slot the next
/// run leases. (A dead `mvk apply` run is not closed: `mvk resume` continues it, and kills its
/// orphans first.)
pub(crate) fn close_all_dead_attempts(printer: &Printer, repo_root: &Path) -> Result<(), CliError> {
    let db = repo_root.join(".mvk").join("ledger.db");
    if !db.exists() {
        return Ok(());
    }
    let reader = crate::ledger::read::Reader::open(&db).map_err(super::reading::read_error)?;
    let dead: Vec<_> = reader
        .runs()
        .map_err(|e| super::reading::internal(&e))?
        .into_iter()
        .filter(|r| r.command == "attempt" && r.state == "running")
        .collect();
    drop(reader);
    close_dead_attempts(printer, repo_root, &dead).map(|_| ())
}

/// Closes each of RUNS that is an `mvk attempt` whose process died (see
/// [`crate::run::driver::resume::close_dead_attempt`]), saying so; returns how many were closed.
pub(crate) fn close_dead_attempts(
    printer: &Printer,
    repo_root: &Path,
    runs: &[RunRow],
) -> Result<usize, CliError> {
    let mut closed = 0;
    for run in runs {
        if let Some(killed) =
            crate::run::driver::resume::close_dead_attempt(repo_root, run).map_err(run_error)?
        {
            closed += 1;
            printer.status(&format!(
                "closed attempt run `{}` as interrupted: its process was gone; {killed} process{} it left running killed",
                run.id,
                if killed == 1 { "" } else { "es" }
            ));
        }
    }
    Ok(closed)
}

/// The run `mvk resume` continues when none is named: the latest run of `mvk apply`, not an
/// attempt made since. With no such run, the latest run, which is then refused as an attempt.
fn latest_apply_run(cli: &Cli) -> Result<RunRow, CliError> {
    let ledger = super::reading::open(cli)?;
    let runs = ledger
        .reader
        .runs()
        .map_err(|e| super::reading::internal(&e))?;
    match runs.iter().find(|r| r.command == "apply") {
        Some(run) => Ok(run.clone()),
        None => super::reading::find_run(&ledger, None),
    }
}
