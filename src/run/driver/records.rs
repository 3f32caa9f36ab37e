//! What the runner writes down, in: a task's transitions (an attempt's end, a failure, a
//! landing, a budget spent, a resume's restored clock and spending); out: its ledger rows, its
//! events and the status files (`STATUS.md`, `loop_state.json`), kept in step.

use std::path::Path;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use git2::Oid;

use super::{Outcome, Runner, TaskReport, Tried, budget_text, last_reason, locked};
use crate::ir::{Program, Task};
use crate::ledger;
use crate::run::attempt;
use crate::run::error::RunError;
use crate::run::event::Event;
use crate::run::failure::Failure;
use crate::run::host::Host;
use crate::run::policy;
use crate::run::trail::{LoopState, OpenFailure, TaskState};

impl<'a> Runner<'a> {
    /// `.mvk/runs/<run>`.
    pub(crate) fn run_dir(&self) -> &Path {
        self.trail.run_dir()
    }

    pub(crate) fn program(&self) -> &'a Program {
        self.program
    }

    pub(super) fn state(&self) -> MutexGuard<'_, LoopState> {
        locked(&self.state)
    }

    pub(super) fn history(&self) -> MutexGuard<'_, Vec<Tried>> {
        locked(&self.history)
    }

    pub(super) fn run_started(&self) -> Instant {
        *locked(&self.run_started)
    }

    /// Re-plans `task` after accepted drift: a new epoch from `base`.
    pub(crate) fn reset_task(&self, task: &Task, base: Oid, epoch: u32) -> Result<(), RunError> {
        self.with_task_start(task, base, |start| {
            Ok(self.ledger().reset_task(start, epoch)?)
        })?;
        self.emit(
            Some(&task.name),
            None,
            Event::TaskReplanned {
                digest: task.meta.digest.to_string(),
                epoch,
                base: base.to_string(),
            },
        )
    }

    /// Records an attempt's failure in the ledger (its verdict only, no event).
    pub(crate) fn finish_failed(&self, id: i64, f: &Failure) -> Result<(), RunError> {
        self.finish_attempt(id, Some(f))
    }

    /// Ends a task whose accepted attempt `a` landed as `commit` before the run was interrupted.
    pub(crate) fn finish_landed(
        &self,
        task: &Task,
        a: &ledger::AttemptRow,
        commit: &str,
    ) -> Result<TaskReport, RunError> {
        let pr = self
            .ledger()
            .pull_requests(&self.run_id)?
            .into_iter()
            .find(|p| p.attempt_id == a.id && p.state == "opened");
        let reason = match pr {
            Some(pr) => {
                let url = pr.url.clone().unwrap_or_default();
                // The interruption may have come between the ledger and the event.
                self.emit(
                    Some(&task.name),
                    Some(a.number),
                    Event::PrOpened {
                        url: url.clone(),
                        branch: pr.branch.clone(),
                        base: pr.base_branch.clone(),
                        found: true,
                    },
                )?;
                format!(
                    "accepted on attempt {}; pull request {url} (branch `{}` into `{}`) opened before the run was interrupted",
                    a.number, pr.branch, pr.base_branch
                )
            }
            None => format!(
                "accepted on attempt {}; landed as {} before the run was interrupted",
                a.number,
                &commit[..10.min(commit.len())]
            ),
        };
        self.ledger().finish_task(
            &self.run_id,
            &task.name,
            Outcome::Accepted.name(),
            Some(commit),
        )?;
        self.emit(
            Some(&task.name),
            None,
            Event::TaskFinished {
                outcome: "accepted".to_string(),
                reason: reason.clone(),
                merged: Some(commit.to_string()),
            },
        )?;
        let spent = self.ledger().spent(&self.run_id, Some(&task.name))?;
        self.state().last_green_commit = Some(commit.to_string());
        Ok(TaskReport {
            name: task.name.clone(),
            outcome: Outcome::Accepted,
            attempts: a.number,
            merged: Some(commit.to_string()),
            branch: Some(a.branch.clone()),
            usd: spent.usd_micros as f64 / 1e6,
            tokens: spent.input_tokens.saturating_add(spent.output_tokens),
            reason,
        })
    }

    /// Counts wall time the run used before it was interrupted towards its flow budget, and
    /// what it spent towards `loop_state.json`.
    pub(crate) fn restore_run_clock(&self, elapsed: Duration) -> Result<(), RunError> {
        *locked(&self.run_started) = Instant::now()
            .checked_sub(elapsed)
            .unwrap_or_else(Instant::now);
        self.restore_spent()
    }

    /// What the run spent, as the ledger holds it, towards `loop_state.json`.
    pub(crate) fn restore_spent(&self) -> Result<(), RunError> {
        let spent = self.ledger().spent(&self.run_id, None)?;
        let mut state = self.state();
        state.budget_spent.attempts = spent.attempts;
        state.budget_spent.tokens = spent.input_tokens.saturating_add(spent.output_tokens);
        state.budget_spent.usd_micros = spent.usd_micros;
        Ok(())
    }

    pub(super) fn task_state(&self, task: &str, f: impl FnOnce(&mut TaskState)) {
        if let Some(s) = self.state().tasks.iter_mut().find(|s| s.name == task) {
            f(s);
        }
    }

    pub(super) fn write_state(&self) -> Result<(), RunError> {
        *locked(&self.state_written) = Some(Instant::now());
        self.state_behind
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let wall = attempt::ms(self.run_started().elapsed());
        let mut state = self.state();
        state.updated = crate::clock::now().0;
        state.budget_spent.wall_ms = wall;
        Ok(self.trail.write_state(&state)?)
    }

    pub(super) fn finish_attempt(
        &self,
        id: i64,
        failure: Option<&Failure>,
    ) -> Result<(), RunError> {
        let json = failure.map(|f| serde_json::to_string(f).unwrap_or_default());
        self.ledger().finish_attempt(
            id,
            &ledger::AttemptEnd {
                outcome: if failure.is_some() {
                    "failed"
                } else {
                    "passed"
                },
                failure_kind: failure.map(|f| f.kind.name()),
                signature: failure.map(|f| f.signature.as_str()),
                criterion: failure.map(|f| f.criterion.as_str()),
                failure_json: json.as_deref(),
            },
        )?;
        Ok(())
    }

    pub(super) fn fail(&self, task: &Task, number: u32, f: &Failure) -> Result<(), RunError> {
        self.emit(
            Some(&task.name),
            Some(number),
            Event::AttemptFailed {
                kind: f.kind.name().to_string(),
                signature: f.signature.clone(),
                criterion: f.criterion.clone(),
                gate: f.gate.clone(),
                exit_code: f.exit_code,
                counts: f.counts,
                failure: Some(f.clone()),
            },
        )?;
        self.state().open_failures.retain(|o| o.task != task.name);
        self.state().open_failures.push(OpenFailure {
            task: task.name.clone(),
            attempt: number,
            kind: f.kind.name().into(),
            criterion: f.criterion.clone(),
        });
        self.task_state(&task.name, |s| s.note = Some(f.criterion.clone()));
        self.write_state()
    }

    /// Waits until `task`, back from landing for another attempt, may take a slot of the flow's
    /// `parallel` again, and takes it.
    pub(super) async fn rejoin(&self, task: &str) {
        locked(&self.slots).rejoining += 1;
        loop {
            let changed = self.slots_changed.notified();
            {
                let mut slots = locked(&self.slots);
                let working = slots.running.saturating_sub(slots.landing.len());
                if working < slots.parallel.max(1) {
                    slots.landing.remove(task);
                    slots.rejoining = slots.rejoining.saturating_sub(1);
                    drop(slots);
                    // The room kept for it is no longer needed: a waiting task may fit.
                    self.slots_changed.notify_waiters();
                    return;
                }
            }
            changed.await;
        }
    }

    /// What the whole run has spent so far: tokens, micro-dollars, wall time.
    pub(super) fn flow_tally(&self) -> Result<policy::Tally, RunError> {
        let s = self.ledger().spent(&self.run_id, None)?;
        // The agents running now count as far as they have spent.
        let live = self.purse.total();
        Ok(policy::Tally {
            tokens: s
                .input_tokens
                .saturating_add(s.output_tokens)
                .max(live.tokens),
            usd_micros: s.usd_micros.max(live.usd_micros),
            wall_ms: attempt::ms(self.run_started().elapsed()),
        })
    }
}

impl Runner<'_> {
    /// Records that task `name`'s budget `which` ran out (`budget.exhausted`), `spent` of
    /// `limit`, after the failure `last`: why the task ends.
    pub(crate) fn budget_exhausted(
        &self,
        name: &str,
        (which, spent, limit): (&str, u64, u64),
        last: Option<&Failure>,
    ) -> Result<String, RunError> {
        self.emit(
            Some(name),
            None,
            Event::BudgetExhausted {
                budget: which.to_string(),
                spent,
                limit,
            },
        )?;
        Ok(format!(
            "the {which} budget ran out ({}){}",
            budget_text(which, spent, limit),
            last_reason(last)
        ))
    }
}
