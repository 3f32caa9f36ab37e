//! `mvk runs [--json]`: the repository's ledger in; its runs out, newest first, one line each:
//! id, loop, state or outcome with exit code, start, duration, attempts, cost.

use std::collections::BTreeMap;

use clap::Args;
use serde::Serialize;

use super::printer::Printer;
use super::reading::{self, duration, plural, usd};
use super::{Cli, CliError, Exit};
use crate::ledger::read::{Liveness, ms_since_epoch, rfc3339};
use crate::report::{Spent, spent_by_attempt};

/// The schema name of `mvk runs --json`.
pub(crate) const SCHEMA: &str = "mvk.runs.v1";

#[derive(Debug, Args)]
pub(crate) struct RunsArgs {
    /// Print one JSON document (schema `mvk.runs.v1`).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Serialize)]
struct Runs {
    schema: &'static str,
    runs: Vec<RunLine>,
}

#[derive(Debug, Serialize)]
struct RunLine {
    id: String,
    program: String,
    file: String,
    state: String,
    liveness: Liveness,
    outcome: Option<String>,
    exit_code: Option<i32>,
    started: String,
    finished: Option<String>,
    duration_ms: i64,
    #[serde(flatten)]
    spent: Spent,
}

pub(crate) fn runs(cli: &Cli, printer: &Printer, args: &RunsArgs) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let internal = |e: crate::ledger::LedgerError| reading::internal(&e);
    let rows = ledger.reader.runs().map_err(internal)?;
    let costs = spent_by_attempt(&ledger.reader.costs(None).map_err(internal)?);
    let mut spent: BTreeMap<String, Spent> = BTreeMap::new();
    for a in ledger.reader.attempts(None).map_err(internal)? {
        spent
            .entry(a.run.clone())
            .or_default()
            .add_attempt(&a, &costs);
    }
    let now = ms_since_epoch(std::time::SystemTime::now());
    let lines: Vec<RunLine> = rows
        .into_iter()
        .map(|r| {
            let liveness = crate::ledger::read::liveness(&ledger.mvk_dir, &r);
            // A dead run's clock stopped with its last heartbeat, not now.
            let end = match (&liveness, r.finished_at) {
                (_, Some(f)) => f,
                (crate::ledger::read::Liveness::Running { .. }, None) => now,
                // The heartbeat file beats every 2 s, the ledger's far less often.
                (
                    crate::ledger::read::Liveness::Interrupted { heartbeat_ms, .. }
                    | crate::ledger::read::Liveness::Unknown { heartbeat_ms, .. },
                    None,
                ) => *heartbeat_ms,
                (_, None) => r.heartbeat_at,
            };
            (liveness, end, r)
        })
        .map(|(liveness, end, r)| RunLine {
            liveness,
            spent: spent.get(&r.id).copied().unwrap_or_default(),
            duration_ms: end.saturating_sub(r.started_at),
            started: rfc3339(r.started_at),
            finished: r.finished_at.map(rfc3339),
            id: r.id,
            program: r.program,
            file: r.file,
            state: r.state,
            outcome: r.outcome,
            exit_code: r.exit_code,
        })
        .collect();
    if args.json {
        reading::print_json(
            printer,
            &Runs {
                schema: SCHEMA,
                runs: lines,
            },
        )?;
        return Ok(Exit::Ok);
    }
    if lines.is_empty() {
        printer.out("no runs yet");
        return Ok(Exit::Ok);
    }
    let table: Vec<[String; 7]> = lines
        .iter()
        .map(|l| {
            [
                l.id.clone(),
                l.program.clone(),
                match (&l.outcome, l.exit_code) {
                    (Some(o), Some(c)) => format!("{o} (exit {c})"),
                    _ => l.liveness.name().to_string(),
                },
                l.started.clone(),
                duration(l.duration_ms),
                format!("{} attempt{}", l.spent.attempts, plural(l.spent.attempts)),
                usd(l.spent.usd_micros),
            ]
        })
        .collect();
    printer.out(&columns(&table));
    Ok(Exit::Ok)
}

/// Rows as left-aligned columns two spaces apart, without trailing spaces.
fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < N {
                let pad = widths[i] - cell.chars().count() + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
