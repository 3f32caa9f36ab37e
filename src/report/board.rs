//! A run's events in (ledger rows, or the lines of an `events.jsonl` read as rows), one at a
//! time, and, where the ledger is at hand, its [`Status`]; what `mvk watch` shows out
//! ([`Board`]): the run's state and outcome, per task its state, the step it is in and since
//! when, attempt, rung, agent (and Temporal worker), time, spending against its budget, last
//! failure (whole), what it waits for and the checkpoint a person answers, the flow's DAG by
//! levels, and the latest events.
//!
//! The events alone make the board (a copied event stream has nothing else); the status, read
//! from the ledger, then corrects what only the ledger knows: liveness, costs, budgets' limits,
//! the checkpoints still unanswered, the dependencies between tasks.

use std::collections::{BTreeMap, VecDeque};

use crate::ledger::read::{EventRow, Liveness};
use crate::report::Spent;
use crate::report::status::{Limits, Status, Waiting};
use crate::run::event::Event;
use crate::run::failure::Failure;
use crate::run::schedule::Wait;

/// The latest events a board keeps (the view shows as many as fit).
pub(crate) const EVENTS_KEPT: usize = 200;

/// Where a run stands, for the live view.
#[derive(Debug, Clone, Default)]
pub(crate) struct Board {
    pub(crate) run: String,
    pub(crate) program: String,
    pub(crate) file: String,
    /// `temporal` when the run's attempts are made by `mvk worker`s.
    pub(crate) executor: Option<String>,
    pub(crate) started_ms: Option<i64>,
    /// The time of the latest event.
    pub(crate) last_event_ms: Option<i64>,
    /// How the run ended, once it has (`human`: it waits for a person, exit 4).
    pub(crate) end: Option<End>,
    /// mvk's own error, or a stop signal, that ended its process.
    pub(crate) stopped: Option<String>,
    /// From the ledger: whether its process is alive.
    pub(crate) liveness: Option<Liveness>,
    /// From the ledger: the run's diagnosis (`stuck`, `random walk`, …), in words.
    pub(crate) diagnosis: Option<String>,
    /// From the ledger: what the run as a whole waits for (a dead process: `mvk resume`).
    pub(crate) waiting: Option<String>,
    pub(crate) tasks: Vec<TaskBoard>,
    /// Counted from the events; the ledger's costs replace it when read.
    pub(crate) spent: Spent,
    /// The latest events, oldest first.
    pub(crate) events: VecDeque<EventRow>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct End {
    pub(crate) outcome: String,
    pub(crate) exit_code: i32,
    pub(crate) at_ms: Option<i64>,
}

/// Where one task stands.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskBoard {
    pub(crate) name: String,
    pub(crate) state: TaskState,
    /// What it is doing (`agent`, `gates`, `review`, …) and since when.
    pub(crate) step: Option<(String, i64)>,
    pub(crate) attempt: Option<u32>,
    pub(crate) rung: Option<u32>,
    pub(crate) agent: Option<String>,
    /// The Temporal worker making the attempt.
    pub(crate) worker: Option<String>,
    /// When it started (or was resumed), and the wall time it used before a resume.
    pub(crate) started_ms: Option<i64>,
    pub(crate) before_ms: u64,
    pub(crate) ended_ms: Option<i64>,
    pub(crate) spent: Spent,
    pub(crate) limits: Limits,
    /// The tasks it starts after.
    pub(crate) after: Vec<String>,
    pub(crate) failure: Option<FailureSeen>,
    pub(crate) merged: Option<String>,
    /// Who or what it waits for, in words.
    pub(crate) waiting: Option<String>,
    /// The checkpoint where it waits for a person's answer.
    pub(crate) checkpoint: Option<Checkpoint>,
    /// The handoff file a person reads.
    pub(crate) handoff: Option<String>,
    /// Why it ended as it did.
    pub(crate) reason: Option<String>,
}

/// A task's state, coarser than its step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum TaskState {
    /// Not started, nothing said yet.
    #[default]
    Pending,
    /// The scheduler holds it back (`task.waiting`).
    Waiting,
    Running,
    /// Ended: `accepted`, `rejected`, `stuck`, `unknown`, `budget`, `human`, `skipped`, …
    Done(String),
}

impl TaskState {
    /// `pending`, `waiting`, `running` or the outcome.
    pub(crate) fn name(&self) -> &str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Waiting => "waiting",
            TaskState::Running => "running",
            TaskState::Done(o) => o,
        }
    }
}

/// The last failure of a task: whole when an event carried it, else what the ledger says.
#[derive(Debug, Clone)]
pub(crate) struct FailureSeen {
    pub(crate) attempt: u32,
    /// `gate tests`, `seal`, `review`, …
    pub(crate) by: String,
    pub(crate) criterion: String,
    pub(crate) whole: Option<Failure>,
}

/// A checkpoint that waits for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checkpoint {
    /// Its id in the ledger: an answer is for this checkpoint, not whichever the task has open
    /// by the time the key is pressed.
    pub(crate) id: i64,
    /// `review`, `step`, `batch`, `human` or `landing`.
    pub(crate) kind: String,
    pub(crate) attempt: u32,
    pub(crate) question: String,
    /// Whether the run is paused on it, so that `mvk approve` can answer it now (in a flow the
    /// run pauses once its other tasks end).
    pub(crate) answerable: bool,
}

impl Board {
    /// Takes one event in.
    pub(crate) fn apply(&mut self, row: &EventRow) {
        self.last_event_ms = Some(row.time_ms);
        if self.run.is_empty() {
            self.run.clone_from(&row.run);
        }
        self.events.push_back(row.clone());
        while self.events.len() > EVENTS_KEPT {
            self.events.pop_front();
        }
        let Some(event) = Event::read(&row.event, &row.detail) else {
            return;
        };
        let at = row.time_ms;
        match event {
            Event::RunStarted {
                file,
                program,
                tasks,
                executor,
                ..
            } => {
                self.file = file;
                self.program = program;
                self.executor = executor;
                self.started_ms = Some(at);
                for t in tasks {
                    self.task_mut(&t);
                }
            }
            Event::RunResumed { .. } => {
                self.end = None;
                self.stopped = None;
            }
            Event::RunFinished {
                outcome, exit_code, ..
            }
            | Event::RunClosed {
                outcome, exit_code, ..
            } => {
                self.end = Some(End {
                    outcome,
                    exit_code,
                    at_ms: Some(at),
                });
                for t in &mut self.tasks {
                    t.step = None;
                }
            }
            Event::RunStopped { error, .. } => self.stopped = Some(error),
            Event::RunInterrupted { by, .. } => self.stopped = Some(format!("stopped by {by}")),
            Event::RunPaused { .. } => {
                self.end = Some(End {
                    outcome: "human".into(),
                    exit_code: 4,
                    at_ms: Some(at),
                });
                for t in &mut self.tasks {
                    if let Some(c) = &mut t.checkpoint {
                        c.answerable = true;
                    }
                }
            }
            _ => {
                if let Some(task) = row.task.as_deref() {
                    self.task_event(task, row.attempt, at, event);
                }
            }
        }
    }

    /// Takes an event about task NAME in.
    fn task_event(&mut self, name: &str, attempt: Option<u32>, at: i64, event: Event) {
        let count_spent = !self.ledger_read();
        let t = self.task_mut(name);
        let step = |t: &mut TaskBoard, what: &str| t.step = Some((what.to_string(), at));
        match event {
            Event::TaskStarted { .. } | Event::TaskReplanned { .. } => {
                t.state = TaskState::Running;
                t.started_ms = Some(at);
                t.ended_ms = None;
                t.waiting = None;
                step(t, "starting");
            }
            Event::TaskResumed { elapsed_ms, .. } => {
                t.state = TaskState::Running;
                t.started_ms = Some(at);
                t.before_ms = elapsed_ms.unwrap_or(0);
                t.ended_ms = None;
                t.waiting = None;
                step(t, "resuming");
            }
            Event::TaskWaiting { wait, reason } => {
                if let Wait::After { tasks } | Wait::Person { tasks } = &wait {
                    for d in tasks {
                        if !t.after.contains(d) {
                            t.after.push(d.clone());
                        }
                    }
                }
                t.state = TaskState::Waiting;
                t.waiting = Some(if reason.is_empty() {
                    wait.text()
                } else {
                    reason
                });
            }
            Event::TaskSkipped { reason, after } => {
                for d in after {
                    if !t.after.contains(&d) {
                        t.after.push(d);
                    }
                }
                t.state = TaskState::Done("skipped".into());
                t.reason = Some(reason);
                t.waiting = None;
                t.ended_ms = Some(at);
            }
            Event::TaskFinished {
                outcome,
                reason,
                merged,
            } => {
                t.state = TaskState::Done(outcome);
                t.reason = (!reason.is_empty()).then_some(reason);
                if merged.is_some() {
                    t.merged = merged;
                }
                t.step = None;
                t.waiting = None;
                t.ended_ms = Some(at);
            }
            Event::RungClimbed { to, .. } => {
                t.rung = u32::try_from(to).ok();
            }
            Event::AttemptStarted {
                rung,
                agent,
                worker,
                ..
            } => {
                t.state = TaskState::Running;
                t.attempt = attempt;
                t.rung = Some(rung);
                t.agent = Some(agent);
                t.worker = worker;
                t.checkpoint = None;
                if count_spent {
                    t.spent.attempts += 1;
                }
                step(t, "prompt");
            }
            Event::PromptBuilt { .. } => step(t, "agent"),
            Event::AgentRateLimited { .. } => step(t, "rate-limited"),
            Event::AgentFinished { tokens, usd, .. } => {
                if count_spent {
                    add_cost(&mut t.spent, tokens, usd);
                }
                step(t, "seal");
            }
            Event::SealPassed {} | Event::GateFinished { .. } => step(t, "gates"),
            Event::ReviewStarted { .. } => step(t, "review"),
            Event::ReviewFinished { tokens, usd, .. } => {
                if count_spent {
                    add_cost(&mut t.spent, tokens, usd);
                }
                step(t, "deciding");
            }
            Event::AttemptPassed { .. } => step(t, "landing"),
            Event::MergeStarted { .. } => step(t, "merging"),
            Event::MergeDone { commit, .. } => t.merged = Some(commit),
            Event::AttemptFailed {
                kind,
                criterion,
                gate,
                failure,
                ..
            } => {
                t.failure = Some(FailureSeen {
                    attempt: attempt.unwrap_or(0),
                    by: by(&kind, gate.as_deref()),
                    criterion,
                    whole: failure,
                });
                step(t, "deciding");
            }
            Event::CheckpointWaiting {
                checkpoint,
                kind,
                question,
                ..
            } => {
                t.checkpoint = Some(Checkpoint {
                    id: checkpoint,
                    kind,
                    attempt: attempt.unwrap_or(0),
                    question,
                    answerable: false,
                });
                step(t, "waiting for a person");
            }
            Event::CheckpointAnswered { .. } => t.checkpoint = None,
            Event::HumanHandoff { file, .. } if !file.is_empty() => t.handoff = Some(file),
            Event::BudgetExhausted {
                budget,
                spent,
                limit,
            } => t.reason = Some(format!("budget `{budget}` ran out: {spent} of {limit}")),
            _ => {}
        }
        if count_spent {
            self.spent = self.tasks.iter().fold(Spent::default(), |mut all, t| {
                all.attempts += t.spent.attempts;
                all.tokens += t.spent.tokens;
                all.usd_micros += t.spent.usd_micros;
                all
            });
        }
    }

    /// Whether a status from the ledger was laid over the events (its costs are the ledger's).
    fn ledger_read(&self) -> bool {
        self.liveness.is_some()
    }

    fn task_mut(&mut self, name: &str) -> &mut TaskBoard {
        let i = match self.tasks.iter().position(|t| t.name == name) {
            Some(i) => i,
            None => {
                self.tasks.push(TaskBoard {
                    name: name.to_string(),
                    ..TaskBoard::default()
                });
                self.tasks.len() - 1
            }
        };
        &mut self.tasks[i]
    }

    /// Lays what the ledger says (`status`, and the program's dependencies `after`) over what
    /// the events said.
    pub(crate) fn apply_status(&mut self, s: &Status, after: &BTreeMap<String, Vec<String>>) {
        self.run.clone_from(&s.run);
        self.program.clone_from(&s.program);
        self.file.clone_from(&s.file);
        self.liveness = Some(s.liveness.clone());
        self.spent = s.spent;
        self.end = match (&s.outcome, s.exit_code) {
            (Some(outcome), Some(exit_code)) if s.state != "running" => Some(End {
                outcome: outcome.clone(),
                exit_code,
                at_ms: self.end.as_ref().and_then(|e| e.at_ms),
            }),
            // Paused: the ledger keeps no outcome, but the run's process ended with exit 4.
            _ if s.state == "paused" => Some(End {
                outcome: "human".into(),
                exit_code: 4,
                at_ms: self.end.as_ref().and_then(|e| e.at_ms),
            }),
            _ => None,
        };
        self.diagnosis = s.diagnosis.as_ref().map(|d| {
            let task = d
                .task
                .as_ref()
                .map_or(String::new(), |t| format!(" (task `{t}`)"));
            format!("{}{task}: {}", d.pattern.name(), d.reason)
        });
        self.waiting = s.waiting_for.as_ref().and_then(|w| match w {
            Waiting::Resume { .. } | Waiting::AnotherAttempt { .. } => Some(waiting_text(w)),
            _ => None,
        });
        let paused = s.state == "paused";
        for ts in &s.tasks {
            let t = self.task_mut(&ts.name);
            t.state = match (&ts.outcome, ts.state.as_str()) {
                (Some(o), _) => TaskState::Done(o.clone()),
                (None, "running") => TaskState::Running,
                (None, _) if t.state == TaskState::Waiting => TaskState::Waiting,
                (None, "pending") => TaskState::Pending,
                (None, other) => TaskState::Done(other.to_string()),
            };
            if !matches!(t.state, TaskState::Running) {
                t.step = None;
            }
            t.attempt = ts.attempt.or(t.attempt);
            t.rung = ts.rung.or(t.rung);
            if ts.agent.is_some() {
                t.agent.clone_from(&ts.agent);
            }
            t.spent = ts.spent;
            t.limits = ts.limits.clone();
            if ts.merged.is_some() {
                t.merged.clone_from(&ts.merged);
            }
            if let Some(f) = &ts.last_failure {
                let fresh = t
                    .failure
                    .as_ref()
                    .is_none_or(|seen| seen.attempt != f.attempt);
                if fresh {
                    t.failure = Some(FailureSeen {
                        attempt: f.attempt,
                        by: by(f.kind.as_deref().unwrap_or("failure"), f.gate.as_deref()),
                        criterion: f.criterion.clone().unwrap_or_default(),
                        whole: None,
                    });
                }
            }
            t.checkpoint = match &ts.waiting_for {
                Some(Waiting::Decision {
                    id,
                    checkpoint,
                    attempt,
                    question,
                    task,
                    ..
                }) if task == &ts.name => Some(Checkpoint {
                    id: *id,
                    kind: checkpoint.clone(),
                    attempt: *attempt,
                    question: question.clone(),
                    answerable: paused,
                }),
                _ => None,
            };
            t.waiting = match &ts.waiting_for {
                None | Some(Waiting::Decision { .. }) => None,
                Some(w @ (Waiting::Resume { .. } | Waiting::AnotherAttempt { .. })) => {
                    Some(waiting_text(w))
                }
                Some(w) => Some(waiting_text(w)),
            };
            if let Some(Waiting::Human { handoff }) = &ts.waiting_for {
                t.handoff = Some(handoff.display().to_string());
            }
            if let Some(deps) = after.get(&ts.name) {
                t.after.clone_from(deps);
            }
        }
    }

    /// The tasks by DAG level: a task's level is one more than the highest of the tasks it
    /// starts after (1 for those that start after none); each level's task indices, in order.
    pub(crate) fn levels(&self) -> Vec<Vec<usize>> {
        let mut level: BTreeMap<&str, usize> = BTreeMap::new();
        // A level is at most the number of tasks; a cycle (never in a compiled program) stops
        // there.
        for _ in 0..=self.tasks.len() {
            let mut changed = false;
            for t in &self.tasks {
                let l = 1 + t
                    .after
                    .iter()
                    .map(|d| level.get(d.as_str()).copied().unwrap_or(0))
                    .max()
                    .unwrap_or(0);
                let l = l.min(self.tasks.len().max(1));
                if level.get(t.name.as_str()) != Some(&l) {
                    level.insert(&t.name, l);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let deepest = level.values().copied().max().unwrap_or(0);
        let mut out = vec![Vec::new(); deepest];
        for (i, t) in self.tasks.iter().enumerate() {
            if let Some(l) = level.get(t.name.as_str()) {
                out[l - 1].push(i);
            }
        }
        out
    }

    /// Whether the run has ended and will not go on by itself: finished, paused for a person,
    /// closed, or its process is gone.
    pub(crate) fn over(&self) -> bool {
        self.end.is_some()
            || matches!(
                self.liveness,
                Some(Liveness::Interrupted { .. } | Liveness::Finished | Liveness::Paused)
            )
    }
}

/// What a task waits for, in words.
fn waiting_text(w: &Waiting) -> String {
    match w {
        Waiting::Human { handoff } => format!("a person: read {}", handoff.display()),
        Waiting::Tasks { after } => format!(
            "{} to finish",
            after
                .iter()
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Waiting::Start { reason, .. } => reason.clone(),
        Waiting::Resume { command } => format!("`{command}` (its process is gone)"),
        Waiting::AnotherAttempt { command } => {
            format!("`{command}` (the attempt's process died)")
        }
        Waiting::Decision {
            checkpoint, task, ..
        } => format!("a person's decision ({checkpoint} checkpoint of `{task}`)"),
    }
}

/// `gate tests`, or the kind of failure.
fn by(kind: &str, gate: Option<&str>) -> String {
    match gate {
        Some(g) if kind == "gate" => format!("gate {g}"),
        _ => kind.to_string(),
    }
}

fn add_cost(spent: &mut Spent, tokens: u64, usd: Option<f64>) {
    spent.tokens += tokens;
    if let Some(usd) = usd.filter(|u| u.is_finite() && *u > 0.0) {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a positive, finite amount of dollars in micro-dollars"
        )]
        let micros = (usd * 1_000_000.0).round() as u64;
        spent.usd_micros += micros;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn row(id: i64, task: Option<&str>, attempt: Option<u32>, event: Event) -> EventRow {
        let (name, detail) = event.into_parts().unwrap();
        EventRow {
            id,
            run: "r".into(),
            task: task.map(str::to_string),
            attempt,
            time_ms: id * 1000,
            event: name.to_string(),
            detail,
        }
    }

    fn started(tasks: &[&str]) -> Event {
        Event::from_parts(
            "run.started",
            json!({"file": "loops/f.kdl", "program": "f", "tasks": tasks}),
        )
        .unwrap()
    }

    #[test]
    fn a_flow_is_followed_from_its_events_alone() {
        let mut b = Board::default();
        b.apply(&row(1, None, None, started(&["a", "b"])));
        assert_eq!(b.tasks.len(), 2);
        assert_eq!(b.tasks[1].state, TaskState::Pending);
        b.apply(&row(
            2,
            Some("b"),
            None,
            Event::TaskWaiting {
                wait: Wait::After {
                    tasks: vec!["a".into()],
                },
                reason: "waits for `a` to finish".into(),
            },
        ));
        b.apply(&row(
            3,
            Some("a"),
            None,
            Event::from_parts("task.started", json!({})).unwrap(),
        ));
        b.apply(&row(
            4,
            Some("a"),
            Some(1),
            Event::from_parts("attempt.started", json!({"rung": 1, "agent": "bot"})).unwrap(),
        ));
        b.apply(&row(
            5,
            Some("a"),
            Some(1),
            Event::from_parts("prompt.built", json!({"tokens": 10, "budget": 100})).unwrap(),
        ));
        let a = &b.tasks[0];
        assert_eq!(a.state, TaskState::Running);
        assert_eq!(a.step, Some(("agent".to_string(), 5000)));
        assert_eq!(
            (a.attempt, a.rung, a.agent.as_deref()),
            (Some(1), Some(1), Some("bot"))
        );
        assert_eq!(b.tasks[1].state, TaskState::Waiting);
        assert_eq!(b.tasks[1].after, ["a"]);
        assert_eq!(b.levels(), vec![vec![0], vec![1]]);

        b.apply(&row(
            6,
            Some("a"),
            Some(1),
            Event::from_parts(
                "agent.finished",
                json!({"tokens": 1500, "usd": 0.25, "timed_out": false, "duration_ms": 1}),
            )
            .unwrap(),
        ));
        assert_eq!(b.spent.tokens, 1500);
        assert_eq!(b.spent.usd_micros, 250_000);
        assert_eq!(b.spent.attempts, 1);
        b.apply(&row(
            7,
            Some("a"),
            Some(1),
            Event::from_parts(
                "attempt.failed",
                json!({"kind": "gate", "gate": "tests", "criterion": "2 failed", "signature": "s"}),
            )
            .unwrap(),
        ));
        let f = b.tasks[0].failure.as_ref().unwrap();
        assert_eq!((f.attempt, f.by.as_str()), (1, "gate tests"));
        b.apply(&row(
            8,
            Some("a"),
            None,
            Event::TaskFinished {
                outcome: "accepted".into(),
                reason: String::new(),
                merged: Some("abc".into()),
            },
        ));
        assert_eq!(b.tasks[0].state, TaskState::Done("accepted".into()));
        assert_eq!(b.tasks[0].step, None);
        assert!(!b.over());
        b.apply(&row(
            9,
            None,
            None,
            Event::RunFinished {
                outcome: "accepted".into(),
                exit_code: 0,
                error: None,
            },
        ));
        assert!(b.over());
        assert_eq!(b.end.as_ref().map(|e| e.exit_code), Some(0));
    }

    #[test]
    fn a_checkpoint_is_answerable_once_the_run_pauses_and_gone_once_answered() {
        let mut b = Board::default();
        b.apply(&row(1, None, None, started(&["t"])));
        b.apply(&row(
            2,
            Some("t"),
            Some(1),
            Event::CheckpointWaiting {
                checkpoint: 1,
                kind: "step".into(),
                lands: true,
                question: "land it?".into(),
            },
        ));
        assert!(!b.tasks[0].checkpoint.as_ref().unwrap().answerable);
        b.apply(&row(
            3,
            None,
            None,
            Event::RunPaused {
                waiting: vec!["t".into()],
            },
        ));
        assert!(b.tasks[0].checkpoint.as_ref().unwrap().answerable);
        b.apply(&row(
            4,
            Some("t"),
            Some(1),
            Event::CheckpointAnswered {
                checkpoint: 1,
                kind: "step".into(),
                decision: "approve".into(),
                reason: None,
            },
        ));
        assert_eq!(b.tasks[0].checkpoint, None);
    }

    #[test]
    fn levels_follow_the_longest_chain_and_survive_a_cycle() {
        let mut b = Board::default();
        for (name, after) in [("a", vec![]), ("b", vec!["a"]), ("c", vec!["a", "b"])] {
            b.tasks.push(TaskBoard {
                name: name.into(),
                after: after.into_iter().map(str::to_string).collect(),
                ..TaskBoard::default()
            });
        }
        assert_eq!(b.levels(), vec![vec![0], vec![1], vec![2]]);
        b.tasks[0].after = vec!["c".into()];
        let levels = b.levels();
        assert_eq!(levels.iter().map(Vec::len).sum::<usize>(), 3);
    }
}
