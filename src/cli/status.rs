//! `mvk status [RUN] [--json]`: a run of the repository's ledger in (the latest by default); where
//! it stands out: liveness, phase, outcome, per task the attempt, rung, agent, budget spent
//! against its limits, the last failure, what it waits for, and the run's diagnosis.

use std::fmt::Write as _;

use clap::Args;

use super::printer::Printer;
use super::reading::{self, plural, usd};
use super::{Cli, CliError, Exit};
use crate::ledger::read::{Liveness, rfc3339};
use crate::report::status::{Status, TaskStatus, Waiting, status as build};

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The run: its id or a unique prefix of it (default: the latest run).
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Print one JSON document (schema `mvk.status.v1`).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn status(cli: &Cli, printer: &Printer, args: &StatusArgs) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let run = reading::find_run(&ledger, args.run.as_deref())?;
    let s = build(&ledger.reader, &ledger.mvk_dir, &run).map_err(|e| reading::internal(&e))?;
    if args.json {
        reading::print_json(printer, &s)?;
    } else {
        printer.out(&text(&s));
    }
    Ok(Exit::Ok)
}

fn text(s: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "run {}: {} ({})", s.run, s.program, s.file);
    let state = match (&s.liveness, &s.outcome, s.exit_code) {
        (Liveness::Finished, Some(o), Some(c)) => format!("finished: {o} (exit {c})"),
        (Liveness::Running { heartbeat_ms }, ..) => {
            format!("running (last heartbeat {})", rfc3339(*heartbeat_ms))
        }
        (Liveness::Interrupted { reason, .. }, ..) => format!("interrupted: {reason}"),
        (Liveness::Unknown { reason, .. }, ..) => format!("unknown: {reason}"),
        (l, ..) => l.name().to_string(),
    };
    let _ = writeln!(out, "  state: {state}");
    let _ = writeln!(out, "  phase: {}", s.phase);
    let _ = writeln!(
        out,
        "  started: {}{}",
        s.started,
        s.finished
            .as_ref()
            .map_or(String::new(), |f| format!("; finished: {f}"))
    );
    let _ = writeln!(
        out,
        "  spent: {} attempt{}, {} tokens, {}",
        s.spent.attempts,
        plural(s.spent.attempts),
        s.spent.tokens,
        usd(s.spent.usd_micros)
    );
    if let Some(d) = &s.diagnosis {
        let task = d
            .task
            .as_ref()
            .map_or(String::new(), |t| format!(" (task {t})"));
        let _ = writeln!(out, "  diagnosis: {}{task}: {}", d.pattern.name(), d.reason);
    }
    if let Some(w) = &s.waiting_for {
        let _ = writeln!(out, "  waiting for: {}", waiting(w));
    }
    for t in &s.tasks {
        task_text(&mut out, t);
    }
    out
}

fn task_text(out: &mut String, t: &TaskStatus) {
    let state = match &t.outcome {
        Some(o) => o.clone(),
        None => t.state.clone(),
    };
    let attempt = match (t.attempt, t.rung, &t.agent) {
        (Some(a), Some(r), Some(agent)) => format!(": attempt {a}, rung {r} ({agent})"),
        _ => String::new(),
    };
    let _ = writeln!(out, "task {}: {state}{attempt}", t.name);
    let of = |v: String, limit: Option<String>| match limit {
        Some(l) => format!("{v}/{l}"),
        None => v,
    };
    let _ = writeln!(
        out,
        "  spent: {} attempts · {} tokens · {}",
        of(
            t.spent.attempts.to_string(),
            t.limits.iterations.map(|i| i.to_string())
        ),
        of(
            t.spent.tokens.to_string(),
            t.limits.tokens.map(|v| v.to_string())
        ),
        of(usd(t.spent.usd_micros), t.limits.usd_micros.map(usd)),
    );
    if let Some(f) = &t.last_failure {
        let by = match (&f.kind, &f.gate) {
            (Some(k), Some(g)) if k == "gate" => format!("gate {g}"),
            (Some(k), _) => k.clone(),
            _ => "failure".into(),
        };
        let _ = writeln!(
            out,
            "  last failure: attempt {} ({by}): {}",
            f.attempt,
            f.criterion.as_deref().unwrap_or("")
        );
    }
    match &t.pull_request {
        Some(pr) => {
            let _ = match (&pr.url, &pr.detail) {
                (Some(url), _) => writeln!(out, "  pull request: {url} (branch {})", pr.branch),
                (None, Some(why)) => {
                    writeln!(
                        out,
                        "  pull request: not opened, {why} (branch {})",
                        pr.branch
                    )
                }
                (None, None) => writeln!(out, "  pull request: pushed as {}", pr.branch),
            };
        }
        None => {
            if let Some(m) = &t.merged {
                let _ = writeln!(out, "  merged: {m}");
            }
        }
    }
    if let Some(w) = &t.waiting_for {
        let _ = writeln!(out, "  waiting for: {}", waiting(w));
    }
    if let Some(since) = &t.since {
        let _ = writeln!(out, "  since: {since}");
    }
}

fn waiting(w: &Waiting) -> String {
    match w {
        Waiting::Human { handoff } => format!("a person: read {}", handoff.display()),
        Waiting::Tasks { after } => {
            format!("task{} {}", plural(after.len() as u64), after.join(", "))
        }
        Waiting::Start { reason, .. } => reason.clone(),
        Waiting::Resume { command } => format!("`{command}` (its process is gone)"),
        Waiting::AnotherAttempt { command } => {
            format!("`{command}` (the attempt's process died; an attempt is not resumed)")
        }
        Waiting::Decision {
            checkpoint,
            task,
            attempt,
            question,
            since,
            approve,
            reject,
            ..
        } => format!(
            "a person's decision ({checkpoint} checkpoint, task `{task}` attempt {attempt}) since {since}: {question}; `{approve}` or `{reject}`"
        ),
    }
}
