//! A run's events in; out the phases of each attempt (agent, seal, gates, review, landing) with
//! their times, and the page's timeline drawn from them as plain HTML bars (a row per attempt,
//! grouped by task, each phase a coloured span placed in percent of the run's span).
//!
//! An event is written when something ends, so a phase runs from the event that starts it to
//! the next event that starts or ends one: `attempt.started` starts the agent,
//! `agent.finished` the seal check, `seal.passed` the gates, `review.started` the review,
//! `merge.started` the landing; the attempt's verdict and a landing's result end the phase
//! that is open. Time between phases (a passed attempt waiting for its landing turn) is left
//! blank.

use std::fmt::Write as _;

use super::{Rows, attempt_end, class, esc, task_names, verdict};
use crate::ledger::read::{AttemptRow, EventRow};
use crate::report::human_duration;

/// A part of an attempt's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PhaseKind {
    Agent,
    Seal,
    Gates,
    Review,
    Landing,
}

impl PhaseKind {
    const ALL: [PhaseKind; 5] = [
        PhaseKind::Agent,
        PhaseKind::Seal,
        PhaseKind::Gates,
        PhaseKind::Review,
        PhaseKind::Landing,
    ];

    fn name(self) -> &'static str {
        match self {
            PhaseKind::Agent => "agent",
            PhaseKind::Seal => "seal",
            PhaseKind::Gates => "gates",
            PhaseKind::Review => "review",
            PhaseKind::Landing => "landing",
        }
    }
}

/// One phase of one attempt, in milliseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Phase {
    pub(super) kind: PhaseKind,
    pub(super) start: i64,
    pub(super) end: i64,
}

/// What an event does to the phase that is open.
enum Step {
    Start(PhaseKind),
    /// Part of the open phase (a gate or a landing step finished): it lasts at least this long.
    Within,
    /// The open phase is over.
    End,
    /// Nothing to do with phases.
    Ignore,
}

fn step(e: &EventRow) -> Step {
    match e.event.as_str() {
        "attempt.started" => Step::Start(PhaseKind::Agent),
        "agent.finished" => Step::Start(PhaseKind::Seal),
        "seal.passed" => Step::Start(PhaseKind::Gates),
        "review.started" => Step::Start(PhaseKind::Review),
        "merge.started" => Step::Start(PhaseKind::Landing),
        "gate.finished" | "merge.lock-wait" | "merge.batch-split" => Step::Within,
        "seal.breached" | "review.finished" | "review.recalled" | "attempt.passed"
        | "attempt.failed" | "attempt.abandoned" => Step::End,
        name if name.starts_with("merge.") => Step::End,
        _ => Step::Ignore,
    }
}

/// The phases of attempt `a` from the run's `events`. Only the events since its last
/// `attempt.started` count: an attempt a resume made again under the same number starts over.
/// A phase still open at the end lasts until `open_end` (now, for a running attempt).
pub(super) fn phases(events: &[EventRow], a: &AttemptRow, open_end: i64) -> Vec<Phase> {
    let own: Vec<&EventRow> = events
        .iter()
        .filter(|e| e.task.as_deref() == Some(a.task.as_str()) && e.attempt == Some(a.number))
        .collect();
    let from = own
        .iter()
        .rposition(|e| e.event == "attempt.started")
        .unwrap_or(0);
    let mut out = Vec::new();
    let mut open: Option<Phase> = None;
    for e in &own[from..] {
        let t = e.time_ms;
        match step(e) {
            Step::Start(kind) => {
                if let Some(mut p) = open.take() {
                    p.end = p.end.max(t);
                    out.push(p);
                }
                open = Some(Phase {
                    kind,
                    start: t,
                    end: t,
                });
            }
            Step::Within => {
                if let Some(p) = open.as_mut() {
                    p.end = p.end.max(t);
                }
            }
            Step::End => {
                if let Some(mut p) = open.take() {
                    p.end = p.end.max(t);
                    out.push(p);
                }
            }
            Step::Ignore => {}
        }
    }
    if let Some(mut p) = open {
        p.end = p.end.max(open_end);
        out.push(p);
    }
    out
}

/// The timeline: a row per attempt, grouped by task, each phase a bar on the run's time axis.
pub(super) fn timeline(out: &mut String, rows: &Rows, end: i64) {
    let start = rows.run.started_at;
    let span = (end - start).max(1);
    // Positions in hundredths of a percent, so the bars need no floating point.
    let at = |t: i64| (t - start).clamp(0, span) * 10_000 / span;
    let pct = |hundredths: i64| format!("{}.{:02}%", hundredths / 100, hundredths % 100);
    out.push_str("<h2>Timeline</h2>\n<div class=\"timeline\" id=\"timeline\">\n");
    // The axis: five ticks, from the run's start to its end.
    out.push_str("<div class=\"axis\"><span class=\"label\"></span><span class=\"track\">");
    for quarter in 0..=4 {
        let _ = write!(
            out,
            "<span class=\"tick\" style=\"left: {left}\">{text}</span>",
            left = pct(quarter * 2500),
            text = human_duration(span * quarter / 4),
        );
    }
    out.push_str("</span></div>\n");
    for task in task_names(rows) {
        let attempts: Vec<&AttemptRow> = rows.attempts.iter().filter(|a| a.task == task).collect();
        if attempts.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "<div class=\"task-row\" data-task=\"{t}\">{t}</div>",
            t = esc(&task)
        );
        for a in attempts {
            let phases = rows.phases.get(&a.id).map_or(&[][..], Vec::as_slice);
            let first = phases
                .first()
                .map_or(a.started_at, |p| p.start.min(a.started_at));
            let last = phases
                .iter()
                .map(|p| p.end)
                .fold(attempt_end(rows, a), i64::max);
            let tip = format!(
                "{} attempt {} (rung {}, {}): {}, {}",
                a.task,
                a.number,
                a.rung,
                a.agent,
                verdict(a),
                human_duration(last - first)
            );
            let _ = write!(
                out,
                "<div class=\"row attempt {class}\" id=\"attempt-{task}-{n}\" data-task=\"{task}\" \
                 data-attempt=\"{n}\" data-outcome=\"{class}\" title=\"{tip}\">\
                 <span class=\"label\">#{n} · rung {rung} · {agent}</span><span class=\"track\">\
                 <span class=\"extent\" style=\"left: {left}; width: {width}\"></span>",
                class = class(a),
                task = esc(&a.task),
                n = a.number,
                tip = esc(&tip),
                rung = a.rung,
                agent = esc(&a.agent),
                left = pct(at(first)),
                width = pct(at(last) - at(first)),
            );
            for p in phases {
                let _ = write!(
                    out,
                    "<span class=\"phase {kind}\" data-phase=\"{kind}\" style=\"left: {left}; \
                     width: {width}\" title=\"{kind} {took}\"></span>",
                    kind = p.kind.name(),
                    left = pct(at(p.start)),
                    width = pct(at(p.end) - at(p.start)),
                    took = human_duration(p.end - p.start),
                );
            }
            for m in rows.merges.iter().filter(|m| m.attempt_id == a.id) {
                let _ = write!(
                    out,
                    "<span class=\"merge {state}\" style=\"left: {left}\" title=\"merge into \
                     {into} ({strategy}): {state}\">◆</span>",
                    state = esc(&m.state),
                    left = pct(at(m.finished_at.unwrap_or(m.started_at))),
                    into = esc(&m.into_branch),
                    strategy = esc(&m.strategy),
                );
            }
            let _ = writeln!(
                out,
                "</span><span class=\"took\">{}</span></div>",
                human_duration(last - first)
            );
        }
    }
    out.push_str("</div>\n<p class=\"legend\">");
    for kind in PhaseKind::ALL {
        let _ = write!(
            out,
            "<span class=\"key\"><span class=\"swatch phase {k}\"></span>{k}</span> ",
            k = kind.name()
        );
    }
    out.push_str(
        "<span class=\"key\">◆ merge</span> · outline: <span class=\"passed\">passed</span> \
         <span class=\"failed\">failed</span> <span class=\"breached\">seal breached</span> \
         <span class=\"unknown\">unknown</span> <span class=\"running\">running</span></p>\n",
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(id: i64, attempt: Option<u32>, time_ms: i64, name: &str) -> EventRow {
        EventRow {
            id,
            run: "r".into(),
            task: Some("t".into()),
            attempt,
            time_ms,
            event: name.into(),
            detail: json!({}),
        }
    }

    fn attempt(number: u32) -> AttemptRow {
        AttemptRow {
            id: 1,
            run: "r".into(),
            task: "t".into(),
            number,
            rung: 1,
            agent: "bot".into(),
            branch: "b".into(),
            base: "0".repeat(40),
            state: "finished".into(),
            started_at: 0,
            exit_code: Some(0),
            timed_out: Some(false),
            agent_ms: Some(1),
            head: None,
            rate_limited: 0,
            outcome: Some("passed".into()),
            failure_kind: None,
            signature: None,
            criterion: None,
            failed_gate: None,
            finished_at: Some(0),
            epoch: 0,
        }
    }

    fn phase(kind: PhaseKind, start: i64, end: i64) -> Phase {
        Phase { kind, start, end }
    }

    #[test]
    fn phases_run_from_the_event_that_starts_them_to_the_next() {
        let events = [
            event(1, None, 0, "task.started"),
            event(2, Some(1), 10, "attempt.started"),
            event(3, Some(1), 12, "prompt.built"),
            event(4, Some(1), 500, "agent.finished"),
            event(5, Some(1), 510, "seal.passed"),
            event(6, Some(1), 900, "gate.finished"),
            event(7, Some(1), 1500, "gate.finished"),
            event(8, Some(1), 1600, "review.started"),
            event(9, Some(1), 4000, "review.finished"),
            event(10, Some(1), 4001, "attempt.passed"),
            // Waiting for the landing turn is no phase.
            event(11, Some(1), 6000, "merge.started"),
            event(12, Some(1), 6100, "gate.finished"),
            event(13, Some(1), 6200, "merge.done"),
            event(14, None, 6300, "task.finished"),
        ];
        assert_eq!(
            phases(&events, &attempt(1), 9999),
            [
                phase(PhaseKind::Agent, 10, 500),
                phase(PhaseKind::Seal, 500, 510),
                phase(PhaseKind::Gates, 510, 1600),
                phase(PhaseKind::Review, 1600, 4000),
                phase(PhaseKind::Landing, 6000, 6200),
            ]
        );
    }

    #[test]
    fn a_breach_ends_at_the_seal_a_remade_attempt_starts_over_and_an_open_phase_runs_on() {
        let events = [
            event(1, Some(1), 10, "attempt.started"),
            event(2, Some(1), 20, "agent.finished"),
            event(3, Some(1), 25, "seal.breached"),
            event(4, Some(1), 26, "attempt.failed"),
            event(5, Some(2), 30, "attempt.started"),
            event(6, Some(2), 40, "attempt.abandoned"),
            event(7, Some(2), 50, "attempt.started"),
            event(8, Some(2), 70, "agent.finished"),
        ];
        assert_eq!(
            phases(&events, &attempt(1), 100),
            [
                phase(PhaseKind::Agent, 10, 20),
                phase(PhaseKind::Seal, 20, 25)
            ]
        );
        assert_eq!(
            phases(&events, &attempt(2), 100),
            [
                phase(PhaseKind::Agent, 50, 70),
                phase(PhaseKind::Seal, 70, 100)
            ]
        );
    }
}
