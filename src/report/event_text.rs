//! An event's name and detail in; one short line for a person out (`mvk apply`'s progress and
//! `mvk log`'s text), or `None` for events whose name says it all (and for a detail this mvk
//! cannot read as its event, as a later mvk may write).

use std::time::Duration;

use serde_json::Value;

use crate::run::event::Event;

/// The line for event `event` with `detail` (without who it is about).
pub(crate) fn describe(event: &str, detail: &Value) -> Option<String> {
    let wait = |ms: u64| crate::plan::format_duration(Duration::from_millis(ms));
    let text = match Event::from_parts(event, detail.clone()).ok()? {
        Event::RunStarted { program, file, .. } => format!("{program} ({file})"),
        Event::RunResumed { found, .. } => format!("resumed ({found})"),
        Event::TaskResumed {
            attempts, pending, ..
        } => format!(
            "resumed after {attempts} attempt(s){}",
            pending.map_or(String::new(), |p| format!(", carrying on: {p}"))
        ),
        Event::TaskReplanned { .. } => "re-planned (drift accepted)".to_string(),
        Event::AttemptAbandoned { reason } => format!("abandoned: {reason}"),
        Event::MergeSettled { landed, .. } => format!(
            "an interrupted merge was {}",
            if landed {
                "found landed"
            } else {
                "not landed; landing again"
            }
        ),
        Event::AttemptStarted { agent, branch, .. } => format!("{agent} on {branch}"),
        Event::RunInterrupted { by, .. } => format!("stopped by {by}; continue with mvk resume"),
        Event::LessonsLearned { author, ids } => format!(
            "{author} wrote {} lesson(s): {}",
            ids.len(),
            ids.iter()
                .map(|i| format!("#{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        Event::PromptBuilt {
            tokens,
            budget,
            parts,
            over,
        } => {
            let shares: Vec<String> = parts
                .iter()
                .map(|p| {
                    format!(
                        "{} {}{}",
                        p.part,
                        p.tokens,
                        if p.cut { " (cut)" } else { "" }
                    )
                })
                .collect();
            format!(
                "prompt {tokens}/{budget} tokens{}: {}",
                if over { " (over: its fixed part alone)" } else { "" },
                shares.join(", ")
            )
        }
        Event::AgentRateLimited {
            wait_ms, message, ..
        } => format!("rate-limited, waiting {} ({message})", wait(wait_ms)),
        Event::AgentFinished {
            timed_out,
            exit_code,
            ..
        } => format!(
            "agent {}",
            if timed_out {
                "timed out".to_string()
            } else {
                format!("exited {}", exit_code.map_or("null".into(), |c| c.to_string()))
            }
        ),
        Event::SealBreached { breaches } => {
            let paths: Vec<&str> = breaches.iter().map(|b| b.path.as_str()).collect();
            format!("seal breached: {}", paths.join(", "))
        }
        Event::GateFinished {
            gate,
            verdict,
            reason,
            ..
        } => format!("gate {gate} {verdict}: {reason}"),
        Event::AttemptFailed {
            kind, criterion, ..
        } => format!("failed ({kind}): {criterion}"),
        Event::RungClimbed { rung, .. } => format!("climbing to rung {rung}"),
        Event::BudgetExhausted { budget, .. } => format!("the {budget} budget ran out"),
        Event::MergeConflict { reason, .. } => format!("cannot land: {reason}"),
        Event::MergeFailed { gate, .. } => format!("after-merge gate {gate} failed"),
        Event::MergeBatchSplit { .. } => {
            "its gates did not pass on its commit: the changes before it land, those after it are gated again"
                .to_string()
        }
        Event::MergeDone { into, commit, .. } => {
            format!("landed on {into} as {}", commit.get(..10).unwrap_or(""))
        }
        Event::HumanHandoff { file, .. } => format!("waiting for a person: {file}"),
        Event::TaskSkipped { reason, .. } => reason,
        Event::TaskWaiting { reason, .. } => format!("waits for {reason}"),
        Event::TaskFinished { outcome, reason, .. } => format!("{outcome}: {reason}"),
        Event::TaskStuck { times, .. } => format!("the same failure {times} times"),
        Event::ReviewStarted { agent, .. } => format!("reviewed by {agent}"),
        Event::ReviewFinished {
            verdict,
            blockers,
            reason,
            ..
        } => match verdict.as_str() {
            "reject" => {
                let lines: Vec<String> = blockers.iter().map(crate::prompt::Blocker::line).collect();
                format!("review: reject; {}", lines.join("; "))
            }
            "unknown" => format!("review: unknown ({reason})"),
            v => format!("review: {v}"),
        },
        Event::CheckpointWaiting { kind, question, .. } => {
            format!("waiting for a person ({kind}): {question}")
        }
        Event::CheckpointAnswered { decision, .. } => format!("a person answered: {decision}"),
        Event::RunPaused { .. } => "paused: answer with `mvk approve` or `mvk reject`".to_string(),
        Event::RunStopped { error, .. } => format!(
            "stopped on mvk's own error, tasks unended: {error}; continue it with `mvk resume`"
        ),
        Event::WorktreeRetry {
            branch,
            error,
            wait_ms,
        } => format!(
            "no worktree for {branch} yet ({error}); trying again in {}",
            wait(wait_ms)
        ),
        Event::RunFinished {
            outcome, exit_code, ..
        } => format!("{outcome} (exit {exit_code})"),
        _ => return None,
    };
    Some(text)
}
