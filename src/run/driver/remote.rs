//! Attempts made in other processes in, the run's ledger rows, trail and landings out: what an
//! executor that hands attempts to workers (`run::temporal`) needs of a [`Runner`]. The run is
//! opened, recorded and ended here exactly as `apply` does it, and changes land through the same
//! merge queue ([`Runner::land`]), so `mvk status`, `log` and `stats` read such a run as they
//! read a local one.

use std::collections::BTreeMap;

use git2::Oid;

use super::landing::{Landing, StoredAnswer};
use super::open::{Opened, Reopened, open_apply, record_resume, reopen};
use super::{
    Observer, Outcome, ResumeFrom, RunError, RunOptions, RunReport, Runner, TaskReport,
    last_reason, locked, rung_label,
};
use crate::ir::{Program, Rung, Task};
use crate::ledger;
use crate::run::attempt::{AttemptSpec, Failure, FailureKind};
use crate::run::event::Event;
use crate::run::git::land;
use crate::run::host::Host;

/// An attempt a worker made, as its result reached the coordinator.
#[derive(Debug, Clone)]
pub(crate) struct RemoteAttempt {
    pub(crate) number: u32,
    /// The 1-based rung whose agent made it.
    pub(crate) rung: u32,
    pub(crate) base: Oid,
    /// The commit holding the change, in the coordinator's repository (pushed there).
    pub(crate) head: Option<Oid>,
    /// Where the change is: the ref the worker pushed it to.
    pub(crate) branch: String,
    /// The worker that made it (its Temporal identity).
    pub(crate) worker: String,
    /// `None` when seal, gates and review passed.
    pub(crate) failure: Option<Failure>,
    pub(crate) duration_ms: u64,
    pub(crate) gates: Vec<crate::run::attempt_result::GateResult>,
    /// What its agent (and reviewer) spent.
    pub(crate) usage: crate::run::judge::adapter::Usage,
}

/// How landing a remote attempt ended.
#[derive(Debug, Clone)]
#[allow(clippy::enum_variant_names)] // `Landed::Landed`, as the workflow's answer names it
pub(crate) enum Landed {
    Landed(Option<Oid>),
    /// Not landed (a conflict, or its gates fail on the merged result): another attempt from
    /// this base, told this failure.
    Retry(Failure, Oid),
    /// The task ends with this outcome and reason.
    Ended(Outcome, String),
}

impl StoredAnswer {
    /// The answer kept as `json` in the ledger, again; `None` when this mvk cannot read it back.
    fn read(json: &str) -> Option<Landed> {
        serde_json::from_str::<StoredAnswer>(json)
            .ok()
            .and_then(|a| a.landed())
    }

    /// The answer again; `None` when the ledger holds something this mvk cannot read back.
    fn landed(&self) -> Option<Landed> {
        Some(match self {
            StoredAnswer::Landed { commit } => Landed::Landed(match commit {
                Some(c) => Some(Oid::from_str(c).ok()?),
                None => None,
            }),
            StoredAnswer::Retry { failure, base } => {
                Landed::Retry(failure.clone(), Oid::from_str(base).ok()?)
            }
            StoredAnswer::Ended { outcome, reason } => {
                Landed::Ended(Outcome::from_name(outcome)?, reason.clone())
            }
        })
    }
}

impl From<Landing> for Landed {
    /// How the run's merge queue settled a change, as the workflow is told.
    fn from(landing: Landing) -> Landed {
        match landing {
            Landing::Landed(commit) => Landed::Landed(commit),
            Landing::Retry(f, base) => Landed::Retry(f, base),
            Landing::Rejected(outcome, reason) => Landed::Ended(outcome, reason),
            Landing::Human(reason) => Landed::Ended(Outcome::Human, reason),
            // This executor has no checkpoint to approve: the person lands the branch.
            Landing::Wait(reason) => Landed::Ended(
                Outcome::Human,
                format!(
                    "{reason} (under the Temporal executor there is no checkpoint: once the lock is gone, land the branch yourself, or run the task again with `--executor local`)"
                ),
            ),
        }
    }
}

/// A run whose attempts are made elsewhere: the coordinator's side of it.
pub(crate) struct Coordinator<'a> {
    runner: Runner<'a>,
    /// The tasks to run, in plan order, with the branch each lands on.
    order: Vec<(usize, String)>,
    /// Tasks whose start is recorded, and the base it recorded.
    begun: std::sync::Mutex<BTreeMap<String, Oid>>,
    /// Per task, the bases this coordinator handed out (its start, each landing that sent it
    /// back) and how its landing ended: what the workflow asks is checked against them, since
    /// an activity's answer can come from anyone who reaches the server (review r9e, 1).
    handed: std::sync::Mutex<BTreeMap<String, Handed>>,
    /// The reports of tasks that had ended before the run was resumed.
    ended_before: BTreeMap<String, TaskReport>,
    /// Whether it took over an interrupted run.
    resumed: bool,
    /// Held while a task's change lands: a landing asked again while the first still runs (a
    /// heartbeat that came too late) waits for it, then finds its merge.
    landing: std::sync::Mutex<BTreeMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

/// What the coordinator told one task's workflow.
#[derive(Default)]
struct Handed {
    bases: std::collections::BTreeSet<Oid>,
    /// `Some` once a landing of it ended landed: the commit (`None` for an empty change).
    landed: Option<Option<Oid>>,
}

impl<'a> Coordinator<'a> {
    /// Opens the run as `apply` does (ledger row, trail, `run.started`, with `executor` and,
    /// under its name, `detail`: what a resume needs to find the executor again).
    pub(crate) fn open(
        program: &'a Program,
        opts: &'a RunOptions,
        observer: &'a dyn Observer,
        executor: &str,
        detail: serde_json::Value,
    ) -> Result<Coordinator<'a>, RunError> {
        // A change made on a worker is gated again here before it lands on a branch; a pull
        // request's landing has no such step yet, and would open one on a verdict that came
        // over the network unchecked.
        let selected = super::open::select(program, opts)?;
        if let Some(t) = selected
            .iter()
            .map(|&i| &program.tasks[i])
            .find(|t| t.merge.strategy == crate::ir::Strategy::Pr)
        {
            return Err(RunError::Refused {
                message: format!(
                    "task `{}` lands as a pull request (merge strategy=\"pr\"), which the {executor} executor does not do yet: run it with the local executor, or give it another strategy",
                    t.name
                ),
            });
        }
        let Opened {
            runner,
            selected,
            targets,
            mut started,
        } = open_apply(program, opts, observer, Some(executor))?;
        // Where the executor's work lives, under its name, for a resume to find it again.
        if let Event::RunStarted { temporal, .. } = &mut started
            && executor == "temporal"
        {
            *temporal = Some(detail);
        }
        runner.emit(None, None, started)?;
        runner.write_state()?;
        Ok(Coordinator::new(runner, &selected, &targets, false))
    }

    /// A coordinator of `runner`'s run for the `selected` tasks and their `targets`, nothing
    /// begun or handed out yet.
    fn new(
        runner: Runner<'a>,
        selected: &[usize],
        targets: &BTreeMap<usize, String>,
        resumed: bool,
    ) -> Coordinator<'a> {
        let order = selected
            .iter()
            .map(|&i| (i, targets.get(&i).cloned().unwrap_or_default()))
            .collect();
        Coordinator {
            runner,
            order,
            begun: std::sync::Mutex::new(BTreeMap::new()),
            handed: std::sync::Mutex::new(BTreeMap::new()),
            ended_before: BTreeMap::new(),
            resumed,
            landing: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Opens the interrupted run `from.run` again, made by `executor`'s workers: what each task
    /// had begun, been handed, landed or ended is restored from the ledger (see
    /// [`crate::run::driver::resume::restore_remote`]), so that the workflow's requests, asked again or
    /// for the first time, are answered as the dead coordinator would have answered them.
    pub(crate) fn reopen(
        program: &'a Program,
        opts: &'a RunOptions,
        observer: &'a dyn Observer,
        from: &ResumeFrom,
        executor: &str,
    ) -> Result<Coordinator<'a>, RunError> {
        let Reopened {
            runner,
            selected,
            targets,
            began,
        } = reopen(program, opts, observer, from)?;
        if began.executor.as_deref() != Some(executor) {
            return Err(RunError::Config {
                message: format!(
                    "run `{}` was not made by `--executor {executor}`",
                    opts.run_id
                ),
            });
        }
        let restored = crate::run::driver::resume::restore_remote(&runner, &selected)?;
        // Counted again: what the abandoned half records had spent is no longer in the ledger.
        runner.restore_spent()?;
        record_resume(&runner, program, from)?;
        let mut coord = Coordinator::new(runner, &selected, &targets, true);
        for (name, r) in restored {
            if let Some(report) = r.finished {
                coord.runner.task_state(&name, |s| {
                    s.state = report.outcome.name().into();
                    s.merged = report.merged.clone();
                });
                coord.ended_before.insert(name, report);
                continue;
            }
            if let Some(base) = r.base {
                locked(&coord.begun).insert(name.clone(), base);
                locked(&coord.runner.task_started).insert(name.clone(), std::time::Instant::now());
                // What it spent so far, for `loop_state.json` (the run's total is restored).
                let spent = coord.runner.ledger().spent(&opts.run_id, Some(&name))?;
                coord.runner.task_state(&name, |s| {
                    s.state = "running".into();
                    s.spent.attempts = spent.attempts;
                    s.spent.tokens = spent.input_tokens.saturating_add(spent.output_tokens);
                    s.spent.usd_micros = spent.usd_micros;
                });
            }
            locked(&coord.handed).insert(
                name.clone(),
                Handed {
                    bases: r.bases,
                    landed: r.landed,
                },
            );
            // What its landings' answers handed it: the base a change sent back starts from,
            // the commit (or nothing, for an empty change) one landed.
            let answers = coord.runner.ledger().landing_answers(&opts.run_id, &name)?;
            for (_, json) in answers {
                if let Some(landed) = StoredAnswer::read(&json) {
                    coord.handed_answer(&name, &landed);
                }
            }
        }
        coord.runner.write_state()?;
        Ok(coord)
    }

    /// Whether this coordinator took over an interrupted run (`mvk resume`).
    pub(crate) fn resumed(&self) -> bool {
        self.resumed
    }

    /// The reports of the tasks that had ended before the run was resumed.
    pub(crate) fn ended_before(&self) -> &BTreeMap<String, TaskReport> {
        &self.ended_before
    }

    /// The report of task `name` when the ledger says it ended already: an end asked again
    /// (the workflow's retry of a cut-short answer) is not recorded twice.
    pub(crate) fn ended(&self, name: &str) -> Result<Option<TaskReport>, RunError> {
        if let Some(r) = self.ended_before.get(name) {
            return Ok(Some(r.clone()));
        }
        let run = &self.runner.run_id;
        let row = self
            .runner
            .ledger()
            .task_rows(run)?
            .into_iter()
            .find(|t| t.name == name && t.state == ledger::TaskRowState::Finished);
        let Some(row) = row else {
            return Ok(None);
        };
        let attempts = self.runner.ledger().attempt_rows(run, name)?;
        Ok(Some(crate::run::driver::resume::report_of(
            &self.runner,
            &row,
            &attempts,
        )?))
    }

    pub(crate) fn runner(&self) -> &Runner<'a> {
        &self.runner
    }

    /// The tasks to run in plan order, each with its target branch.
    pub(crate) fn tasks(&self) -> impl Iterator<Item = (&'a Task, &str)> + '_ {
        let program = self.runner.program;
        self.order
            .iter()
            .map(move |(i, target)| (&program.tasks[*i], target.as_str()))
    }

    fn task(&self, name: &str) -> Result<(&'a Task, String), RunError> {
        self.tasks()
            .find(|(t, _)| t.name == name)
            .map(|(t, target)| (t, target.to_string()))
            .ok_or_else(|| RunError::Refused {
                message: format!("the run has no task `{name}`"),
            })
    }

    /// Starts `name` from its target's tip and says which commit that is; asked again (a
    /// repeated request), the base recorded the first time.
    pub(crate) fn begin_task(&self, name: &str) -> Result<Oid, RunError> {
        if let Some(base) = locked(&self.begun).get(name) {
            return Ok(*base);
        }
        let (task, target) = self.task(name)?;
        let base = land::branch_tip(&self.runner.opts.repo_root, &target)?;
        locked(&self.runner.task_started).insert(name.to_string(), std::time::Instant::now());
        self.runner.start_task(task, base, &target)?;
        self.runner.task_state(name, |s| s.state = "running".into());
        self.runner.write_state()?;
        locked(&self.begun).insert(name.to_string(), base);
        self.hand_base(name, base);
        Ok(base)
    }

    fn hand_base(&self, name: &str, base: Oid) {
        locked(&self.handed)
            .entry(name.to_string())
            .or_default()
            .bases
            .insert(base);
    }

    /// Refuses what no honest workflow of this run asks (a forged activity answer earlier in
    /// it): a base this coordinator never handed task `name`.
    fn check_base(&self, name: &str, base: Oid) -> Result<(), RunError> {
        let known = locked(&self.handed)
            .get(name)
            .is_some_and(|h| h.bases.contains(&base));
        if known {
            return Ok(());
        }
        Err(RunError::Refused {
            message: format!(
                "refused: task `{name}` was never given base {base} by this coordinator (an answer to one of the run's activities did not come from mvk)"
            ),
        })
    }

    /// Refuses a change said to be made from `base` whose commit `head` is not in this
    /// repository, or does not descend from `base` (a worker pushes it before it answers).
    fn check_head(&self, name: &str, base: Oid, head: Oid) -> Result<(), RunError> {
        let repo =
            git2::Repository::open(self.runner.repo_root()).map_err(|source| RunError::Git {
                action: "open the repository".into(),
                source,
            })?;
        let known = repo.find_commit(head).is_ok()
            && (head == base || repo.graph_descendant_of(head, base).unwrap_or(false));
        if known {
            return Ok(());
        }
        Err(RunError::Refused {
            message: format!(
                "refused: the change of task `{name}` is said to be commit {head}, which this repository does not hold as a descendant of its base {base}"
            ),
        })
    }

    /// Refuses an end of task `name` as landed that its landing did not say.
    pub(crate) fn check_landed(&self, name: &str, commit: Option<Oid>) -> Result<(), RunError> {
        let said = locked(&self.handed).get(name).and_then(|h| h.landed);
        if said == Some(commit) {
            return Ok(());
        }
        Err(RunError::Refused {
            message: format!(
                "refused: task `{name}` is said to have landed ({}), but its landing here did not end so",
                commit.map_or_else(|| "nothing".to_string(), |c| c.to_string())
            ),
        })
    }

    /// Records an attempt `name` made on a worker: its row (agent, head, verdict), its gates and
    /// events. Recorded once: asked again for the same number, the row already there.
    pub(crate) fn record_attempt(&self, name: &str, a: &RemoteAttempt) -> Result<i64, RunError> {
        let (task, _) = self.task(name)?;
        self.check_base(name, a.base)?;
        if let Some(head) = a.head {
            self.check_head(name, a.base, head)?;
        }
        if crate::run::failing("coordinator-record-fails") {
            return Err(RunError::Io {
                action: "record a worker's attempt (failpoint `coordinator-record-fails`)",
                path: self.runner.run_dir().to_path_buf(),
                source: std::io::Error::other("failing as asked"),
            });
        }
        let run = &self.runner.run_id;
        if let Some(row) = self
            .runner
            .ledger()
            .attempt_rows(run, name)?
            .into_iter()
            .find(|r| r.number == a.number && r.state == "finished")
        {
            return Ok(row.id);
        }
        let agent = agent_on(task, a.rung)?.label();
        let worktree = std::path::PathBuf::from(format!("worker:{}", a.worker));
        let id = self.runner.ledger_begin_attempt(
            name, a.number, a.rung, &agent, &a.branch, &worktree, a.base, 0,
        )?;
        self.runner.emit(
            Some(name),
            Some(a.number),
            Event::AttemptStarted {
                rung: a.rung,
                agent,
                branch: a.branch.clone(),
                worktree: Some(worktree.display().to_string()),
                base: a.base.to_string(),
                worker: Some(a.worker.clone()),
                worktree_ms: None,
                from: None,
            },
        )?;
        self.runner.ledger_agent_done(
            id,
            None,
            false,
            std::time::Duration::from_millis(a.duration_ms),
            a.head,
            &a.usage,
            0,
        )?;
        crate::run::failpoint("coordinator-recording");
        for (ordinal, g) in a.gates.iter().enumerate() {
            let counts = g
                .counts
                .map(|c| (c.executed, c.passed, c.failed, c.skipped));
            let log = format!("worker:{}", a.worker);
            self.runner.ledger().record_gate(
                id,
                &ledger::GateRow {
                    phase: "gate",
                    ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
                    name: &g.name,
                    verdict: &g.verdict,
                    exit_code: g.exit_code,
                    counts,
                    evidence: &g.evidence,
                    reason: &g.reason,
                    log: &log,
                    duration_ms: 0,
                },
            )?;
            self.runner.emit(
                Some(name),
                Some(a.number),
                Event::GateFinished {
                    gate: g.name.clone(),
                    phase: "gate".to_string(),
                    verdict: g.verdict.clone(),
                    exit_code: g.exit_code,
                    counts: g.counts.map(|c| crate::run::judge::evidence::Counts {
                        executed: c.executed,
                        passed: c.passed,
                        failed: c.failed,
                        skipped: c.skipped,
                    }),
                    reason: g.reason.clone(),
                    log,
                },
            )?;
        }
        self.runner.finish_attempt(id, a.failure.as_ref())?;
        match (&a.failure, a.head) {
            (None, Some(head)) => self.runner.emit(
                Some(name),
                Some(a.number),
                Event::AttemptPassed {
                    head: head.to_string(),
                },
            )?,
            (Some(f), _) => self.runner.fail(task, a.number, f)?,
            (None, None) => {}
        }
        let (tokens, usd) = (a.usage.tokens(), a.usage.usd_micros.unwrap_or(0));
        {
            let mut state = self.runner.state();
            state.budget_spent.attempts += 1;
            state.budget_spent.tokens += tokens;
            state.budget_spent.usd_micros += usd;
        }
        self.runner.task_state(name, |s| {
            s.attempt = a.number;
            s.spent.attempts = a.number;
            s.spent.tokens = s.spent.tokens.saturating_add(tokens);
            s.spent.usd_micros = s.spent.usd_micros.saturating_add(usd);
        });
        self.runner.write_state()?;
        Ok(id)
    }

    /// Lands the passed attempt `attempt_id` (`head`, made from `base`) through the run's merge
    /// queue. A landing asked for again finds its merge in the ledger and is not done twice.
    pub(crate) async fn land(
        &self,
        name: &str,
        (number, rung): (u32, u32),
        base: Oid,
        attempt_id: i64,
        head: Oid,
    ) -> Result<Landed, RunError> {
        let (task, target) = self.task(name)?;
        self.check_base(name, base)?;
        let turn = locked(&self.landing)
            .entry(name.to_string())
            .or_default()
            .clone();
        let _turn = turn.lock().await;
        // Its gates run here beside other tasks' (a batch's side by side): while it lands, the
        // sweep after another task's gate leaves its escapees to its own sweep, as locally.
        let _live = crate::run::exec::reaper::live(&self.runner.run_id, name);
        // The attempt the workflow names must be the one recorded here, with this head.
        let recorded = self
            .runner
            .ledger()
            .attempt_rows(&self.runner.run_id, name)?
            .into_iter()
            .any(|r| r.id == attempt_id && r.number == number && r.head == Some(head.to_string()));
        if !recorded {
            return Err(RunError::Refused {
                message: format!(
                    "refused: attempt {number} of task `{name}` with head {head} is not the one recorded (id {attempt_id})"
                ),
            });
        }
        // Asked before (a late heartbeat, a coordinator that died before its answer arrived):
        // the answer it got then, whatever it was; a rejection stands.
        let answered = self
            .runner
            .ledger()
            .landing_answers(&self.runner.run_id, name)?
            .into_iter()
            .find(|(id, _)| *id == attempt_id);
        if let Some((_, json)) = answered {
            let landed = StoredAnswer::read(&json).ok_or_else(|| RunError::Config {
                    message: format!(
                        "the ledger's answer to the landing of attempt {number} of task `{name}` cannot be read: {json}"
                    ),
                })?;
            self.handed_answer(name, &landed);
            return Ok(landed);
        }
        let done = self
            .runner
            .ledger()
            .merge_rows(&self.runner.run_id, name)?
            .into_iter()
            .find(|m| m.attempt_id == attempt_id && m.state == "done");
        if let Some(m) = done {
            let commit = m.commit.as_deref().and_then(|c| Oid::from_str(c).ok());
            return self.answer_landing(name, attempt_id, Landing::Landed(commit));
        }
        let agent = agent_on(task, rung)?;
        let spec = AttemptSpec {
            task,
            number,
            rung,
            agent,
            base,
            previous: None,
            epoch: 0,
            left: crate::run::policy::Left::default(),
            caps: crate::run::meter::TaskCaps::default(),
        };
        // The worker's verdict came over the network: an agent there that reaches the Temporal
        // server could have sent it in the worker's place (review r9d, F0). What lands is
        // judged here: the seal from base to head, then the task's gates on a clean checkout.
        if let Some(f) = crate::run::attempt::check_seal(&self.runner, task, &spec, head).await? {
            self.runner.fail(task, number, &f)?;
            return self.answer_landing(name, attempt_id, Landing::Retry(f, base));
        }
        let landing = self
            .runner
            .land(task, &target, &spec, (attempt_id, head), true)
            .await?;
        if let Landing::Retry(f, _) = &landing {
            self.runner.fail(task, number, f)?;
        }
        self.answer_landing(name, attempt_id, landing)
    }

    /// Records `landing` as the answer to the landing of `attempt_id`, before it is given (the
    /// merge queue may have recorded it already: the first stands), and what it hands the task.
    fn answer_landing(
        &self,
        name: &str,
        attempt_id: i64,
        landing: Landing,
    ) -> Result<Landed, RunError> {
        let json =
            serde_json::to_string(&StoredAnswer::of(&landing)).map_err(|e| RunError::Config {
                message: format!("cannot encode a landing's answer: {e}"),
            })?;
        self.runner
            .ledger()
            .record_landing_answer(attempt_id, &json)?;
        crate::run::failpoint("coordinator-landing-answered");
        let landed = Landed::from(landing);
        self.handed_answer(name, &landed);
        Ok(landed)
    }

    /// What a landing's answer hands task `name`: the commit it landed, or a base to start from.
    fn handed_answer(&self, name: &str, landed: &Landed) {
        match landed {
            Landed::Landed(commit) => {
                locked(&self.handed)
                    .entry(name.to_string())
                    .or_default()
                    .landed = Some(*commit);
            }
            Landed::Retry(_, base) => self.hand_base(name, *base),
            Landed::Ended(..) => {}
        }
    }

    /// Records that task `name` climbed its ladder to the 0-based rung `to`, as the local driver
    /// records it (`rung.climbed`); the rung's label.
    pub(crate) fn climbed(&self, name: &str, to: usize) -> Result<String, RunError> {
        let (task, _) = self.task(name)?;
        let rung = task.ladder.get(to).ok_or_else(|| RunError::Refused {
            message: format!("task `{name}` has no rung {}", to + 1),
        })?;
        let label = rung_label(rung);
        self.runner.emit(
            Some(name),
            None,
            Event::RungClimbed {
                from: to,
                to: to + 1,
                rung: label.clone(),
            },
        )?;
        Ok(label)
    }

    /// Ends task `name` whose every rung's attempts were used (`used` in all), as the local
    /// driver ends it.
    pub(crate) fn out_of_rungs(
        &self,
        name: &str,
        used: u32,
        last: Option<&Failure>,
    ) -> Result<TaskReport, RunError> {
        let outcome = if last.is_some_and(|f| f.kind == FailureKind::Unknown) {
            Outcome::Unknown
        } else {
            Outcome::Rejected
        };
        let reason = format!("every rung's attempts were used{}", last_reason(last));
        self.end_task(name, outcome, &reason, None, used)
    }

    /// Ends task `name` with `outcome`: its row, `task.finished`, the status files.
    pub(crate) fn end_task(
        &self,
        name: &str,
        outcome: Outcome,
        reason: &str,
        merged: Option<Oid>,
        attempts: u32,
    ) -> Result<TaskReport, RunError> {
        crate::run::failpoint("coordinator-ending");
        let merged = merged.map(|m| m.to_string());
        let run = &self.runner.run_id;
        self.runner
            .ledger()
            .finish_task(run, name, outcome.name(), merged.as_deref())?;
        self.runner.emit(
            Some(name),
            None,
            Event::TaskFinished {
                outcome: outcome.name().to_string(),
                reason: reason.to_string(),
                merged: merged.clone(),
            },
        )?;
        self.runner.task_state(name, |s| {
            s.state = outcome.name().into();
            s.note = Some(reason.to_string());
            s.merged = merged.clone();
        });
        if let Some(m) = &merged {
            self.runner.state().last_green_commit = Some(m.clone());
        }
        self.runner.write_state()?;
        let branch = self
            .runner
            .ledger()
            .attempt_rows(run, name)?
            .into_iter()
            .next_back()
            .map(|a| a.branch);
        let spent = self.runner.ledger().spent(run, Some(name))?;
        Ok(TaskReport {
            name: name.to_string(),
            outcome,
            attempts,
            merged,
            branch,
            usd: spent.usd_micros as f64 / 1e6,
            tokens: spent.input_tokens.saturating_add(spent.output_tokens),
            reason: reason.to_string(),
        })
    }

    /// Ends task `name` whose `used` attempts reached its `iterations` budget, as the local
    /// driver ends it: `budget.exhausted`, then the outcome its last failure says.
    pub(crate) fn out_of_iterations(
        &self,
        name: &str,
        used: u32,
        last: Option<&Failure>,
    ) -> Result<TaskReport, RunError> {
        let (task, _) = self.task(name)?;
        let limit = u64::from(task.budget.iterations);
        self.out_of_budget(name, ("iterations", u64::from(used), limit), used, last)
    }

    /// Ends task `name` whose budget `which` (`iterations`, `tokens`, `usd`, `wall`, or the
    /// flow's: `flow usd`, …) ran out, `spent` of `limit`, after `used` attempts.
    pub(crate) fn out_of_budget(
        &self,
        name: &str,
        (which, spent, limit): (&str, u64, u64),
        used: u32,
        last: Option<&Failure>,
    ) -> Result<TaskReport, RunError> {
        self.task(name)?;
        let reason = self
            .runner
            .budget_exhausted(name, (which, spent, limit), last)?;
        let outcome = crate::run::policy::budget_outcome(last);
        self.end_task(name, outcome, &reason, None, used)
    }

    /// Ends task `name` stopped by the same-failure brake after `same` equal failures.
    pub(crate) fn stuck(
        &self,
        name: &str,
        same: u32,
        last: &Failure,
        attempts: u32,
    ) -> Result<TaskReport, RunError> {
        let reason = format!(
            "stuck: the same failure {same} times in a row: {}",
            last.criterion
        );
        self.end_task(
            name,
            crate::run::policy::stuck_outcome(last.kind),
            &reason,
            None,
            attempts,
        )
    }

    /// Ends task `name` unrun: what it starts after (`failed`) did not succeed.
    pub(crate) fn skip(&self, name: &str, failed: &[String]) -> Result<TaskReport, RunError> {
        let (task, target) = self.task(name)?;
        // Begun by a skip cut short before it ended the task: not begun twice.
        let begun = self
            .runner
            .ledger()
            .task_rows(&self.runner.run_id)?
            .iter()
            .any(|t| t.name == name);
        let restore = begun.then(|| {
            Box::new(super::Resume {
                begun: true,
                ..super::Resume::default()
            })
        });
        self.runner.skip(task, &target, failed, restore)
    }

    /// Ends the run with the tasks' reports, in plan order (those missing are not reported).
    pub(crate) fn finish(
        &self,
        mut reports: BTreeMap<String, TaskReport>,
    ) -> Result<RunReport, RunError> {
        let ordered: Vec<TaskReport> = self
            .tasks()
            .filter_map(|(t, _)| reports.remove(&t.name))
            .collect();
        self.runner.finished(ordered, None)
    }

    /// Records that the run ended on mvk's own error, its workflow closed: nothing can
    /// continue it, so it is finished whatever its tasks.
    pub(crate) fn ended_on_error(&self, e: &RunError) {
        self.runner.closed_on_error(e);
    }
}

/// The agent on `task`'s 1-based `rung`.
fn agent_on(task: &Task, rung: u32) -> Result<&crate::ir::Agent, RunError> {
    match task.ladder.get((rung as usize).saturating_sub(1)) {
        Some(Rung::Agent { agent, .. }) => Ok(agent),
        _ => Err(RunError::Refused {
            message: format!("task `{}` has no agent on rung {rung}", task.name),
        }),
    }
}
