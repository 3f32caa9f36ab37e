//! `mvk why [RUN] [TASK] [--json]`: a run in; its drift report out (what changed in the
//! definition since the run began, field by field, with both locations) and, for each task,
//! why a resume would or would not run it again.

use clap::Args;
use serde::Serialize;

use super::printer::{Printer, print_drift};
use super::reading::open_ledger;
use super::reading::run_named;
use super::repo::repo_root;
use super::{Cli, CliError, Exit};
use crate::drift::DriftReport;
use crate::ledger::TaskRowState;

#[derive(Debug, Args)]
pub(crate) struct WhyArgs {
    /// The run (an id or a unique prefix of one; default: the latest run).
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Explain this task only.
    #[arg(value_name = "TASK")]
    pub(crate) task: Option<String>,
    /// Print one JSON document (schema `mvk.why.v1`).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Why a task would or would not run again.
#[derive(Debug, Serialize)]
struct Explanation {
    task: String,
    /// `done`, `changed`, `invalidated`, `unfinished`, `not-started`, `removed`.
    verdict: &'static str,
    reruns: bool,
    reason: String,
}

#[derive(Debug, Serialize)]
struct WhyReport<'a> {
    schema: &'static str,
    run: &'a str,
    file: &'a str,
    state: &'a str,
    drift: &'a DriftReport,
    tasks: Vec<Explanation>,
}

pub(crate) fn why(cli: &Cli, printer: &Printer, args: &WhyArgs) -> Result<Exit, CliError> {
    let repo_root = repo_root(cli)?;
    let run = run_named(cli, args.run.as_deref())?;
    let ledger = open_ledger(&repo_root)?;
    let program = super::compile(cli, printer, &repo_root.join(&run.file))?;
    let drift = crate::run::driver::resume::drift(&ledger, &run, &program, &repo_root)
        .map_err(super::running::run_error)?;
    let internal = |e: crate::ledger::LedgerError| CliError::Internal {
        message: super::running::chain(&e),
    };
    let rows = ledger.task_rows(&run.id).map_err(internal)?;
    if let Some(t) = &args.task
        && program.task(t).is_none()
        && !rows.iter().any(|r| &r.name == t)
    {
        return Err(CliError::Usage {
            message: format!("run `{}` has no task `{t}`", run.id),
            hint: Some(format!(
                "its tasks: {}",
                program
                    .tasks
                    .iter()
                    .map(|t| format!("`{}`", t.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        });
    }
    let finished_run = run.state == "finished";
    let mut tasks = Vec::new();
    for t in &program.tasks {
        let row = rows.iter().find(|r| r.name == t.name);
        let changed = drift.changed.iter().find(|c| c.task == t.name);
        let invalidated = drift.invalidated.iter().find(|i| i.task == t.name);
        let e = if let Some(c) = changed {
            let fields: Vec<String> = c.fields.iter().map(|f| format!("`{}`", f.field)).collect();
            Explanation {
                task: t.name.clone(),
                verdict: "changed",
                reruns: true,
                reason: format!(
                    "its {} changed; `mvk resume --accept-drift` plans it again with fresh budgets",
                    fields.join(", ")
                ),
            }
        } else if let Some(i) = invalidated {
            Explanation {
                task: t.name.clone(),
                verdict: "invalidated",
                reruns: true,
                reason: format!(
                    "it starts after {}, which changed; its result would rest on the old one",
                    i.because
                        .iter()
                        .map(|b| format!("`{b}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        } else if drift.added.contains(&t.name) {
            Explanation {
                task: t.name.clone(),
                verdict: "changed",
                reruns: true,
                reason: "it is new in the definition".into(),
            }
        } else {
            match row {
                Some(r) if r.state == TaskRowState::Finished => Explanation {
                    task: t.name.clone(),
                    verdict: "done",
                    reruns: false,
                    reason: format!(
                        "finished {}{}; its digest {} is unchanged, so it does not run again",
                        r.outcome.as_deref().unwrap_or("?"),
                        r.merged
                            .as_deref()
                            .map_or(String::new(), |m| format!(" (landed as {})", &m[..10.min(m.len())])),
                        &r.digest[..12.min(r.digest.len())]
                    ),
                },
                Some(_) if finished_run => Explanation {
                    task: t.name.clone(),
                    verdict: "unfinished",
                    reruns: false,
                    reason: "the run ended before this task did".into(),
                },
                Some(_) => Explanation {
                    task: t.name.clone(),
                    verdict: "unfinished",
                    reruns: true,
                    reason: "it was under way; `mvk resume` carries on from its last finished step (no finished attempt runs again)".into(),
                },
                None if finished_run => Explanation {
                    task: t.name.clone(),
                    verdict: "not-started",
                    reruns: false,
                    reason: "the run ended before it started".into(),
                },
                None => Explanation {
                    task: t.name.clone(),
                    verdict: "not-started",
                    reruns: true,
                    reason: "it has not started; `mvk resume` starts it".into(),
                },
            }
        };
        tasks.push(e);
    }
    for name in &drift.removed {
        tasks.push(Explanation {
            task: name.clone(),
            verdict: "removed",
            reruns: false,
            reason: "it is no longer in the definition".into(),
        });
    }
    if let Some(only) = &args.task {
        tasks.retain(|e| &e.task == only);
    }
    if args.json {
        let report = WhyReport {
            schema: "mvk.why.v1",
            run: &run.id,
            file: &run.file,
            state: &run.state,
            drift: &drift,
            tasks,
        };
        let text = serde_json::to_string_pretty(&report).map_err(|e| CliError::Internal {
            message: format!("cannot encode the report as JSON: {e}"),
        })?;
        printer.out(&text);
        return Ok(Exit::Ok);
    }
    if drift.is_empty() {
        printer.out(&format!(
            "no drift: `{}` compiles to the digests run {} began with",
            run.file, run.id
        ));
    } else {
        print_drift(printer, &drift);
    }
    for e in &tasks {
        printer.out(&format!("task `{}`: {}: {}", e.task, e.verdict, e.reason));
    }
    Ok(Exit::Ok)
}
