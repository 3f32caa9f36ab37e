//! A run's ledger rows in; where the run stands out ([`Status`], schema `mvk.status.v1`): its
//! liveness and phase, per task the state, current attempt, rung and agent, budget spent against
//! the limits, the last failure, what it waits for and since when, and the run's diagnosis.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::diagnosis::{Diagnosis, diagnose};
use super::{Spent, spent_by_attempt};
use crate::ledger::LedgerError;
use crate::ledger::read::{
    AttemptRow, EventRow, Liveness, Reader, RunRow, TaskRow, liveness, rfc3339,
};
use crate::run::event::Event;

/// The schema name of [`Status`].
pub(crate) const SCHEMA: &str = "mvk.status.v1";

/// Where a run stands.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Status {
    pub(crate) schema: &'static str,
    pub(crate) run: String,
    pub(crate) file: String,
    pub(crate) program: String,
    pub(crate) kind: String,
    /// The ledger's `running`, `paused` or `finished`.
    pub(crate) state: String,
    pub(crate) liveness: Liveness,
    /// starting, agent, seal, gates, merging, waiting-human, finished, stopped (mvk's own error
    /// with tasks unended): from the last event.
    pub(crate) phase: String,
    pub(crate) outcome: Option<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) started: String,
    pub(crate) finished: Option<String>,
    pub(crate) spent: Spent,
    pub(crate) tasks: Vec<TaskStatus>,
    /// What the run as a whole waits for (a dead process waits for `mvk resume`).
    pub(crate) waiting_for: Option<Waiting>,
    pub(crate) diagnosis: Option<Diagnosis>,
}

/// Where one task stands.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskStatus {
    pub(crate) name: String,
    /// pending, running or finished.
    pub(crate) state: String,
    pub(crate) outcome: Option<String>,
    /// The latest attempt's number, rung and agent.
    pub(crate) attempt: Option<u32>,
    pub(crate) rung: Option<u32>,
    pub(crate) agent: Option<String>,
    pub(crate) spent: Spent,
    pub(crate) limits: Limits,
    pub(crate) last_failure: Option<LastFailure>,
    pub(crate) merged: Option<String>,
    /// The pull request its change went out as (`merge strategy="pr"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pull_request: Option<PullRequestStatus>,
    pub(crate) waiting_for: Option<Waiting>,
    /// The time of the task's last event.
    pub(crate) since: Option<String>,
}

/// Where a task's pull request stands, from its events.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PullRequestStatus {
    pub(crate) branch: String,
    /// `pushed`, `opened` or `refused`.
    pub(crate) state: String,
    pub(crate) url: Option<String>,
    pub(crate) base: Option<String>,
    /// Why the last step was refused.
    pub(crate) detail: Option<String>,
}

/// The pull request the `pr.*` events of one task describe, if any.
fn pull_request_of(events: &[&EventRow]) -> Option<PullRequestStatus> {
    let mut pr: Option<PullRequestStatus> = None;
    for e in events {
        let status = match Event::read(&e.event, &e.detail) {
            Some(Event::PrPushed { branch, .. }) => PullRequestStatus {
                branch,
                state: "pushed".into(),
                url: None,
                base: None,
                detail: None,
            },
            Some(Event::PrOpened {
                url, branch, base, ..
            }) => PullRequestStatus {
                branch,
                state: "opened".into(),
                url: Some(url),
                base: Some(base),
                detail: None,
            },
            Some(Event::PrRefused {
                step,
                branch,
                detail,
            }) => PullRequestStatus {
                branch,
                state: "refused".into(),
                url: None,
                base: None,
                detail: Some(format!("{step}: {detail}")),
            },
            _ => continue,
        };
        pr = Some(status);
    }
    pr
}

/// A task's budget, from the run's stored program.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Limits {
    pub(crate) iterations: Option<u64>,
    pub(crate) tokens: Option<u64>,
    pub(crate) usd_micros: Option<u64>,
    pub(crate) wall_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct LastFailure {
    pub(crate) attempt: u32,
    pub(crate) kind: Option<String>,
    pub(crate) gate: Option<String>,
    pub(crate) criterion: Option<String>,
}

/// What a task or run waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum Waiting {
    /// A person: read the handoff file.
    Human { handoff: PathBuf },
    /// Tasks that have not finished yet.
    Tasks { after: Vec<String> },
    /// The flow's scheduler holds the task back: `on` is `after`, `person`, `scope` or
    /// `parallel`, and `reason` says it for a person (the task's last `task.waiting` event).
    Start { on: String, reason: String },
    /// The process died: `mvk resume RUN`.
    Resume { command: String },
    /// The process of an `mvk attempt` died: such a run is never resumed (it would go on as a
    /// landing run), so `mvk attempt FILE` again, which also closes this one as interrupted.
    AnotherAttempt { command: String },
    /// A person's decision at a checkpoint (the run is paused): `mvk approve` or `mvk reject`.
    Decision {
        /// The checkpoint's id in the ledger.
        id: i64,
        /// `review`, `step`, `batch`, `human` or `landing`.
        checkpoint: String,
        task: String,
        attempt: u32,
        question: String,
        /// When the run stopped there (RFC 3339).
        since: String,
        approve: String,
        reject: String,
    },
}

/// Builds the status of `run` from the ledger in `mvk_dir`.
pub(crate) fn status(reader: &Reader, mvk_dir: &Path, run: &RunRow) -> Result<Status, LedgerError> {
    let live = liveness(mvk_dir, run);
    let tasks = reader.tasks(Some(&run.id))?;
    let attempts = reader.attempts(Some(&run.id))?;
    let costs = spent_by_attempt(&reader.costs(Some(&run.id))?);
    let events = reader.events(&run.id, 0)?;
    let ir = reader.program_ir(&run.program_digest)?;
    let decisions: Vec<Waiting> = reader
        .checkpoints(&run.id)?
        .into_iter()
        .filter(|c| c.decision.is_none())
        .map(|c| Waiting::Decision {
            id: c.id,
            checkpoint: c.kind,
            attempt: c.attempt,
            question: c.question,
            since: rfc3339(c.since),
            approve: format!("mvk approve {} {}", run.id, c.task),
            reject: format!("mvk reject {} {} --reason TEXT", run.id, c.task),
            task: c.task,
        })
        .collect();
    let waiting_for = if matches!(live, Liveness::Interrupted { .. }) {
        // An interrupted attempt is not resumed (it would go on as a landing run): another
        // attempt is the way on.
        Some(if run.command == "attempt" {
            Waiting::AnotherAttempt {
                command: format!("mvk attempt {}", run.file),
            }
        } else {
            Waiting::Resume {
                command: format!("mvk resume {}", run.id),
            }
        })
    } else {
        decisions.first().cloned()
    };

    let mut names: Vec<String> = events
        .iter()
        .find(|e| e.event == "run.started")
        .and_then(|e| match Event::read(&e.event, &e.detail) {
            Some(Event::RunStarted { tasks, .. }) => Some(tasks),
            _ => None,
        })
        .unwrap_or_default();
    for t in &tasks {
        if !names.contains(&t.name) {
            names.push(t.name.clone());
        }
    }
    let task_statuses = names
        .iter()
        .map(|name| {
            let row = tasks.iter().find(|t| &t.name == name);
            // Budgets count the task's current epoch only (a re-plan after accepted drift starts
            // them again).
            let epoch = row.map_or(0, |t| t.epoch);
            let own: Vec<&AttemptRow> = attempts
                .iter()
                .filter(|a| &a.task == name && a.epoch == epoch)
                .collect();
            task_status(
                name,
                row,
                &own,
                &costs,
                &events,
                &tasks,
                ir.as_ref(),
                decisions
                    .iter()
                    .find(|d| matches!(d, Waiting::Decision { task, .. } if task == name))
                    .or(waiting_for.as_ref()),
            )
        })
        .collect();
    let mut spent = Spent::default();
    for a in &attempts {
        spent.add_attempt(a, &costs);
    }
    let mut diagnosis = diagnose(run, &live, &tasks, &attempts);
    // A run that stopped on mvk's own error says so (its tasks wait for `mvk resume`), not a
    // silent death.
    if let Some(last) = events.last()
        && let Some(Event::RunStopped { error, .. }) = Event::read(&last.event, &last.detail)
        && matches!(live, Liveness::Interrupted { .. })
    {
        diagnosis = Some(crate::report::diagnosis::Diagnosis {
            pattern: crate::report::diagnosis::Pattern::Error,
            task: None,
            reason: format!("mvk stopped on its own error: {error}"),
        });
    }
    Ok(Status {
        schema: SCHEMA,
        run: run.id.clone(),
        file: run.file.clone(),
        program: run.program.clone(),
        kind: run.kind.clone(),
        state: run.state.clone(),
        phase: phase(&events),
        liveness: live,
        outcome: run.outcome.clone(),
        exit_code: run.exit_code,
        started: rfc3339(run.started_at),
        finished: run.finished_at.map(rfc3339),
        spent,
        tasks: task_statuses,
        waiting_for,
        diagnosis,
    })
}

#[allow(clippy::too_many_arguments)]
fn task_status(
    name: &str,
    row: Option<&TaskRow>,
    attempts: &[&AttemptRow],
    costs: &std::collections::BTreeMap<i64, Spent>,
    events: &[EventRow],
    tasks: &[TaskRow],
    ir: Option<&Value>,
    run_waiting: Option<&Waiting>,
) -> TaskStatus {
    let last = attempts.last();
    let mut spent = Spent::default();
    for a in attempts {
        spent.add_attempt(a, costs);
    }
    let ir_task = ir
        .and_then(|ir| ir.get("tasks")?.as_array())
        .and_then(|ts| {
            ts.iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(name))
        });
    let budget = ir_task.and_then(|t| t.get("budget"));
    let limit = |key: &str| budget.and_then(|b| b.get(key)).and_then(Value::as_u64);
    let limits = Limits {
        iterations: limit("iterations"),
        tokens: limit("tokens"),
        usd_micros: limit("usd_micros"),
        wall_ms: limit("wall"),
    };
    let last_failure = attempts
        .iter()
        .rev()
        .find(|a| a.outcome.as_deref() == Some("failed"))
        .map(|a| LastFailure {
            attempt: a.number,
            kind: a.failure_kind.clone(),
            gate: a.failed_gate.clone(),
            criterion: a.criterion.clone(),
        });
    let own_events: Vec<&EventRow> = events
        .iter()
        .filter(|e| e.task.as_deref() == Some(name))
        .collect();
    // An agent still running has no cost row yet: what it has spent so far counts.
    if let Some(a) = last.filter(|a| !costs.contains_key(&a.id))
        && let Some(Event::AgentSpending { tokens, usd_micros }) = own_events
            .iter()
            .rev()
            .filter(|e| e.attempt == Some(a.number))
            .find(|e| e.event == "agent.spending")
            .and_then(|e| Event::read(&e.event, &e.detail))
    {
        spent.tokens += tokens;
        spent.usd_micros += usd_micros;
    }
    let state = row.map_or("pending", |r| r.state.as_str()).to_string();
    let waiting_for = if row.and_then(|r| r.outcome.as_deref()) == Some("human") {
        own_events
            .iter()
            .rev()
            .find(|e| e.event == "human.handoff")
            .and_then(|e| match Event::read(&e.event, &e.detail) {
                Some(Event::HumanHandoff { file, .. }) if !file.is_empty() => Some(file),
                _ => None,
            })
            .map(|f| Waiting::Human {
                handoff: PathBuf::from(f),
            })
    } else if row.is_none()
        && let Some(e) = own_events.last().filter(|e| e.event == "task.waiting")
    {
        match Event::read(&e.event, &e.detail) {
            Some(Event::TaskWaiting { wait, reason }) => Some(Waiting::Start {
                on: wait.on().to_string(),
                reason,
            }),
            _ => None,
        }
    } else if row.is_none() {
        let after: Vec<String> = ir_task
            .and_then(|t| t.get("after")?.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_str)
            .filter(|d| !tasks.iter().any(|t| t.name == *d && t.state == "finished"))
            .map(str::to_string)
            .collect();
        (!after.is_empty()).then_some(Waiting::Tasks { after })
    } else if state == "running" {
        run_waiting.cloned()
    } else {
        None
    };
    TaskStatus {
        name: name.to_string(),
        state,
        outcome: row.and_then(|r| r.outcome.clone()),
        attempt: last.map(|a| a.number),
        rung: last.map(|a| a.rung),
        agent: last.map(|a| a.agent.clone()),
        spent,
        limits,
        last_failure,
        merged: row.and_then(|r| r.merged.clone()),
        pull_request: pull_request_of(&own_events),
        waiting_for,
        since: own_events.last().map(|e| rfc3339(e.time_ms)),
    }
}

/// The phase the last event puts the run in.
fn phase(events: &[EventRow]) -> String {
    let Some(last) = events.last() else {
        return "starting".into();
    };
    match last.event.as_str() {
        "attempt.started" | "prompt.built" | "agent.rate-limited" | "lessons.learned" => "agent",
        "agent.finished" => "seal",
        "seal.passed" | "gate.finished" => "gates",
        "attempt.passed" | "merge.started" | "merge.conflict" | "merge.failed"
        | "merge.blocked" | "merge.locked" | "merge.lock-wait" | "merge.batch-split" => "merging",
        "human.handoff" | "checkpoint.waiting" | "run.paused" => "waiting-human",
        "run.stopped" | "run.interrupted" => "stopped",
        "run.finished" => {
            if matches!(
                Event::read(&last.event, &last.detail),
                Some(Event::RunFinished { outcome, .. }) if outcome == "human"
            ) {
                "waiting-human"
            } else {
                "finished"
            }
        }
        _ => "starting",
    }
    .into()
}
