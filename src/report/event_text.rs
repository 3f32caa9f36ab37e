//! An event's name and detail in; one short line for a person out (`mvk apply`'s progress and
//! `mvk log`'s text), or `None` for events whose name says it all.

use std::time::Duration;

use serde_json::Value;

/// The line for event `event` with `detail` (without who it is about).
pub(crate) fn describe(event: &str, d: &Value) -> Option<String> {
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let text = match event {
        "run.started" => format!("{} ({})", s("program"), s("file")),
        "run.resumed" => format!("resumed ({})", s("found")),
        "task.resumed" => format!(
            "resumed after {} attempt(s){}",
            d.get("attempts").and_then(Value::as_u64).unwrap_or(0),
            d.get("pending")
                .and_then(Value::as_str)
                .map_or(String::new(), |p| format!(", carrying on: {p}"))
        ),
        "task.replanned" => "re-planned (drift accepted)".to_string(),
        "attempt.abandoned" => format!("abandoned: {}", s("reason")),
        "merge.settled" => format!(
            "an interrupted merge was {}",
            if d.get("landed").and_then(Value::as_bool).unwrap_or(false) {
                "found landed"
            } else {
                "not landed; landing again"
            }
        ),
        "attempt.started" => format!("{} on {}", s("agent"), s("branch")),
        "agent.rate-limited" => format!(
            "rate-limited, waiting {} ({})",
            crate::plan::format_duration(Duration::from_millis(
                d.get("wait_ms").and_then(Value::as_u64).unwrap_or(0)
            )),
            s("message")
        ),
        "agent.finished" => format!(
            "agent {}",
            if d.get("timed_out").and_then(Value::as_bool).unwrap_or(false) {
                "timed out".to_string()
            } else {
                format!(
                    "exited {}",
                    d.get("exit_code").map_or("?".into(), Value::to_string)
                )
            }
        ),
        "seal.breached" => format!(
            "seal breached: {}",
            d.get("breaches")
                .and_then(Value::as_array)
                .map(|b| b
                    .iter()
                    .filter_map(|x| x.get("path").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        ),
        "gate.finished" => format!("gate {} {}: {}", s("gate"), s("verdict"), s("reason")),
        "attempt.failed" => format!("failed ({}): {}", s("kind"), s("criterion")),
        "rung.climbed" => format!("climbing to rung {}", s("rung")),
        "budget.exhausted" => format!("the {} budget ran out", s("budget")),
        "merge.conflict" => format!("cannot land: {}", s("reason")),
        "merge.failed" => format!("after-merge gate {} failed", s("gate")),
        "merge.batch-split" => {
            "its gates did not pass on its commit: the changes before it land, those after it are gated again"
                .to_string()
        }
        "merge.done" => format!(
            "landed on {} as {}",
            s("into"),
            s("commit").get(..10).unwrap_or("")
        ),
        "human.handoff" => format!("waiting for a person: {}", s("file")),
        "task.skipped" => s("reason"),
        "task.waiting" => format!("waits for {}", s("reason")),
        "task.finished" => format!("{}: {}", s("outcome"), s("reason")),
        "task.stuck" => format!(
            "the same failure {} times",
            d.get("times").map_or("?".into(), Value::to_string)
        ),
        "review.started" => format!("reviewed by {}", s("agent")),
        "review.finished" => {
            let blockers: Vec<String> = d
                .get("blockers")
                .and_then(Value::as_array)
                .map(|bs| {
                    bs.iter()
                        .map(|b| {
                            let f = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
                            format!("({}) {}: {}", f("category"), f("location"), f("evidence"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            match s("verdict").as_str() {
                "reject" => format!("review: reject; {}", blockers.join("; ")),
                "unknown" => format!("review: unknown ({})", s("reason")),
                v => format!("review: {v}"),
            }
        }
        "checkpoint.waiting" => format!("waiting for a person ({}): {}", s("kind"), s("question")),
        "checkpoint.answered" => format!("a person answered: {}", s("decision")),
        "run.paused" => "paused: answer with `mvk approve` or `mvk reject`".to_string(),
        "run.stopped" => format!(
            "stopped on mvk's own error, tasks unended: {}; continue it with `mvk resume`",
            s("error")
        ),
        "worktree.retry" => format!(
            "no worktree for {} yet ({}); trying again in {}",
            s("branch"),
            s("error"),
            crate::plan::format_duration(Duration::from_millis(
                d.get("wait_ms").and_then(Value::as_u64).unwrap_or(0)
            ))
        ),
        "run.finished" => format!(
            "{} (exit {})",
            s("outcome"),
            d.get("exit_code").map_or("?".into(), Value::to_string)
        ),
        _ => return None,
    };
    Some(text)
}
