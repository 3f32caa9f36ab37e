//! `mvk attempt FILE [--task NAME] [--json]`: a loop file in; one evidenced attempt of one task
//! out, judged as `mvk apply` judges one (a clean worktree from the target's tip, the seal, the
//! gates with evidence, the reviewer), recorded in the ledger as a run of its own and never
//! landed: the verdict, the test counts, the failure and its signature, the events' ids. Exit
//! 0 passed, 1 failed, 2 unknown (no evidence), 3 the wall budget ran out.

use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::progress::Progress;
use super::repo::{repository, shown_file};
use super::running::{run_error, until_signal};
use super::{Cli, CliError, Exit};
use crate::ledger::read::Reader;
use crate::run::attempt::Failure;
use crate::run::attempt_result::{
    AttemptResult, Counts, EventRef, FailureResult, GateResult, UsageResult,
};
use crate::run::driver::{self, OnceReport, OnceSpec, RunOptions};

/// The schema name of [`AttemptResult`].
pub(crate) const SCHEMA: &str = "mvk.attempt.v1";

#[derive(Debug, Args)]
pub(crate) struct AttemptArgs {
    /// The loop or flow file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// The task to attempt (needed when the file has several).
    #[arg(long, value_name = "NAME")]
    pub(crate) task: Option<String>,
    /// Print one JSON document (schema `mvk.attempt.v1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
    /// Internal (`mvk worker`): the process that started this attempt; when it dies, the
    /// attempt is interrupted as by SIGTERM, so a killed worker leaves no attempt running
    /// that nobody will collect.
    #[arg(long, value_name = "PID", hide = true)]
    pub(crate) with_parent: Option<u32>,
    /// Internal (the temporal executor's workers): the attempt's number in its task.
    #[arg(long, hide = true, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) number: u32,
    /// Internal: the 1-based rung of the task's ladder whose agent makes the attempt.
    #[arg(long, hide = true, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) rung: u32,
    /// Internal: a JSON file holding the previous attempt's failure, for the prompt.
    #[arg(long, hide = true, value_name = "FILE")]
    pub(crate) previous_failure: Option<PathBuf>,
    /// Internal: where to write the attempt's failure as JSON, whole (the JSON document's
    /// `failure` is a summary of it).
    #[arg(long, hide = true, value_name = "FILE")]
    pub(crate) failure_out: Option<PathBuf>,
    /// Internal (`mvk worker`): the commit to start from, instead of the target's tip here (the
    /// worker's checkout stands detached at it, so no branch of the clone is moved).
    #[arg(long, hide = true, value_name = "OID", requires = "target")]
    pub(crate) base: Option<String>,
    /// Internal: the branch the `--base` commit stands for (the task's target).
    #[arg(long, hide = true, value_name = "BRANCH", requires = "base")]
    pub(crate) target: Option<String>,
    /// Internal (`mvk worker`): tokens and micro-dollars the task spent before this attempt,
    /// `TOKENS,USD_MICROS`; the attempt is held to what is left of its budget.
    #[arg(long, hide = true, value_name = "TOKENS,USD_MICROS", value_parser = spent_arg)]
    pub(crate) spent: Option<crate::run::meter::Spend>,
    /// Internal: the same for the whole flow, held to what is left of the flow's budget.
    #[arg(long, hide = true, value_name = "TOKENS,USD_MICROS", value_parser = spent_arg)]
    pub(crate) flow_spent: Option<crate::run::meter::Spend>,
    /// Internal (`mvk worker`): where to keep what the attempt has spent so far, as it runs
    /// (`{"tokens":N,"usd_micros":N}`), for the worker's heartbeats.
    #[arg(long, hide = true, value_name = "FILE")]
    pub(crate) spending_out: Option<PathBuf>,
}

/// `TOKENS,USD_MICROS`.
fn spent_arg(text: &str) -> Result<crate::run::meter::Spend, String> {
    let (tokens, usd) = text
        .split_once(',')
        .ok_or_else(|| "write TOKENS,USD_MICROS".to_string())?;
    let number = |s: &str| s.trim().parse::<u64>().map_err(|e| format!("`{s}`: {e}"));
    Ok(crate::run::meter::Spend {
        tokens: number(tokens)?,
        usd_micros: number(usd)?,
    })
}

/// SIGTERM to this process when `parent` dies. Set before anything runs; a parent already gone
/// (the attempt re-parented before the signal was armed) refuses the attempt.
fn die_with_parent(parent: u32) -> Result<(), CliError> {
    let failed = |what: String| CliError::Usage {
        message: what,
        hint: Some("`--with-parent` is for `mvk worker`; leave it out".into()),
    };
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
        .map_err(|e| failed(format!("cannot arm the parent-death signal: {e}")))?;
    let now = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    if now.and_then(|p| u32::try_from(p).ok()) != Some(parent) {
        return Err(failed(format!(
            "the process that started this attempt ({parent}) is gone"
        )));
    }
    Ok(())
}

pub(crate) fn attempt(cli: &Cli, printer: &Printer, args: &AttemptArgs) -> Result<Exit, CliError> {
    if let Some(parent) = args.with_parent {
        die_with_parent(parent)?;
    }
    let (program, warnings) = super::compile_for_run(cli, printer, &args.file)?;
    super::refuse_paths_matching_nothing(&warnings)?;
    super::running::refuse_library(&program, &args.file)?;
    let repo_root = repository(cli, &args.file)?;
    super::resume::close_all_dead_attempts(printer, &repo_root)?;
    let opts = RunOptions {
        file: shown_file(&args.file, &repo_root),
        repo_root: repo_root.clone(),
        task: args.task.clone(),
        worktree_root: None,
        // A resume of this run after a crash stops for a person before any landing.
        mode: crate::run::driver::RunMode::Step,
        run_id: driver::new_run_id().map_err(run_error)?,
    };
    let start = match (&args.base, &args.target) {
        (Some(base), Some(target)) => Some((
            git2::Oid::from_str(base).map_err(|e| CliError::Usage {
                message: format!("`--base {base}` is not a commit id: {e}"),
                hint: None,
            })?,
            target.clone(),
        )),
        _ => None,
    };
    let once = OnceSpec {
        number: args.number,
        rung: args.rung,
        start,
        spent: args.spent.unwrap_or_default(),
        flow_spent: args.flow_spent.unwrap_or_default(),
        spending_out: args.spending_out.clone(),
        previous: args
            .previous_failure
            .as_deref()
            .map(read_failure)
            .transpose()?,
    };
    let progress = Progress::new(printer, args.json, &program, Some(&repo_root));
    let result = until_signal(
        driver::attempt_once(&program, &opts, &progress, &once),
        |signal| {
            super::running::record_stop(&repo_root, &opts.run_id, signal);
        },
    )?;
    progress.finish();
    let once = match result {
        Err(signal) => {
            let by = crate::run::exec::signals::stop_name(signal).1;
            printer.error(&format!(
                "stopped by {by}; every agent and gate this attempt started was stopped (nothing was landed)"
            ));
            return Ok(Exit::Interrupted);
        }
        Ok(r) => r.map_err(run_error)?,
    };
    if let Some(path) = &args.failure_out {
        write_failure(path, once.failure.as_ref())?;
    }
    let result = report(&repo_root, &once)?;
    if args.json {
        super::reading::print_json(printer, &result)?;
    } else {
        printer.out(&text(&result));
    }
    Ok(Exit::from_code(result.exit_code))
}

/// The previous attempt's failure from `--previous-failure`.
fn read_failure(path: &std::path::Path) -> Result<Failure, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError::Usage {
        message: format!("cannot read `{}`: {e}", path.display()),
        hint: None,
    })?;
    serde_json::from_str(&text).map_err(|e| CliError::Usage {
        message: format!("`{}` holds no failure: {e}", path.display()),
        hint: None,
    })
}

/// Writes the attempt's failure (`null` when it passed) to `--failure-out`.
fn write_failure(path: &std::path::Path, failure: Option<&Failure>) -> Result<(), CliError> {
    let text = serde_json::to_string(&failure).map_err(|e| CliError::Internal {
        message: format!("cannot encode the failure: {e}"),
    })?;
    std::fs::write(path, text).map_err(|e| CliError::Internal {
        message: format!("cannot write `{}`: {e}", path.display()),
    })
}

/// The attempt's result, its gates and events read back from the ledger.
fn report(repo_root: &std::path::Path, once: &OnceReport) -> Result<AttemptResult, CliError> {
    let internal = |e: &dyn std::error::Error| super::reading::internal(e);
    let reader = Reader::open(&repo_root.join(".mvk").join("ledger.db"))
        .map_err(super::reading::read_error)?;
    let gates: Vec<GateResult> = reader
        .gate_results(Some(&once.run))
        .map_err(|e| internal(&e))?
        .into_iter()
        .filter(|g| g.attempt_id == once.attempt_id)
        .map(|g| {
            let count = |n: Option<i64>| n.and_then(|n| u64::try_from(n).ok());
            let counts = count(g.executed).map(|executed| Counts {
                executed,
                passed: count(g.passed).unwrap_or(0),
                failed: count(g.failed).unwrap_or(0),
                skipped: count(g.skipped).unwrap_or(0),
            });
            GateResult {
                name: g.name,
                verdict: g.verdict,
                exit_code: g.exit_code,
                counts,
                evidence: g.evidence,
                reason: g.reason,
            }
        })
        .collect();
    let counts = gates
        .iter()
        .filter_map(|g| g.counts)
        .fold(Counts::default(), |a, c| Counts {
            executed: a.executed + c.executed,
            passed: a.passed + c.passed,
            failed: a.failed + c.failed,
            skipped: a.skipped + c.skipped,
        });
    let events = reader
        .events(&once.run, 0)
        .map_err(|e| internal(&e))?
        .into_iter()
        .map(|e| EventRef {
            id: e.id,
            event: e.event,
            attempt: e.attempt,
        })
        .collect();
    let verdict = match &once.failure {
        None => "passed",
        Some(f) if f.kind == crate::run::attempt::FailureKind::Unknown => "unknown",
        Some(_) => "failed",
    };
    Ok(AttemptResult {
        schema: SCHEMA.into(),
        run: once.run.clone(),
        task: once.task.clone(),
        attempt: once.number,
        verdict: verdict.into(),
        outcome: once.outcome.name().into(),
        exit_code: once.outcome.exit_code(),
        base: once.base.to_string(),
        head: once.head.map(|h| h.to_string()),
        branch: once.branch.clone(),
        counts,
        gates,
        failure: once.failure.as_ref().map(failure),
        usage: UsageResult::from(&once.usage),
        events,
    })
}

fn failure(f: &Failure) -> FailureResult {
    FailureResult {
        kind: f.kind.name().into(),
        criterion: f.criterion.clone(),
        signature: f.signature.clone(),
        gate: f.gate.clone(),
        exit_code: f.exit_code,
        breaches: f.breaches.clone(),
        blockers: f
            .blockers
            .iter()
            .map(crate::prompt::Blocker::line)
            .collect(),
        tail: f.tail.clone(),
    }
}

fn text(r: &AttemptResult) -> String {
    let mut out = format!(
        "{} {} attempt {}: {}",
        if r.verdict == "passed" { "✓" } else { "✗" },
        r.task,
        r.attempt,
        r.verdict
    );
    if r.counts.executed > 0 {
        out.push_str(&format!(
            " ({} tests: {} passed, {} failed, {} skipped)",
            r.counts.executed, r.counts.passed, r.counts.failed, r.counts.skipped
        ));
    }
    match &r.failure {
        Some(f) => out.push_str(&format!(
            "\n  {}: {} [signature {}]",
            f.kind, f.criterion, f.signature
        )),
        None => out.push_str(&format!(
            "\n  not landed: the change is on `{}`{}",
            r.branch,
            r.head
                .as_deref()
                .map(|h| format!(" at {}", h.get(..10).unwrap_or(h)))
                .unwrap_or_default()
        )),
    }
    out.push_str(&format!(
        "\nrun {}: {} (exit {})",
        r.run, r.outcome, r.exit_code
    ));
    out
}
