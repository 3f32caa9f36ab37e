//! `mvk followups [RUN] [--all] [--json]`: the repository's ledger in; the non-blocking notes
//! reviewers left on a run's attempts (or every run's) out, oldest first: follow-up work that
//! did not block a merge.

use clap::Args;
use serde::Serialize;

use super::printer::Printer;
use super::reading::{self, clock};
use super::{Cli, CliError, Exit};
use crate::ledger::FollowupRow;

/// The schema name of `mvk followups --json`.
pub(crate) const SCHEMA: &str = "mvk.followups.v1";

#[derive(Debug, Args)]
pub(crate) struct FollowupsArgs {
    /// The run (an id or a unique prefix of one; default: the latest run).
    #[arg(value_name = "RUN", conflicts_with = "all")]
    pub(crate) run: Option<String>,
    /// List the follow-ups of every run.
    #[arg(long)]
    pub(crate) all: bool,
    /// Print one JSON document (schema `mvk.followups.v1`).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Serialize)]
struct Followups {
    schema: &'static str,
    run: Option<String>,
    followups: Vec<FollowupRow>,
}

pub(crate) fn followups(
    cli: &Cli,
    printer: &Printer,
    args: &FollowupsArgs,
) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let run = if args.all {
        None
    } else {
        Some(reading::find_run(&ledger, args.run.as_deref())?.id)
    };
    let rows = ledger
        .reader
        .followups(run.as_deref())
        .map_err(|e| reading::internal(&e))?;
    if args.json {
        reading::print_json(
            printer,
            &Followups {
                schema: SCHEMA,
                run,
                followups: rows,
            },
        )?;
        return Ok(Exit::Ok);
    }
    if rows.is_empty() {
        printer.out("no follow-ups");
        return Ok(Exit::Ok);
    }
    let mut text = String::new();
    for f in &rows {
        let from = if args.all {
            format!("{} ", f.run)
        } else {
            String::new()
        };
        text.push_str(&format!(
            "{} {from}task `{}` attempt {} ({}): {}\n",
            clock(f.recorded_at),
            f.task,
            f.attempt,
            f.verdict,
            f.note
        ));
    }
    printer.out(text.trim_end());
    Ok(Exit::Ok)
}
