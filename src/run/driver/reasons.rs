//! The words a task's end and its events use, in: a failure, a rung, a budget; out: the reason
//! a report, a handoff or a checkpoint's question gives.

use std::time::Duration;

use git2::Oid;

use crate::ir::Rung;
use crate::run::failure::{Failure, FailureKind};
use crate::run::judge::evidence::GateVerdict;

pub(super) fn verdict_name(v: GateVerdict) -> &'static str {
    match v {
        GateVerdict::Pass => "pass",
        GateVerdict::Fail => "fail",
        GateVerdict::Unknown => "unknown",
    }
}

pub(super) fn rung_label(r: &Rung) -> String {
    match r {
        Rung::Agent { agent, .. } => agent.label(),
        Rung::Human => "human".into(),
    }
}

/// Why attempt `number`'s rejection, the `rejections`-th, went past the review's `rounds`.
pub(super) fn rounds_used(number: u32, rounds: u32, rejections: u32, failure: &Failure) -> String {
    let blockers: Vec<String> = failure
        .blockers
        .iter()
        .map(crate::prompt::Blocker::line)
        .collect();
    format!(
        "the reviewer rejected attempt {number} after {rounds} round{} of rework ({rejections} rejection{} in all): {}",
        if rounds == 1 { "" } else { "s" },
        if rejections == 1 { "" } else { "s" },
        blockers.join("; ")
    )
}

pub(super) fn last_reason(f: Option<&Failure>) -> String {
    f.map_or(String::new(), |f| {
        format!("; last failure: {}", f.criterion)
    })
}

pub(crate) fn budget_text(which: &str, spent: u64, limit: u64) -> String {
    if which.ends_with("usd") {
        format!(
            "{} of {}",
            crate::plan::format_usd(spent),
            crate::plan::format_usd(limit)
        )
    } else if which.ends_with("wall") {
        format!(
            "{} of {}",
            crate::plan::format_duration(Duration::from_millis(spent)),
            crate::plan::format_duration(Duration::from_millis(limit))
        )
    } else {
        format!("{spent} of {limit}")
    }
}

/// The failure an attempt stopped by a budget is recorded with.
pub(super) fn stopped_failure(number: u32, trip: &crate::run::meter::Trip) -> Failure {
    let name = trip.budget.name();
    Failure::new(
        number,
        FailureKind::Agent,
        format!(
            "the agent's spending stays within the {name} budget (mvk stopped it at {}); its change is kept on its branch, not judged",
            budget_text(name, trip.spent, trip.limit)
        ),
        &["budget", name],
    )
}

pub(super) fn short(id: Oid) -> String {
    id.to_string()[..10].to_string()
}
