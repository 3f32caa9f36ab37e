//! `mvk stats [--json]`: every run of the repository's ledger in; the acceptance rate, the cost,
//! tokens, attempts and wall time per accepted change, attempts by loop, agent and rung with
//! what stopped them, and the diagnosis of the runs that went wrong out.

use std::fmt::Write as _;

use clap::Args;

use super::printer::Printer;
use super::reading::{self, duration, usd};
use super::{Cli, CliError, Exit};
use crate::report::stats::{AttemptStats, Stats, stats as build};

#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Print one JSON document (schema `mvk.stats.v1`).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn stats(cli: &Cli, printer: &Printer, args: &StatsArgs) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let s = build(&ledger.reader, &ledger.mvk_dir).map_err(|e| reading::internal(&e))?;
    if args.json {
        reading::print_json(printer, &s)?;
    } else {
        printer.out(&text(&s));
    }
    Ok(Exit::Ok)
}

fn percent(rate: Option<f64>) -> String {
    rate.map_or("-".into(), |r| format!("{:.0}%", r * 100.0))
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "rounded means of non-negative sums"
)]
fn round(v: f64) -> u64 {
    v.round() as u64
}

fn text(s: &Stats) -> String {
    let mut out = String::new();
    let o = &s.overall;
    let _ = writeln!(
        out,
        "{} run{}, {} finished task{}, {} accepted: acceptance rate {}",
        o.runs,
        reading::plural(o.runs),
        o.tasks,
        reading::plural(o.tasks),
        o.accepted,
        percent(o.acceptance_rate)
    );
    let _ = writeln!(
        out,
        "spent: {}, {} tokens, {} attempts, {} of task time",
        usd(o.spent.usd_micros),
        o.spent.tokens,
        o.spent.attempts,
        duration(i64::try_from(o.spent.wall_ms).unwrap_or(i64::MAX))
    );
    match &o.per_accepted_change {
        Some(m) => {
            let _ = writeln!(
                out,
                "per accepted change: {}, {} tokens, {:.1} attempts, {}",
                usd(round(m.usd_micros)),
                round(m.tokens),
                m.attempts,
                duration(i64::try_from(round(m.wall_ms)).unwrap_or(i64::MAX))
            );
        }
        None => {
            let _ = writeln!(out, "per accepted change: - (nothing accepted yet)");
        }
    }
    if !s.by_loop.is_empty() {
        let _ = writeln!(out, "\nby loop:");
        for l in &s.by_loop {
            let per = l
                .summary
                .per_accepted_change
                .map_or("-".into(), |m| usd(round(m.usd_micros)));
            let _ = writeln!(
                out,
                "  {}: {} run{}, {}/{} accepted ({}), {} per accepted change",
                l.program,
                l.summary.runs,
                reading::plural(l.summary.runs),
                l.summary.accepted,
                l.summary.tasks,
                percent(l.summary.acceptance_rate),
                per
            );
        }
    }
    group(&mut out, "by agent", &s.by_agent, |g| {
        g.agent.clone().unwrap_or_default()
    });
    group(&mut out, "by rung", &s.by_rung, |g| {
        g.rung.map_or(String::new(), |r| format!("rung {r}"))
    });
    if !s.diagnoses.is_empty() {
        let _ = writeln!(out, "\nruns that went wrong:");
        for d in &s.diagnoses {
            let _ = writeln!(
                out,
                "  {} ({}, {}): {}: {}",
                d.run,
                d.program,
                d.outcome,
                d.diagnosis.pattern.name(),
                d.diagnosis.reason
            );
        }
    }
    out
}

fn group(
    out: &mut String,
    title: &str,
    groups: &[AttemptStats],
    name: impl Fn(&AttemptStats) -> String,
) {
    if groups.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}:");
    for g in groups {
        let stopped: Vec<String> = g
            .stopped_by
            .iter()
            .map(|(cause, s)| format!("{cause} {}", percent(Some(s.share))))
            .collect();
        let _ = writeln!(
            out,
            "  {}: {} attempt{}, {} passed, {}{}",
            name(g),
            g.attempts,
            reading::plural(g.attempts),
            g.passed,
            usd(g.usd_micros),
            if stopped.is_empty() {
                String::new()
            } else {
                format!("; stopped by {}", stopped.join(", "))
            }
        );
    }
}
