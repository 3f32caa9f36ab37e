//! A task that stops for a person in: why (a checkpoint kind, a question, the attempt it is
//! about); out, the checkpoint row a `mvk approve` or `mvk reject` answers, the handoff file
//! that says what was tried, and the run paused with exit 4.

use std::path::PathBuf;

use super::{Outcome, RunError, RunReport, Runner, TaskReport};
use crate::ir::Task;
use crate::ledger;
use crate::run::event::Event;
use crate::run::failure::Failure;
use crate::run::host::Host;
use crate::run::policy::CheckpointKind;
use crate::slug::slug;

impl Runner<'_> {
    /// Stops at a `review` checkpoint on attempt `(id, number, branch)`, whose rejection
    /// `failure` the maker and the reviewer could not settle (`why`): a person decides, and
    /// approving lands the attempt the reviewer rejected.
    pub(super) fn review_checkpoint(
        &self,
        task: &Task,
        target: &str,
        failure: &Failure,
        (attempt_id, number, branch): (i64, u32, &str),
        why: &str,
    ) -> Result<(TaskReport, PathBuf), RunError> {
        let path = self.stop_for_person(task, target, Some(failure), Some(why))?;
        let question = format!(
            "{why}; approve to land attempt {number} on `{target}` anyway, or reject with a reason for another attempt (see {})",
            path.display()
        );
        let r = self.checkpoint(
            task,
            (attempt_id, number, branch),
            CheckpointKind::Review,
            true,
            &question,
        )?;
        Ok((r, path))
    }

    /// The row of attempt `number` of `task` in `epoch` that was not abandoned, if any.
    pub(super) fn last_attempt_row(
        &self,
        task: &Task,
        epoch: u32,
        number: u32,
    ) -> Result<Option<ledger::AttemptRow>, RunError> {
        Ok(self
            .ledger()
            .attempt_rows(&self.run_id, &task.name)?
            .into_iter()
            .filter(|a| a.epoch == epoch && a.number == number && a.state != "abandoned")
            .max_by_key(|a| a.id))
    }

    /// Stops `task` at attempt `(id, number, branch)` for a person, and pauses the run.
    pub(super) fn checkpoint(
        &self,
        task: &Task,
        (attempt_id, number, branch): (i64, u32, &str),
        kind: CheckpointKind,
        lands: bool,
        question: &str,
    ) -> Result<TaskReport, RunError> {
        let id = self.ledger().open_checkpoint(&ledger::CheckpointStart {
            run: &self.run_id,
            task: &task.name,
            attempt_id,
            kind: kind.name(),
            lands,
            question,
        })?;
        self.emit(
            Some(&task.name),
            Some(number),
            Event::CheckpointWaiting {
                checkpoint: id,
                kind: kind.name().to_string(),
                lands,
                question: question.to_string(),
            },
        )?;
        self.task_state(&task.name, |s| {
            s.state = "waiting".into();
            s.note = Some(question.to_string());
        });
        let spent = self.ledger().spent(&self.run_id, Some(&task.name))?;
        Ok(TaskReport {
            name: task.name.clone(),
            outcome: Outcome::Waiting,
            attempts: number,
            merged: None,
            branch: Some(branch.to_string()),
            usd: spent.usd_micros as f64 / 1e6,
            tokens: spent.input_tokens.saturating_add(spent.output_tokens),
            reason: format!(
                "waiting for a person: {question}; answer with `mvk approve {run}` or `mvk reject {run} --reason TEXT`",
                run = self.run_id
            ),
        })
    }

    /// Ends this process's part of a run paused at a checkpoint: exit 4, the run resumable.
    pub(super) fn paused(&self, reports: Vec<TaskReport>) -> Result<RunReport, RunError> {
        let waiting: Vec<String> = reports
            .iter()
            .filter(|r| r.outcome == Outcome::Waiting)
            .map(|r| r.name.clone())
            .collect();
        self.ledger().pause_run(&self.run_id)?;
        self.emit(None, None, Event::RunPaused { waiting })?;
        // The worst code over the tasks, as for a finished flow: a task already rejected or
        // stuck beside one that waits is not hidden behind "waiting" (4).
        let exit_code = reports
            .iter()
            .map(|r| r.outcome)
            .max_by_key(|o| o.severity())
            .unwrap_or(Outcome::Waiting)
            .exit_code();
        self.state().outcome = Some(Outcome::Waiting.name().into());
        self.state().exit_code = Some(exit_code);
        self.state().task = None;
        self.state().phase = "waiting-human".into();
        self.write_state()?;
        Ok(RunReport {
            schema: "mvk.apply.v1",
            run: self.run_id.clone(),
            outcome: Outcome::Waiting,
            exit_code,
            tasks: reports,
            handoff: None,
        })
    }

    /// Stops `task` for a person: writes HANDOFF.md (what was tried and where the work is) and
    /// says so in a `human.handoff` event, with the reason and the reviewer's blockers when a
    /// rejection stopped it.
    pub(super) fn stop_for_person(
        &self,
        task: &Task,
        target: &str,
        last: Option<&Failure>,
        why: Option<&str>,
    ) -> Result<PathBuf, RunError> {
        use std::fmt::Write as _;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "# Handoff: task `{}` of run {}\n",
            task.name, self.run_id
        );
        let _ = writeln!(
            text,
            "The loop stopped for a person. Goal:\n\n> {}\n",
            task.goal.replace('\n', "\n> ")
        );
        let _ = writeln!(
            text,
            "Target branch: `{target}`. Seal: {}.\n",
            seal_list(task)
        );
        if let Some(why) = why {
            let _ = writeln!(text, "Why it stopped: {why}\n");
        }
        let _ = writeln!(text, "## What was tried\n");
        let tried: Vec<_> = self
            .history()
            .iter()
            .filter(|h| h.0 == task.name)
            .cloned()
            .collect();
        if tried.is_empty() {
            let _ = writeln!(text, "No attempt was made.");
        }
        // Each attempt's gates with their evidence, so that a person asked to overrule a
        // reviewer sees what the oracle said without opening the logs.
        let (made, gates) = {
            let ledger = self.ledger();
            (
                ledger.attempt_rows(&self.run_id, &task.name)?,
                ledger.task_gate_results(&self.run_id, &task.name)?,
            )
        };
        for (_, n, branch, f) in tried {
            let what = f.as_ref().map_or("passed".to_string(), |f| {
                format!("{} failure: {}", f.kind.name(), f.criterion)
            });
            let _ = writeln!(text, "- attempt {n} on branch `{branch}`: {what}");
            let ids: Vec<i64> = made
                .iter()
                .filter(|a| a.number == n && a.branch == branch)
                .map(|a| a.id)
                .collect();
            for g in gates.iter().filter(|g| ids.contains(&g.attempt_id)) {
                let counts = match (g.executed, g.passed, g.failed, g.skipped) {
                    (Some(e), Some(p), Some(f), Some(s)) => format!(
                        "{e} executed, {p} passed, {f} failed, {s} skipped; evidence: {}",
                        g.evidence
                    ),
                    _ => format!("evidence: {}", g.evidence),
                };
                let _ = writeln!(text, "  - gate `{}`: {} ({counts})", g.name, g.verdict);
            }
        }
        if let Some(f) = last
            && !f.tail.is_empty()
        {
            let _ = writeln!(
                text,
                "\n## The last failure's output\n\n```\n{}\n```",
                f.tail.trim_end()
            );
        }
        let _ = writeln!(
            text,
            "\n## Next\n\nInspect a branch with `git log -p {target}..BRANCH`; every attempt's prompt, agent output and gate logs are under `{}`.",
            self.trail.run_dir().display()
        );
        let path = self.trail.write_handoff(&slug(&task.name), &text)?;
        let handoff = Event::HumanHandoff {
            file: path.display().to_string(),
            reason: why.map(str::to_string),
            blockers: last.map(|f| f.blockers.clone()).unwrap_or_default(),
        };
        self.emit(Some(&task.name), None, handoff)?;
        Ok(path)
    }
}

/// A task's sealed paths as a handoff names them: each in backticks, or `none`.
pub(super) fn seal_list(task: &Task) -> String {
    if task.seal.is_empty() {
        return "none".to_string();
    }
    task.seal
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(" ")
}
