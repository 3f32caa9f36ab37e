//! One task through its ladder, in the local driver: a task, its target branch and what a
//! resume found of it in; its report (and the handoff written, if a person must act) out. A
//! loop of decide ([`policy::decide`]) → act (an attempt, a landing, a checkpoint) → record
//! (the ledger, the trail, the status files).

use std::path::PathBuf;
use std::time::Instant;

use git2::Oid;

use super::landing::Landing;
use super::{
    Budgets, Pending, Progress, Resume, RunError, Runner, TaskReport, last_reason, locked, oid,
    rounds_used, rung_label, short, stopped_failure,
};
use crate::ir::{Agent, Rung, Task};
use crate::run::attempt::{self, AttemptEnd, AttemptRecord, AttemptSpec};
use crate::run::event::Event;
use crate::run::failure::{Failure, FailureKind};
use crate::run::host::Host;
use crate::run::meter::{Spend, TaskCaps};
use crate::run::outcome::Outcome;
use crate::run::policy::{self, CheckpointKind, Next};

/// A task's report, and the handoff written for a person, if any.
pub(crate) type Ended = (TaskReport, Option<PathBuf>);

/// A task on its way: where it stands and what it spent (but its last failure, which the
/// loop keeps beside it for the attempt that quotes it).
struct TaskRun<'t> {
    task: &'t Task,
    target: String,
    base: Oid,
    budgets: Budgets,
    /// The task's epoch (see `Ledger::reset_task`), and the attempts numbered before it, from
    /// which its budgets count.
    epoch: u32,
    first: u32,
    /// Attempts made (the last attempt's number), the 0-based rung and attempts made on it.
    number: u32,
    rung: usize,
    on_rung: u32,
    /// How many times in a row the last failure's signature has been seen.
    same: u32,
    /// The reviewer's rejections in this epoch, as the last decision counted them.
    rejections: u32,
    spent_tokens: u64,
    spent_usd: u64,
    last_branch: Option<String>,
    /// The attempt that made the last failure, `(ledger id, number, branch)`, when this process
    /// made it; a resumed task finds it in the ledger.
    last_attempt: Option<(i64, u32, String)>,
    /// The last failure was just recorded here (not restored by a resume), and no person has
    /// seen it yet (one has, for an approved attempt a resume landed and the landing failed).
    just_failed: bool,
    unseen: bool,
    /// What the budgets had left at the last decision, for the next attempt's prompt.
    left: policy::Left,
}

/// What the policy's decision comes to: an attempt by this agent, or the task's end.
enum Act<'t> {
    Attempt(&'t Agent),
    End(Ended),
}

impl<'a> Runner<'a> {
    /// Runs one task through its ladder to an outcome; `resume` carries on a task a resumed
    /// run found unfinished.
    pub(super) async fn run_task(
        &self,
        task: &'a Task,
        target: &str,
        resume: Option<Resume>,
    ) -> Result<Ended, RunError> {
        let resume = resume.unwrap_or_default();
        let start = self.pr_start(task, target, resume.begun).await?;
        let base = match &start {
            super::pull_request::PrStart::At(base) => Some(*base),
            _ => None,
        };
        let (mut t, mut last) = self.open_task(task, target, &resume, base)?;
        if let super::pull_request::PrStart::End(outcome, reason) = start {
            return Ok((self.end_task(&t, outcome, reason, None, None)?, None));
        }
        let mut pending = resume.pending;
        for (n, branch, f) in resume.history {
            self.history().push((task.name.clone(), n, branch, f));
        }
        let ladder: Vec<policy::RungKind> =
            task.ladder.iter().map(policy::RungKind::from).collect();
        let flow = self.program.flow.as_ref().map(|f| &f.budget);
        let rules = policy::Rules {
            ladder: &ladder,
            iterations: task.budget.iterations,
            same_failure: task.budget.same_failure,
            review_rounds: task.review.as_ref().map(|r| r.rounds),
            task: policy::Limits::of(task.budget.tokens, task.budget.usd_micros, task.budget.wall),
            flow: flow
                .map(|f| policy::Limits::of(f.tokens, f.usd_micros, f.wall))
                .unwrap_or_default(),
            mode: self.opts.mode,
        };
        loop {
            // An attempt a resume found half done goes on from its last durable step; otherwise
            // the policy decides, and a fresh one is made if it says so.
            let (spec, record, settled, ask) = match pending.take() {
                Some(p) => self.pending_attempt(&t, p, last.as_ref()).await?,
                None => {
                    let decision = self.decide(&mut t, &rules, last.as_ref())?;
                    let agent = match self.act(&t, decision, last.as_ref())? {
                        Act::Attempt(agent) => agent,
                        Act::End(ended) => return Ok(ended),
                    };
                    t.number += 1;
                    t.on_rung += 1;
                    let spec = AttemptSpec {
                        task,
                        number: t.number,
                        rung: u32::try_from(t.rung + 1).unwrap_or(u32::MAX),
                        agent,
                        base: t.base,
                        previous: last.as_ref(),
                        epoch: t.epoch,
                        left: t.left,
                        caps: caps(&t),
                    };
                    let record = attempt::run_attempt(self, &spec, &t.budgets).await?;
                    (spec, record, false, true)
                }
            };
            self.spend(&mut t, spec.number, &record)?;
            let failure = match record.end {
                AttemptEnd::WallSpent => {
                    let f = Failure::new(
                        spec.number,
                        FailureKind::Agent,
                        "the attempt ends within the wall budget (it ran out during the attempt)"
                            .into(),
                        &["wall"],
                    );
                    self.finish_attempt(record.ledger_id, Some(&f))?;
                    continue; // the policy's wall budget stops the task
                }
                AttemptEnd::Stopped(trip) => {
                    let f = stopped_failure(spec.number, &trip);
                    self.finish_attempt(record.ledger_id, Some(&f))?;
                    self.fail(task, spec.number, &f)?;
                    self.history().push((
                        task.name.clone(),
                        spec.number,
                        record.branch.clone(),
                        Some(f.clone()),
                    ));
                    let reason = self.budget_exhausted(
                        &task.name,
                        (trip.budget.name(), trip.spent, trip.limit),
                        Some(&f),
                    )?;
                    let branch = Some(record.branch.clone());
                    return Ok((
                        self.end_task(&t, Outcome::Budget, reason, None, branch)?,
                        None,
                    ));
                }
                AttemptEnd::Failed(f) => f,
                AttemptEnd::Passed { head, .. } => {
                    let record = (record.ledger_id, record.branch.clone());
                    match self
                        .passed(&mut t, &spec, record, head, settled, ask)
                        .await?
                    {
                        Ok(ended) => return Ok(ended),
                        Err(landing_failed) => landing_failed,
                    }
                }
            };
            let number = spec.number;
            if failure.kind != FailureKind::Merge {
                self.finish_attempt(record.ledger_id, Some(&failure))?;
                self.fail(task, number, &failure)?;
            }
            let again = last
                .as_ref()
                .is_some_and(|l| l.signature == failure.signature);
            t.same = if again { t.same + 1 } else { 1 };
            self.history().push((
                task.name.clone(),
                number,
                record.branch.clone(),
                Some(failure.clone()),
            ));
            if failure.kind == FailureKind::Review && task.review.is_some() {
                crate::run::failpoint("review-rejected");
            }
            t.last_attempt = Some((record.ledger_id, number, record.branch.clone()));
            (t.just_failed, t.unseen) = (true, !settled);
            last = Some(failure);
        }
    }

    /// Starts `task` (or takes it up again, as `resume` says): its wall clock, its first
    /// event, where it stands.
    fn open_task(
        &self,
        task: &'a Task,
        target: &str,
        resume: &Resume,
        base: Option<Oid>,
    ) -> Result<(TaskRun<'a>, Option<Failure>), RunError> {
        // A task stacked on pull requests starts from their changes, which its target lacks.
        let base = match base {
            Some(b) => b,
            None => crate::run::git::land::branch_tip(&self.opts.repo_root, target)?,
        };
        // Wall time the task used before the run was interrupted still counts.
        locked(&self.task_started).insert(
            task.name.clone(),
            Instant::now()
                .checked_sub(resume.elapsed)
                .unwrap_or_else(Instant::now),
        );
        if resume.begun {
            self.emit(
                Some(&task.name),
                None,
                Event::TaskResumed {
                    digest: task.meta.digest.to_string(),
                    base: base.to_string(),
                    target: target.to_string(),
                    attempts: resume.progress.number,
                    epoch: resume.progress.epoch,
                    pending: resume.pending.as_ref().map(|p| p.name().to_string()),
                    elapsed_ms: Some(crate::run::attempt::ms(resume.elapsed)),
                },
            )?;
        } else {
            self.start_task(task, base, target)?;
        }
        let budgets = Budgets {
            wall: task.budget.wall,
            context_tokens: task.budget.context_tokens,
            deadline: self
                .program
                .flow
                .as_ref()
                .and_then(|f| f.budget.wall)
                .map(|w| self.run_started() + w),
        };
        let p: &Progress = &resume.progress;
        let t = TaskRun {
            task,
            target: target.to_string(),
            base,
            budgets,
            epoch: p.epoch,
            first: p.first,
            number: p.number,
            rung: p.rung_idx,
            on_rung: p.rung_used,
            same: p.same,
            rejections: 0,
            spent_tokens: p.spent_tokens,
            spent_usd: p.spent_usd,
            last_branch: p.last_branch.clone(),
            last_attempt: None,
            just_failed: false,
            unseen: false,
            left: policy::Left::default(),
        };
        Ok((t, p.last.clone()))
    }

    /// Asks the policy what `t` does next, and climbs the rungs it says to.
    fn decide(
        &self,
        t: &mut TaskRun<'_>,
        rules: &policy::Rules<'_>,
        last: Option<&Failure>,
    ) -> Result<policy::Decision, RunError> {
        let task = t.task;
        t.rejections = match last {
            Some(f) if f.kind == FailureKind::Review && task.review.is_some() => self
                .ledger()
                .review_rejections(&self.run_id, &task.name, t.epoch)?,
            _ => 0,
        };
        let task_spent = policy::Tally {
            tokens: t.spent_tokens,
            usd_micros: t.spent_usd,
            wall_ms: attempt::ms(self.started(&task.name).elapsed()),
        };
        let standing = policy::Standing {
            attempts: t.number - t.first,
            rung: t.rung,
            on_rung: t.on_rung,
            last,
            same: t.same,
            rejections: t.rejections,
            fresh: t.just_failed && t.unseen,
            task_spent,
            flow_spent: self.flow_tally()?,
        };
        let decision = policy::decide(rules, &standing);
        t.left = policy::left(rules, &standing);
        for &to in &decision.climbed {
            self.emit(
                Some(&task.name),
                None,
                Event::RungClimbed {
                    from: to,
                    to: to + 1,
                    rung: rung_label(&task.ladder[to]),
                },
            )?;
        }
        (t.rung, t.on_rung) = (decision.rung, decision.on_rung);
        Ok(decision)
    }

    /// Carries out the policy's `decision` for `t`, whose last failure is `last`: the agent
    /// for the next attempt, or the task's end (a checkpoint, the brake, a budget, …).
    fn act<'t>(
        &self,
        t: &TaskRun<'t>,
        decision: policy::Decision,
        last: Option<&Failure>,
    ) -> Result<Act<'t>, RunError> {
        let (task, target) = (t.task, t.target.as_str());
        let stuck_here = t.just_failed;
        let ended = match decision.next {
            Next::Attempt => {
                return match task.ladder.get(t.rung) {
                    Some(Rung::Agent { agent, .. }) => Ok(Act::Attempt(agent)),
                    _ => Err(RunError::Config {
                        message: format!(
                            "task `{}` has no agent on rung {}",
                            task.name,
                            t.rung + 1
                        ),
                    }),
                };
            }
            Next::ReviewRounds => {
                let f = last.ok_or_else(|| no_failure(task))?;
                let (id, n, branch) = self.made(t, f)?.ok_or_else(|| no_row(task, f))?;
                let rounds = task.review.as_ref().map_or(0, |r| r.rounds);
                let why = rounds_used(n, rounds, t.rejections, f);
                let (r, path) = self.review_checkpoint(task, target, f, (id, n, &branch), &why)?;
                (r, Some(path))
            }
            Next::Stuck { outcome } => {
                let f = last.ok_or_else(|| no_failure(task))?;
                if stuck_here {
                    self.emit(
                        Some(&task.name),
                        None,
                        Event::TaskStuck {
                            signature: f.signature.clone(),
                            times: t.same,
                        },
                    )?;
                }
                let reason = format!(
                    "stuck: the same failure {} times in a row: {}",
                    t.same, f.criterion
                );
                (
                    self.end_task(t, outcome, reason, None, t.last_branch.clone())?,
                    None,
                )
            }
            Next::Step => {
                let f = last.ok_or_else(|| no_failure(task))?;
                let (id, n, branch) = self.made(t, f)?.ok_or_else(|| no_row(task, f))?;
                let question = format!(
                    "attempt {n} failed: {}; approve to go on with the next attempt, or reject with a reason to add to its prompt",
                    f.criterion
                );
                let r = self.checkpoint(
                    task,
                    (id, n, &branch),
                    CheckpointKind::Step,
                    false,
                    &question,
                )?;
                (r, None)
            }
            // The maker and the reviewer did not agree, and only a person can say which was
            // wrong.
            Next::RungsOutOnReview
                if let Some(f) = last
                    && let Some((id, n, branch)) = self.made(t, f)? =>
            {
                let blockers: Vec<String> = f
                    .blockers
                    .iter()
                    .map(crate::prompt::Blocker::line)
                    .collect();
                let why = format!(
                    "every rung's attempts were used and the reviewer rejected the last, attempt {n}: {}",
                    blockers.join("; ")
                );
                let (r, path) = self.review_checkpoint(task, target, f, (id, n, &branch), &why)?;
                (r, Some(path))
            }
            Next::RungsOutOnReview | Next::RungsOut { .. } => {
                let outcome = match decision.next {
                    Next::RungsOut { outcome } => outcome,
                    _ => Outcome::Rejected,
                };
                let reason = format!("every rung's attempts were used{}", last_reason(last));
                (
                    self.end_task(t, outcome, reason, None, t.last_branch.clone())?,
                    None,
                )
            }
            Next::Human => self.human_rung(t, last)?,
            Next::Budget {
                budget,
                spent,
                limit,
                outcome,
            } => {
                let reason =
                    self.budget_exhausted(&task.name, (budget.name(), spent, limit), last)?;
                (
                    self.end_task(t, outcome, reason, None, t.last_branch.clone())?,
                    None,
                )
            }
        };
        Ok(Act::End(ended))
    }

    /// The ladder reached `human`: a handoff, and a checkpoint on the last attempt. Approving
    /// judges its branch as it now stands (the person may have finished the work there) and
    /// lands it if it passes; rejecting gives one more attempt, told their reason.
    fn human_rung(&self, t: &TaskRun<'_>, last: Option<&Failure>) -> Result<Ended, RunError> {
        let (task, target) = (t.task, t.target.as_str());
        let path = self.stop_for_person(task, target, last, None)?;
        let made = self.ledger().attempt_rows(&self.run_id, &task.name)?;
        if let Some(a) = made
            .iter()
            .filter(|a| a.epoch == t.epoch && a.state != "abandoned")
            .max_by_key(|a| a.number)
        {
            let question = format!(
                "the ladder reached `human` after attempt {n}{}; finish the work on branch `{branch}` and approve to have it checked (seal, gates, review) and landed, or reject with a reason for one more attempt (see {})",
                last_reason(last),
                path.display(),
                n = a.number,
                branch = a.branch,
            );
            let r = self.checkpoint(
                task,
                (a.id, a.number, &a.branch),
                CheckpointKind::Human,
                false,
                &question,
            )?;
            return Ok((r, Some(path)));
        }
        let reason = format!(
            "the ladder reached `human`: see {}{}",
            path.display(),
            last_reason(last)
        );
        let r = self.end_task(t, Outcome::Human, reason, None, t.last_branch.clone())?;
        Ok((r, Some(path)))
    }

    /// The attempt that made `last`, as `(ledger id, number, branch)`.
    fn made(
        &self,
        t: &TaskRun<'_>,
        last: &Failure,
    ) -> Result<Option<(i64, u32, String)>, RunError> {
        Ok(match &t.last_attempt {
            Some(a) => Some(a.clone()),
            None => self
                .last_attempt_row(t.task, t.epoch, last.attempt)?
                .map(|a| (a.id, a.number, a.branch)),
        })
    }

    /// Goes on with an attempt a resume found half done: judged from its seal check on, or
    /// passed and waiting to land. Also whether it was `settled` (already judged passed) and
    /// whether it must still be put to a person (`ask`: unless one approved it).
    async fn pending_attempt<'t>(
        &self,
        t: &TaskRun<'t>,
        pending: Pending,
        last: Option<&'t Failure>,
    ) -> Result<(AttemptSpec<'t>, AttemptRecord, bool, bool), RunError> {
        let task = t.task;
        let row = pending.row();
        let agent = match task.ladder.get(row.rung.saturating_sub(1) as usize) {
            Some(Rung::Agent { agent, .. }) => agent,
            _ => {
                return Err(RunError::Config {
                    message: format!(
                        "attempt {} of task `{}` ran on rung {}, which is not an agent in the definition now",
                        row.number, task.name, row.rung
                    ),
                });
            }
        };
        let spec = AttemptSpec {
            task,
            number: row.number,
            rung: row.rung,
            agent,
            base: oid(&row.base)?,
            previous: last,
            epoch: t.epoch,
            left: t.left,
            caps: caps(t),
        };
        let head = oid(row.head.as_deref().unwrap_or_default())?;
        Ok(match pending {
            Pending::Judge(row) => {
                let judged = attempt::Judged {
                    ledger_id: row.id,
                    branch: row.branch.clone(),
                    head,
                    exit_code: row.exit_code,
                    timed_out: row.timed_out.unwrap_or(false),
                    retries: row.rate_limited,
                    // Already counted: the restored spending includes it.
                    usage: crate::run::judge::adapter::Usage::default(),
                    lease: None,
                };
                let record = attempt::judge(self, &spec, &t.budgets, judged).await?;
                (spec, record, false, true)
            }
            Pending::Land(row, approved) => {
                let record = AttemptRecord {
                    ledger_id: row.id,
                    branch: row.branch.clone(),
                    head: Some(head),
                    usage: crate::run::judge::adapter::Usage::default(),
                    end: AttemptEnd::Passed { head },
                };
                (spec, record, true, !approved)
            }
        })
    }

    /// Counts what attempt `number` (`record`) spent, in the task's and the run's figures.
    fn spend(
        &self,
        t: &mut TaskRun<'_>,
        number: u32,
        record: &AttemptRecord,
    ) -> Result<(), RunError> {
        let (tokens, usd) = (record.usage.tokens(), record.usage.usd_micros.unwrap_or(0));
        let key = (t.task.name.clone(), number);
        locked(&self.spending_written).remove(&key);
        self.purse
            .settle(&key.0, number, crate::run::meter::Spend::of(&record.usage));
        t.spent_tokens = t.spent_tokens.saturating_add(tokens);
        t.spent_usd = t.spent_usd.saturating_add(usd);
        {
            let mut state = self.state();
            state.budget_spent.attempts += 1;
            state.budget_spent.tokens += tokens;
            state.budget_spent.usd_micros += usd;
        }
        let wall = attempt::ms(self.started(&t.task.name).elapsed());
        let (spent_tokens, spent_usd) = (t.spent_tokens, t.spent_usd);
        self.task_state(&t.task.name, |s| {
            s.spent.attempts = number;
            s.spent.tokens = spent_tokens;
            s.spent.usd_micros = spent_usd;
            s.spent.wall_ms = wall;
        });
        t.last_branch = Some(record.branch.clone());
        if self.hears_budgets {
            let spent = policy::Tally {
                tokens: spent_tokens,
                usd_micros: spent_usd,
                wall_ms: wall,
            };
            let flow = self.flow_tally()?;
            self.budget_thresholds(t.task, &spent, Some(&flow))?;
        }
        Ok(())
    }

    /// A passed attempt (`(ledger id, branch)`, its change at `head`): put to a person first if
    /// the mode says so, then landed. The task's end, or the landing's failure (a conflict the
    /// next attempt must resolve, on the new base).
    async fn passed(
        &self,
        t: &mut TaskRun<'a>,
        spec: &AttemptSpec<'_>,
        (id, branch): (i64, String),
        head: Oid,
        settled: bool,
        ask: bool,
    ) -> Result<Result<Ended, Failure>, RunError> {
        let (task, number) = (t.task, spec.number);
        let target = t.target.clone();
        if !settled {
            self.emit(
                Some(&task.name),
                Some(number),
                Event::AttemptPassed {
                    head: head.to_string(),
                },
            )?;
            self.finish_attempt(id, None)?;
            crate::run::failpoint("attempt-passed");
        }
        // Also after a crash between the attempt's end and its checkpoint: a change lands in
        // batch or step mode only once a person said so.
        if let Some(kind) = policy::on_pass(self.opts.mode, !ask) {
            let question = format!(
                "attempt {number} passed{}; approve to land it on `{target}`, or reject with a reason for another attempt",
                if task.review.is_some() {
                    " seal, gates and review"
                } else {
                    " seal and gates"
                }
            );
            let r = self.checkpoint(task, (id, number, &branch), kind, true, &question)?;
            return Ok(Ok((r, None)));
        }
        // While its change waits to land the task holds its scope, not a slot of `parallel`:
        // mvk's landing work is not an agent's or a gate's.
        locked(&self.slots).landing.insert(task.name.clone());
        self.slots_changed.notify_waiters();
        let landing = self.land(task, &target, spec, (id, head), false).await?;
        if !matches!(landing, Landing::Retry(..)) {
            locked(&self.slots).landing.remove(&task.name);
        }
        Ok(Ok(match landing {
            Landing::Landed(commit) => {
                let pr = (task.merge.strategy == crate::ir::Strategy::Pr)
                    .then(|| self.ledger().pull_requests(&self.run_id))
                    .transpose()?
                    .and_then(|rows| rows.into_iter().find(|r| r.attempt_id == id));
                let reason = match (commit, pr) {
                    (Some(_), Some(pr)) => format!(
                        "accepted on attempt {number}; pull request {} (branch `{}` into `{}`)",
                        pr.url.unwrap_or_default(),
                        pr.branch,
                        pr.base_branch
                    ),
                    (Some(c), None) => format!(
                        "accepted on attempt {number}; landed on `{target}` as {}",
                        short(c)
                    ),
                    (None, _) => format!(
                        "accepted on attempt {number}; the change was empty, nothing to land"
                    ),
                };
                let r = self.end_task(t, Outcome::Accepted, reason, commit, Some(branch))?;
                (r, None)
            }
            Landing::Retry(f, new_base) => {
                t.base = new_base;
                // Recorded before it waits for a slot: a crash meanwhile resumes from the
                // failure, not by landing the change again.
                self.fail(task, number, &f)?;
                self.rejoin(&task.name).await;
                return Ok(Err(f));
            }
            Landing::Rejected(outcome, reason) => {
                (self.end_task(t, outcome, reason, None, Some(branch))?, None)
            }
            Landing::Human(reason) => {
                self.history()
                    .push((task.name.clone(), number, branch.clone(), None));
                let path = self.stop_for_person(task, &target, None, Some(&reason))?;
                let r = self.end_task(t, Outcome::Human, reason, None, Some(branch))?;
                (r, Some(path))
            }
            Landing::Wait(question) => {
                let r = self.checkpoint(
                    task,
                    (id, number, &branch),
                    CheckpointKind::Landing,
                    true,
                    &question,
                )?;
                (r, None)
            }
        }))
    }

    /// Ends task `t` with `outcome` (`reason`; `merged`, the commit it landed; `branch`, where
    /// its last work is): its ledger row, `task.finished`, the status files, and its report
    /// with the attempts and spending so far.
    fn end_task(
        &self,
        t: &TaskRun<'_>,
        outcome: Outcome,
        reason: String,
        merged: Option<Oid>,
        branch: Option<String>,
    ) -> Result<TaskReport, RunError> {
        let task = t.task;
        let merged = merged.map(|m| m.to_string());
        self.ledger()
            .finish_task(&self.run_id, &task.name, outcome.name(), merged.as_deref())?;
        self.emit(
            Some(&task.name),
            None,
            Event::TaskFinished {
                outcome: outcome.name().to_string(),
                reason: reason.clone(),
                merged: merged.clone(),
            },
        )?;
        self.task_state(&task.name, |s| {
            s.state = outcome.name().into();
            s.note = Some(reason.clone());
            s.merged = merged.clone();
        });
        if let Some(m) = &merged {
            self.state().last_green_commit = Some(m.clone());
        }
        if outcome == Outcome::Accepted {
            self.state().open_failures.retain(|o| o.task != task.name);
        }
        self.write_state()?;
        Ok(TaskReport {
            name: task.name.clone(),
            outcome,
            attempts: t.number,
            merged,
            branch,
            usd: t.spent_usd as f64 / 1e6,
            tokens: t.spent_tokens,
            reason,
        })
    }
}

/// What task `t` may still spend of its own `tokens` and `usd`, which its next attempt's agent
/// is stopped at.
fn caps(t: &TaskRun<'_>) -> TaskCaps {
    TaskCaps {
        spent: Spend {
            tokens: t.spent_tokens,
            usd_micros: t.spent_usd,
        },
        tokens: t.task.budget.tokens,
        usd_micros: t.task.budget.usd_micros,
    }
}

/// The task's policy stopped on its last failure, and it has none: the ledger and the
/// definition disagree.
fn no_failure(task: &Task) -> RunError {
    RunError::Config {
        message: format!(
            "task `{}` stopped on a failure it has no record of",
            task.name
        ),
    }
}

/// The ledger has no attempt that made `f`, which a person must be asked about.
fn no_row(task: &Task, f: &Failure) -> RunError {
    RunError::Config {
        message: format!(
            "the ledger has no attempt {} of task `{}` to ask a person about",
            f.attempt, task.name
        ),
    }
}
