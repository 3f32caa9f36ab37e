//! An event's name and detail in; one short line for a person out (`mvk apply`'s progress and
//! `mvk log`'s text), or `None` for events whose name says it all (and for a detail this mvk
//! cannot read as its event, as a later mvk may write).

use std::time::Duration;

use serde_json::Value;

use crate::run::event::Event;

/// The first 12 characters of a commit id.
fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

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
        Event::PrPushed {
            remote,
            branch,
            commit,
        } => format!("pushed {} to {remote} as {branch}", short_id(&commit)),
        Event::PrOpened { url, found, .. } => {
            format!("pull request {url}{}", if found { " (found open)" } else { "" })
        }
        Event::PrRefused { step, detail, .. } => format!("{step} refused: {detail}"),
        Event::PrWaiting { urls } => format!("waiting for {} to merge", urls.join(", ")),
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
            duration_ms,
            tokens,
            usd,
            ..
        } => {
            let mut text = format!(
                "agent {}",
                if timed_out {
                    "timed out".to_string()
                } else {
                    format!("exited {}", exit_code.map_or("null".into(), |c| c.to_string()))
                }
            );
            // A line an older mvk wrote may lack the duration: then it says none.
            if duration_ms > 0 {
                text.push_str(&format!(" after {}", rounded(duration_ms)));
            }
            let usd = usd.filter(|u| *u > 0.0);
            if tokens > 0 || usd.is_some() {
                let mut spent = vec![format!("{tokens} tokens")];
                spent.extend(usd.map(|u| crate::plan::format_usd((u * 1e6).round() as u64)));
                text.push_str(&format!(" ({})", spent.join(", ")));
            }
            text
        }
        Event::SealBreached { breaches } => {
            let paths: Vec<&str> = breaches.iter().map(|b| b.path.as_str()).collect();
            format!("seal breached: {}", paths.join(", "))
        }
        Event::GateFinished {
            gate,
            phase,
            verdict,
            reason,
            ..
        } => {
            // The same gate runs again on the merged commit before it lands.
            let on = if phase == "landing" {
                " on what lands"
            } else {
                ""
            };
            format!("gate {gate} {verdict}{on}: {reason}")
        }
        Event::AttemptFailed {
            kind, criterion, ..
        } => format!("failed ({kind}): {criterion}"),
        Event::RungClimbed { rung, .. } => format!("climbing to rung {rung}"),
        Event::BudgetExhausted { budget, .. } => format!("the {budget} budget ran out"),
        Event::BudgetThreshold {
            budget,
            at,
            warning,
            ..
        } => {
            let warning = if warning { "warning: " } else { "" };
            format!("{warning}{}% of the {budget} budget spent", at / 10)
        }
        Event::NotifySent {
            notification,
            event,
            ..
        } => format!("notified `{notification}` ({event})"),
        Event::NotifyFailed {
            notification,
            event,
            error,
            ..
        } => format!("notification `{notification}` ({event}) failed: {error}"),
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

/// A step's duration as a person reads it: milliseconds under a second, whole seconds above.
fn rounded(ms: u64) -> String {
    let d = if ms < 1_000 {
        Duration::from_millis(ms)
    } else {
        Duration::from_secs(ms / 1_000)
    };
    crate::plan::format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agents_end_says_how_long_it_ran_and_what_it_spent() {
        let line = |detail: Value| describe("agent.finished", &detail).expect("described");
        let d = serde_json::json!({"exit_code": 0, "duration_ms": 3_007, "tokens": 0});
        assert_eq!(line(d), "agent exited 0 after 3s");
        let d = serde_json::json!({"timed_out": true, "duration_ms": 90_500, "tokens": 1200, "usd": 0.013});
        assert_eq!(line(d), "agent timed out after 1m30s (1200 tokens, $0.02)");
        let d = serde_json::json!({"exit_code": 1, "duration_ms": 250, "usd": 0.0});
        assert_eq!(line(d), "agent exited 1 after 250ms");
        // An older mvk's line, without the duration.
        assert_eq!(line(serde_json::json!({"exit_code": 0})), "agent exited 0");
    }

    #[test]
    fn a_gate_run_again_on_what_lands_says_so() {
        let gate = |phase: &str| {
            let d = serde_json::json!({"gate": "tests", "phase": phase, "verdict": "pass", "reason": "exit code 0"});
            describe("gate.finished", &d).expect("described")
        };
        assert_eq!(gate("gate"), "gate tests pass: exit code 0");
        assert_eq!(
            gate("landing"),
            "gate tests pass on what lands: exit code 0"
        );
    }
}
