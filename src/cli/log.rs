//! `mvk log [RUN] [--follow] [--json]`: a run of the repository's ledger in (the latest by
//! default); its events out, in order: `HH:MM:SS task#attempt event summary` lines, or one JSON
//! document (schema `mvk.log.v1`); with `--follow`, new events as they are written (one JSON
//! object a line with `--json`) until the run ends.
//!
//! `--follow` polls the ledger every [`POLL`] and stops by itself: with 0 once the run has
//! finished (after its `run.finished` event) or paused, and with 2 when the run is found dead
//! (its process gone, or another host's heartbeat stopped), after saying why and how to resume.

use std::time::Duration;

use clap::Args;
use serde::Serialize;

use super::printer::Printer;
use super::reading::{self, clock};
use super::{Cli, CliError, Exit};
use crate::ledger::read::{EventRow, Liveness, liveness};
use crate::report::event_text::describe;

/// The schema name of `mvk log --json`.
pub(crate) const SCHEMA: &str = "mvk.log.v1";
/// How long `--follow` sleeps between two reads of the ledger.
pub(crate) const POLL: Duration = Duration::from_millis(200);
/// Polls `--follow` waits, after the ledger says finished, for the `run.finished` event.
const SETTLE_POLLS: u32 = 10;

#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// The run: its id or a unique prefix of it (default: the latest run).
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Keep printing new events until the run ends.
    #[arg(long, short)]
    pub(crate) follow: bool,
    /// One JSON document (schema `mvk.log.v1`); with `--follow`, one JSON object a line.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Serialize)]
struct Log<'a> {
    schema: &'static str,
    run: &'a str,
    events: &'a [EventRow],
}

pub(crate) fn log(cli: &Cli, printer: &Printer, args: &LogArgs) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let run = reading::find_run(&ledger, args.run.as_deref())?;
    let internal = |e: crate::ledger::LedgerError| reading::internal(&e);
    if !args.follow {
        let events = ledger.reader.events(&run.id, 0).map_err(internal)?;
        if args.json {
            reading::print_json(
                printer,
                &Log {
                    schema: SCHEMA,
                    run: &run.id,
                    events: &events,
                },
            )?;
        } else {
            let text: String = events.iter().map(|e| line(e) + "\n").collect();
            printer.out(&text);
        }
        return Ok(Exit::Ok);
    }

    let mut last = 0;
    let mut settling = 0;
    loop {
        // Liveness before the events: whatever a dead run wrote is then read below.
        let current = ledger
            .reader
            .run(&run.id)
            .map_err(internal)?
            .unwrap_or_else(|| run.clone());
        let live = liveness(&ledger.mvk_dir, &current);
        for e in ledger.reader.events(&run.id, last).map_err(internal)? {
            last = e.id;
            if args.json {
                let text = serde_json::to_string(&e).map_err(|e| reading::internal(&e))?;
                printer.out(&text);
            } else {
                printer.out(&line(&e));
            }
            // A run an earlier mvk closed on its error and a resume reopened has a
            // `run.finished` it went on past: it ends the following only while the ledger
            // says the run is over.
            if e.event == "run.finished" && current.state != "running" {
                return Ok(Exit::Ok);
            }
        }
        match &live {
            Liveness::Running { .. } => {}
            Liveness::Finished | Liveness::Paused => {
                settling += 1;
                if settling > SETTLE_POLLS {
                    return Ok(Exit::Ok);
                }
            }
            Liveness::Interrupted { reason, hint, .. } => {
                printer.error(&format!("run `{}` was interrupted: {reason}", run.id));
                printer.hint(hint);
                return Ok(Exit::Stuck);
            }
            Liveness::Unknown { reason, .. } => {
                printer.error(&format!("cannot follow run `{}`: {reason}", run.id));
                return Ok(Exit::Stuck);
            }
        }
        std::thread::sleep(POLL);
    }
}

/// `HH:MM:SS task#attempt event summary`.
pub(crate) fn line(e: &EventRow) -> String {
    let who = match (&e.task, e.attempt) {
        (Some(t), Some(a)) => format!("{t}#{a}"),
        (Some(t), None) => t.clone(),
        _ => "run".into(),
    };
    let mut text = format!("{} {who} {}", clock(e.time_ms), e.event);
    if let Some(summary) = describe(&e.event, &e.detail).filter(|s| !s.is_empty()) {
        text.push(' ');
        text.push_str(&summary);
    }
    text
}
