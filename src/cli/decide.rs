//! `mvk approve RUN [TASK]` and `mvk reject RUN [TASK] --reason TEXT`: a paused run and a
//! person's decision in; the decision recorded at the checkpoint where the run waits (a ledger
//! row, written before anything acts on it) and the run continued in this process, as
//! `mvk resume` would, out.

use clap::Args;

use super::printer::Printer;
use super::reading::run_named;
use super::reading::{open_ledger, undecided};
use super::repo::repo_root;
use super::resume::ResumeArgs;
use super::{Cli, CliError, Exit};
use crate::ledger::CheckpointRow;

#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The paused run (an id or a unique prefix of one).
    #[arg(value_name = "RUN")]
    pub(crate) run: String,
    /// The task whose checkpoint is answered (default: every task that waits).
    #[arg(value_name = "TASK")]
    pub(crate) task: Option<String>,
    /// Print one JSON document (schema `mvk.apply.v1`) at the end instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RejectArgs {
    /// The paused run (an id or a unique prefix of one).
    #[arg(value_name = "RUN")]
    pub(crate) run: String,
    /// The task whose checkpoint is answered (needed only when several wait).
    #[arg(value_name = "TASK")]
    pub(crate) task: Option<String>,
    /// Why: it goes into the next attempt's prompt.
    #[arg(long, value_name = "TEXT")]
    pub(crate) reason: String,
    /// Print one JSON document (schema `mvk.apply.v1`) at the end instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn approve(cli: &Cli, printer: &Printer, args: &ApproveArgs) -> Result<Exit, CliError> {
    decide(
        cli,
        printer,
        (&args.run, args.task.as_deref()),
        None,
        args.json,
    )
}

pub(crate) fn reject(cli: &Cli, printer: &Printer, args: &RejectArgs) -> Result<Exit, CliError> {
    if args.reason.trim().is_empty() {
        return Err(CliError::Usage {
            message: "`--reason` is empty; the next attempt's prompt needs to say what is wrong"
                .into(),
            hint: Some("say what to change, e.g. `--reason \"handle negative numbers\"`".into()),
        });
    }
    decide(
        cli,
        printer,
        (&args.run, args.task.as_deref()),
        Some(args.reason.trim()),
        args.json,
    )
}

/// Records `reason`'s decision (a rejection when `Some`) and continues the run.
fn decide(
    cli: &Cli,
    printer: &Printer,
    (run, task): (&str, Option<&str>),
    reason: Option<&str>,
    json: bool,
) -> Result<Exit, CliError> {
    let (run, answered) = record(cli, (run, task), reason, None)?;
    for c in &answered {
        printer.status(&c.said());
    }
    printer.status("the run goes on");
    super::resume::resume(
        cli,
        printer,
        &ResumeArgs {
            run: Some(run),
            accept_drift: false,
            wait: false,
            json,
            temporal_address: None,
        },
    )
}

/// A checkpoint a person answered.
#[derive(Debug, Clone)]
pub(crate) struct Answered {
    /// `approve` or `reject`.
    pub(crate) decision: &'static str,
    pub(crate) task: String,
    pub(crate) attempt: u32,
    /// `review`, `step`, `batch` or `human`.
    pub(crate) kind: String,
}

impl Answered {
    /// `approved attempt 1 of task `t` (step checkpoint)`.
    pub(crate) fn said(&self) -> String {
        format!(
            "{}d attempt {} of task `{}` ({} checkpoint)",
            self.decision, self.attempt, self.task, self.kind
        )
    }
}

/// Records `reason`'s decision (a rejection when `Some`) at the checkpoints of `run` where
/// `task` (default: every task that waits) waits, after the checks `mvk approve` and
/// `mvk reject` make; the run's id and what was answered out. The run is not continued: that is
/// the caller's (`mvk approve` continues it in its own process, `mvk watch` in a detached one).
pub(crate) fn record(
    cli: &Cli,
    (run, task): (&str, Option<&str>),
    reason: Option<&str>,
    expected: Option<i64>,
) -> Result<(String, Vec<Answered>), CliError> {
    let repo_root = repo_root(cli)?;
    let run = run_named(cli, Some(run))?;
    let mut ledger = open_ledger(&repo_root)?;
    let internal = |e: crate::ledger::LedgerError| CliError::Internal {
        message: super::running::chain(&e),
    };
    let rows = ledger.checkpoints(&run.id).map_err(internal)?;
    let open = undecided(&rows);
    if run.state != "paused" || open.is_empty() {
        return Err(CliError::Usage {
            message: format!(
                "run `{}` does not wait for a person (it is {})",
                run.id, run.state
            ),
            hint: Some(format!("`mvk status {}` shows where it stands", run.id)),
        });
    }
    let chosen: Vec<&CheckpointRow> = open
        .iter()
        .copied()
        .filter(|c| task.is_none_or(|t| c.task == t))
        .collect();
    let waiting = || {
        open.iter()
            .map(|c| format!("`{}`", c.task))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if chosen.is_empty() {
        return Err(CliError::Usage {
            message: format!(
                "task `{}` of run `{}` does not wait for a person",
                task.unwrap_or_default(),
                run.id
            ),
            hint: Some(format!("waiting: {}", waiting())),
        });
    }
    // An answer given to what a person saw (`mvk watch`): refused if the task now waits at
    // another checkpoint (a colleague answered that one, and the next attempt paused again).
    if let Some(id) = expected
        && !chosen.iter().any(|c| c.id == id)
    {
        return Err(CliError::Usage {
            message: format!(
                "the checkpoint you answered (#{id}) is no longer open: task `{}` of run `{}` waits at another now",
                task.unwrap_or_default(),
                run.id
            ),
            hint: Some("look at it again before answering".to_string()),
        });
    }
    // Approving with no task named answers every waiting task (a batch of a flow); a
    // rejection's reason is about one task's work, so it must name the task.
    if chosen.len() > 1 && reason.is_some() {
        return Err(CliError::Usage {
            message: format!("several tasks of run `{}` wait for a person", run.id),
            hint: Some(format!("name the task the reason is about: {}", waiting())),
        });
    }
    let decision = if reason.is_some() {
        "reject"
    } else {
        "approve"
    };
    // Approving at the `human` rung judges the attempt's branch as the person left it: a branch
    // that is gone is refused before anything is recorded, so the run is not left holding an
    // answer it cannot follow.
    if decision == "approve" {
        for c in chosen.iter().filter(|c| c.kind == "human") {
            let branch = crate::run::attempt::branch_name(&run.id, &c.task, c.attempt);
            if crate::run::git::land::branch_tip(&repo_root, &branch).is_err() {
                return Err(CliError::Usage {
                    message: format!(
                        "branch `{branch}` of attempt {} of task `{}` is gone, so there is nothing to approve",
                        c.attempt, c.task
                    ),
                    hint: Some(format!(
                        "recreate the branch with the work on it, or `mvk reject {} {} --reason TEXT` for another attempt",
                        run.id, c.task
                    )),
                });
            }
        }
    }
    let mut answered = Vec::with_capacity(chosen.len());
    for c in &chosen {
        ledger.decide(c.id, decision, reason).map_err(internal)?;
        answered.push(Answered {
            decision,
            task: c.task.clone(),
            attempt: c.attempt,
            kind: c.kind.clone(),
        });
    }
    Ok((run.id, answered))
}
