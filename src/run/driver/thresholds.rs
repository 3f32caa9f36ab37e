//! What a task and its flow have spent in; out, a `budget.threshold` event the first time what
//! was spent of a budget reaches its warning (`warn-at`) or a fraction (`at`) a notification
//! asked to hear of, once per task (or flow), budget and fraction, across resumes (the ledger
//! holds those already written). Dollars and tokens are looked at as a metered agent spends them
//! and after each attempt, wall time as the run goes. Nothing is written when no budget warns
//! and no notification hears of budgets.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{Runner, locked};
use crate::ir::{DEFAULT_WARN_AT, Notify, NotifyEvent, Task};
use crate::run::attempt;
use crate::run::error::RunError;
use crate::run::event::Event;
use crate::run::host::Host;
use crate::run::policy::Tally;

/// `(task, budget, at)` of each threshold written, `None` for the flow's.
pub(super) type Reached = BTreeSet<(Option<String>, String, u32)>;

/// The thresholds run `run` has written so far (a resume goes on from them).
pub(super) fn reached(ledger: &crate::ledger::Ledger, run: &str) -> Reached {
    ledger
        .run_event_details(run, "budget.threshold")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(task, detail)| {
            let detail: serde_json::Value = serde_json::from_str(&detail).ok()?;
            match Event::read("budget.threshold", &detail)? {
                Event::BudgetThreshold { budget, at, .. } => Some((task, budget, at)),
                _ => None,
            }
        })
        .collect()
}

/// The fractions (thousandths) of a budget that warns at `warn_at` (if written) to look at:
/// its warning, and those the notifications of `notify` that hear of budgets ask for (the
/// warning's, for one that names none), each once; and the warning's own fraction.
fn fractions<'n>(
    warn_at: Option<u32>,
    notify: impl Iterator<Item = &'n Arc<Notify>>,
) -> (Vec<u32>, u32) {
    let warning = warn_at.unwrap_or(DEFAULT_WARN_AT);
    let mut set: BTreeSet<u32> = notify
        .filter(|n| n.hears(NotifyEvent::Budget))
        .map(|n| n.at.unwrap_or(warning))
        .collect();
    set.extend(warn_at);
    (set.into_iter().collect(), warning)
}

/// Whether `spent` of `limit` reaches `at` thousandths.
fn reaches(spent: u64, limit: u64, at: u32) -> bool {
    u128::from(spent) * 1000 >= u128::from(limit) * u128::from(at)
}

impl Runner<'_> {
    /// Whether any budget of the program warns or any notification hears of budgets.
    pub(super) fn hears_budgets(&self) -> bool {
        let p = self.program;
        p.flow.as_ref().is_some_and(|f| f.budget.warn_at.is_some())
            || p.tasks.iter().any(|t| t.budget.warn_at.is_some())
            || p.notify
                .iter()
                .chain(p.tasks.iter().flat_map(|t| t.notify.iter()))
                .any(|n| n.hears(NotifyEvent::Budget))
    }

    /// Whether what `task` spends is looked at against fractions of its budgets.
    pub(super) fn watches_budgets(&self, _task: &Task) -> bool {
        self.hears_budgets
    }

    /// Writes the thresholds `task` (having spent `task_spent`) and its flow (`flow_spent`) reach.
    pub(super) fn budget_thresholds(
        &self,
        task: &Task,
        task_spent: &Tally,
        flow_spent: Option<&Tally>,
    ) -> Result<(), RunError> {
        let program = self.program;
        let b = &task.budget;
        let (task_at, task_warning) = fractions(
            b.warn_at,
            crate::resolve::notify::overlay(&program.notify, task.notify.clone()).iter(),
        );
        let mut found = Vec::new();
        for (name, spent, limit) in [
            ("tokens", task_spent.tokens, b.tokens),
            ("usd", task_spent.usd_micros, b.usd_micros),
            ("wall", task_spent.wall_ms, b.wall.map(attempt::ms)),
        ] {
            if let Some(limit) = limit {
                found.extend(task_at.iter().map(|&at| {
                    let warning = at == task_warning;
                    (Some(task.name.as_str()), name, spent, limit, at, warning)
                }));
            }
        }
        if let (Some(spent), Some(flow)) = (flow_spent, &program.flow) {
            let f = &flow.budget;
            let (flow_at, flow_warning) = fractions(f.warn_at, program.notify.iter());
            for (name, spent, limit) in [
                ("flow tokens", spent.tokens, f.tokens),
                ("flow usd", spent.usd_micros, f.usd_micros),
                ("flow wall", spent.wall_ms, f.wall.map(attempt::ms)),
            ] {
                if let Some(limit) = limit {
                    found.extend(
                        flow_at
                            .iter()
                            .map(|&at| (None, name, spent, limit, at, at == flow_warning)),
                    );
                }
            }
        }
        for (task, name, spent, limit, at, warning) in found {
            if !reaches(spent, limit, at) {
                continue;
            }
            let key = (task.map(str::to_string), name.to_string(), at);
            if !locked(&self.reached).insert(key.clone()) {
                continue;
            }
            let written = self.emit(
                task,
                None,
                Event::BudgetThreshold {
                    budget: name.to_string(),
                    spent,
                    limit,
                    at,
                    warning,
                },
            );
            if let Err(e) = written {
                // Not written: tried again the next time it is looked at.
                locked(&self.reached).remove(&key);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The wall-time thresholds the running tasks (`running`, indices into the program's tasks)
    /// and the flow reach now.
    pub(super) fn wall_thresholds(&self, running: &[usize]) -> Result<(), RunError> {
        let flow = self
            .program
            .flow
            .as_ref()
            .filter(|f| f.budget.wall.is_some())
            .map(|_| Tally {
                wall_ms: attempt::ms(self.run_started().elapsed()),
                ..Tally::default()
            });
        let mut flow = flow.as_ref();
        for &i in running {
            let task = &self.program.tasks[i];
            if task.budget.wall.is_none() && flow.is_none() {
                continue;
            }
            let spent = Tally {
                wall_ms: attempt::ms(self.started(&task.name).elapsed()),
                // Dollars and tokens are looked at after each attempt: zero reaches nothing.
                ..Tally::default()
            };
            self.budget_thresholds(task, &spent, flow.take())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::reaches;

    #[test]
    fn a_fraction_is_reached_at_or_past_it_without_overflow() {
        assert!(reaches(800, 1000, 800));
        assert!(!reaches(799, 1000, 800));
        assert!(reaches(1_600_000, 2_000_000, 800));
        assert!(reaches(u64::MAX, u64::MAX, 1000));
        assert!(!reaches(0, 1, 1));
    }
}
