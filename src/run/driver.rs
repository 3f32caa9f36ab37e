//! A compiled program and a repository in; the run carried to an end out: each task's attempts
//! (see [`attempt`](crate::run::attempt)) driven through budgets and the ladder, accepted work
//! landed on its target, every transition written to the ledger and the trail before its effect,
//! and a [`RunReport`] whose outcome maps to the contract's exit codes.
//!
//! Tasks of a flow run side by side, up to the flow's `parallel`, as [`schedule`] allows: each
//! starts from the target's tip once the tasks it starts after have landed, so it sees their
//! merged results; landings take turns, and changes accepted meanwhile land together
//! ([`landing`]).
//!
//! Its rooms: [`open`] opens a run (`apply`, `resume`: lock, ledger rows, trail); this file
//! holds the [`Runner`], schedules tasks and ends the run; [`task`] takes one task through its
//! ladder, a loop around the attempt policy ([`policy::decide`](crate::run::policy::decide));
//! [`checkpoint`] stops for a person; [`landing`] lands; [`records`] writes down what happened
//! (ledger rows, status files); [`hosting`] is the runner as an attempt's host; [`reasons`]
//! words a task's end; [`thresholds`] says when a budget nears its limit; [`resume`] reads an interrupted run back; [`once`] makes one attempt on
//! its own; [`remote`] is the coordinator's side of the Temporal executor.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use git2::Oid;

use crate::ir::{Program, Task};
use crate::ledger::{self, Ledger};
use crate::run::attempt::{self, Failure};
use crate::run::event::Event;
use crate::run::git::land::{self};
use crate::run::host::Host;
use crate::run::sandbox::Protected;
use crate::run::schedule::{self, Board, Decision, Entry, Wait};
use crate::run::trail::{Limits, Line, LoopState, TaskState, Trail};
use crate::run::worktree::Pool;

mod checkpoint;
mod hosting;
mod landing;
mod once;
mod open;
mod pull_request;
pub(crate) mod reasons;
mod records;
#[cfg(feature = "temporal")]
pub(crate) mod remote;
pub(crate) mod resume;
mod task;
mod thresholds;

pub(crate) use crate::run::error::{RunError, blocking};
pub(crate) use once::{OnceReport, OnceSpec, attempt_once};
use open::Opening;
pub(crate) use open::{ResumeFrom, apply, host_name, new_run_id, resume};
use reasons::{
    budget_text, last_reason, rounds_used, rung_label, short, stopped_failure, verdict_name,
};

pub(crate) use crate::run::host::Budgets;
pub(crate) use crate::run::outcome::{Outcome, RunReport, TaskReport};
pub(crate) use crate::run::policy::RunMode;

/// Where and how to run.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    pub(crate) repo_root: PathBuf,
    /// The loop file as the user named it (for reports).
    pub(crate) file: String,
    /// Run only this task of a flow.
    pub(crate) task: Option<String>,
    /// The worktree pool's root; `None` for [`Pool::default_root`].
    pub(crate) worktree_root: Option<PathBuf>,
    pub(crate) mode: RunMode,
    /// The run's id: a new one from [`new_run_id`], or the one being resumed.
    pub(crate) run_id: String,
}

/// Sees every event as it is written (the CLI's progress display).
pub(crate) trait Observer: Send + Sync {
    fn event(&self, line: &Line);
}

/// What a resume found of a task.
#[derive(Debug)]
pub(crate) enum Restored {
    /// It finished before the interruption (and is not re-planned): its report, from the ledger.
    Finished(TaskReport),
    /// It waits at a checkpoint no one has answered yet: it stays there, the rest goes on.
    Waiting(TaskReport),
    /// It goes on from where the ledger says it stopped.
    Resume(Box<Resume>),
}

/// Where an unfinished task stands, as the ledger says.
#[derive(Debug, Default)]
pub(crate) struct Resume {
    /// The task has a ledger row: it had started (or was re-planned).
    pub(crate) begun: bool,
    pub(crate) progress: Progress,
    pub(crate) pending: Option<Pending>,
    /// Wall time the task used before, which its wall budget still counts.
    pub(crate) elapsed: Duration,
    /// `(attempt, branch, failure)` of its attempts so far, for a handoff.
    pub(crate) history: Vec<(u32, String, Option<Failure>)>,
}

/// A task's way through its ladder so far.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Attempts made (the last attempt's number).
    pub(crate) number: u32,
    /// Attempts numbered before the task's current epoch: its budgets count from here.
    pub(crate) first: u32,
    /// 0-based index of the current rung, and the attempts made on it.
    pub(crate) rung_idx: usize,
    pub(crate) rung_used: u32,
    pub(crate) last: Option<Failure>,
    /// How many times in a row `last`'s signature has been seen.
    pub(crate) same: u32,
    pub(crate) spent_tokens: u64,
    pub(crate) spent_usd: u64,
    pub(crate) last_branch: Option<String>,
    /// The task's epoch (see `Ledger::reset_task`).
    pub(crate) epoch: u32,
}

/// An attempt a resume found half done.
#[derive(Debug)]
pub(crate) enum Pending {
    /// Its agent finished and its change was captured: judge it from the seal check on.
    Judge(ledger::AttemptRow),
    /// It passed and was not landed: land it — at once when a person approved it (`true`) or
    /// the run stops for no one; else after asking, as the run's mode says.
    Land(ledger::AttemptRow, bool),
}

impl Pending {
    pub(crate) fn row(&self) -> &ledger::AttemptRow {
        match self {
            Pending::Judge(r) | Pending::Land(r, _) => r,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Pending::Judge(_) => "judge",
            Pending::Land(..) => "land",
        }
    }
}

/// An attempt for the handoff: `(task, number, branch, failure)`.
type Tried = (String, u32, String, Option<Failure>);

/// Locks `m`; a poisoned lock only means a panic elsewhere, and the data is still whole.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A commit id from the ledger.
fn oid(hex: &str) -> Result<Oid, RunError> {
    Oid::from_str(hex).map_err(|source| RunError::Git {
        action: format!("read the commit id `{hex}` recorded in the ledger"),
        source,
    })
}

/// The state of one run: what every stage writes through.
pub(crate) struct Runner<'a> {
    program: &'a Program,
    opts: &'a RunOptions,
    run_id: String,
    trail: Trail,
    pool: Pool,
    /// Where no sandbox grant may lead, checked again at each sandboxed start.
    protected: Vec<Protected>,
    observer: &'a dyn Observer,
    // The run's tasks share these; each lock is held for one statement and never across an
    // `await`, so tasks running side by side only ever wait for each other's writes.
    ledger: Mutex<Ledger>,
    state: Mutex<LoopState>,
    /// When each task started (its wall budget counts from there).
    task_started: Mutex<BTreeMap<String, Instant>>,
    run_started: Mutex<Instant>,
    /// Each attempt's `(task, number, branch)` and its failure, for the handoff.
    history: Mutex<Vec<Tried>>,
    /// Held while changes land, so merges onto a target happen one batch at a time.
    landing: tokio::sync::Mutex<()>,
    /// Accepted changes waiting for their turn to land (see [`landing`]).
    queue: landing::Queue<'a>,
    /// Which running tasks hold a slot of the flow's `parallel` (see [`Slots`]).
    slots: Mutex<Slots>,
    /// Woken when a task starts landing, or a slot may have come free.
    slots_changed: tokio::sync::Notify,
    /// When the status files were last written, and whether a phase change since waits for
    /// the next write (see [`Runner::set_phase`]).
    state_written: Mutex<Option<Instant>>,
    state_behind: std::sync::atomic::AtomicBool,
    /// Set while [`Runner::drive`] runs, which writes what is behind within [`STATE_EVERY`].
    state_flushed: std::sync::atomic::AtomicBool,
    /// Whether a notification hears of budgets, and the thresholds written (see [`thresholds`]).
    hears_budgets: bool,
    reached: Mutex<thresholds::Reached>,
    /// What the run's attempts spend while their agents run, against the flow's budget.
    purse: std::sync::Arc<crate::run::meter::Purse>,
    /// Where an attempt of `mvk attempt` keeps what it has spent so far (a worker reads it).
    spending_out: Option<PathBuf>,
    /// When each running attempt's spending was last written (`agent.spending`), and what its
    /// task had spent before it.
    spending_written: Mutex<BTreeMap<(String, u32), SpendingWritten>>,
}

/// When a running attempt's spending was last written, and what its task had spent before it.
type SpendingWritten = (Option<Instant>, crate::run::meter::Spend);

/// The waits before a worktree is asked for again after an error that may pass (see
/// [`Runner::acquire`]): about eight seconds in all.
const WORKTREE_WAITS: [std::time::Duration; 5] = [
    std::time::Duration::from_millis(250),
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(2),
    std::time::Duration::from_secs(4),
];

/// How often, at most, phase changes alone rewrite `.loop_state.json` and STATUS.md: each
/// write renders every task, and a wide flow changes phase thousands of times.
const STATE_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// The running tasks of a flow that hold no slot of its `parallel`: those waiting for their
/// change to land, and, among them, those that must make another attempt and wait for a slot.
#[derive(Default)]
struct Slots {
    /// Tasks whose change waits to land (or is landing).
    landing: std::collections::BTreeSet<String>,
    /// Tasks back from landing for another attempt, waiting for a slot; new tasks leave them
    /// room, so they are not starved by a long queue.
    rejoining: usize,
    /// How many tasks run (their futures), kept by `drive`.
    running: usize,
    /// The flow's `parallel`.
    parallel: usize,
}

/// The flow's `tokens` and `usd`, which its purse holds every running agent to.
fn flow_limits(program: &Program) -> crate::run::policy::Limits {
    program
        .flow
        .as_ref()
        .map(|f| crate::run::policy::Limits::of(f.budget.tokens, f.budget.usd_micros, None))
        .unwrap_or_default()
}

impl<'a> Runner<'a> {
    fn new(
        program: &'a Program,
        opts: &'a RunOptions,
        opening: Opening,
        observer: &'a dyn Observer,
        selected: &[usize],
    ) -> Runner<'a> {
        let Opening {
            ledger,
            trail,
            pool,
            protected,
        } = opening;
        let (now, _) = crate::clock::now();
        let state = LoopState {
            schema: LoopState::SCHEMA,
            run: opts.run_id.clone(),
            file: opts.file.clone(),
            program: program.name.clone(),
            phase: "starting".into(),
            started: now.clone(),
            updated: now,
            tasks: selected
                .iter()
                .map(|&i| {
                    let t = &program.tasks[i];
                    TaskState {
                        name: t.name.clone(),
                        state: "pending".into(),
                        limits: Limits {
                            iterations: t.budget.iterations,
                            tokens: t.budget.tokens,
                            usd_micros: t.budget.usd_micros,
                            wall_ms: t.budget.wall.map(attempt::ms),
                        },
                        ..TaskState::default()
                    }
                })
                .collect(),
            ..LoopState::default()
        };
        let reached = thresholds::reached(&ledger, &opts.run_id);
        // A resumed run's flow has spent what its earlier attempts did.
        let before = ledger
            .spent(&opts.run_id, None)
            .map(|s| crate::run::meter::Spend {
                tokens: s.input_tokens.saturating_add(s.output_tokens),
                usd_micros: s.usd_micros,
            })
            .unwrap_or_default();
        let flow = flow_limits(program);
        let mut runner = Runner {
            program,
            opts,
            run_id: opts.run_id.clone(),
            ledger: Mutex::new(ledger),
            trail,
            pool,
            protected,
            observer,
            state: Mutex::new(state),
            task_started: Mutex::new(BTreeMap::new()),
            run_started: Mutex::new(Instant::now()),
            history: Mutex::new(Vec::new()),
            landing: tokio::sync::Mutex::new(()),
            queue: landing::Queue::default(),
            slots: Mutex::new(Slots::default()),
            slots_changed: tokio::sync::Notify::new(),
            state_written: Mutex::new(None),
            state_behind: std::sync::atomic::AtomicBool::new(false),
            state_flushed: std::sync::atomic::AtomicBool::new(false),
            hears_budgets: false,
            reached: Mutex::new(reached),
            purse: std::sync::Arc::new(crate::run::meter::Purse::new(flow, before)),
            spending_out: None,
            spending_written: Mutex::new(BTreeMap::new()),
        };
        runner.hears_budgets = runner.hears_budgets();
        runner
    }

    /// Runs the selected tasks to the run's end, starting with `first` (the run's
    /// `run.started` or `run.resumed` event); a task in `restored` carries on from there.
    ///
    /// Tasks start in plan order as soon as [`schedule::decide`] lets them: what they start
    /// after has landed, no running task's scope may share a file with theirs, and fewer than
    /// the flow's `parallel` run. A task that waits says on what (`task.waiting`), once per
    /// reason. All of a run's tasks are futures of this one async task: agents and gates are
    /// child processes, so they run side by side while mvk's own steps take turns.
    async fn drive(
        &self,
        selected: &[usize],
        targets: &BTreeMap<usize, String>,
        mut restored: BTreeMap<String, Restored>,
        first: Option<Event>,
    ) -> Result<RunReport, RunError> {
        let program = self.program;
        let _heartbeat = self.trail.heartbeat();
        self.state_flushed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let result: Result<RunReport, RunError> = async {
            if let Some(event) = first {
                self.emit(None, None, event)?;
            }
            self.write_state()?;

            let flow = program.flow.as_ref();
            let parallel = flow.map_or(1, |f| usize::try_from(f.parallel).unwrap_or(usize::MAX));
            let continue_on_failure = flow.is_some_and(|f| f.continue_on_failure);
            let names: Vec<&str> = selected
                .iter()
                .map(|&i| program.tasks[i].name.as_str())
                .collect();
            let mut reports: BTreeMap<usize, TaskReport> = BTreeMap::new();
            let mut done: BTreeMap<String, Outcome> = BTreeMap::new();
            let mut handoff = None;
            let mut queue: Vec<(usize, Option<Box<Resume>>)> = Vec::new();
            for &i in selected {
                let task = &program.tasks[i];
                match restored.remove(&task.name) {
                    Some(Restored::Finished(report) | Restored::Waiting(report)) => {
                        self.task_state(&task.name, |s| {
                            s.state = report.outcome.name().into();
                            s.note = Some(report.reason.clone());
                            s.merged = report.merged.clone();
                            s.attempt = report.attempts;
                        });
                        done.insert(task.name.clone(), report.outcome);
                        reports.insert(i, report);
                    }
                    Some(Restored::Resume(r)) => queue.push((i, Some(r))),
                    None => queue.push((i, None)),
                }
            }
            let mut running = FuturesUnordered::new();
            let mut running_idx: Vec<usize> = Vec::new();
            let mut told: BTreeMap<usize, Wait> = BTreeMap::new();
            locked(&self.slots).parallel = parallel;
            let mut state_tick = tokio::time::interval(STATE_EVERY);
            state_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Start, skip or hold each queued task; a skip can free the tasks after it, so
                // go round again until nothing changes.
                let mut changed = true;
                while changed {
                    changed = false;
                    let mut k = 0;
                    while k < queue.len() {
                        let i = queue[k].0;
                        let task = &program.tasks[i];
                        let (landing, rejoining) = {
                            let slots = locked(&self.slots);
                            (slots.landing.clone(), slots.rejoining)
                        };
                        // A task waiting to land holds its scope but no slot.
                        let (working, waiting): (Vec<&Task>, Vec<&Task>) = running_idx
                            .iter()
                            .map(|&j| &program.tasks[j])
                            .partition(|t| !landing.contains(&t.name));
                        let entries: Vec<Entry<'_>> =
                            working.into_iter().map(Entry::from).collect();
                        let mut holding: Vec<Entry<'_>> =
                            waiting.into_iter().map(Entry::from).collect();
                        holding.extend(
                            selected
                                .iter()
                                .map(|&j| &program.tasks[j])
                                .filter(|t| done.get(&t.name) == Some(&Outcome::Waiting))
                                .map(Entry::from),
                        );
                        let board = Board {
                            done: &done,
                            selected: &names,
                            running: &entries,
                            holding: &holding,
                            parallel,
                            continue_on_failure,
                        };
                        let mut decision = schedule::decide(Entry::from(task), &board);
                        // Room is left for tasks back from landing for another attempt.
                        if decision == Decision::Start
                            && entries.len() + rejoining >= parallel.max(1)
                        {
                            decision = Decision::Wait(Wait::Parallel { limit: parallel });
                        }
                        match decision {
                            Decision::Wait(wait) => {
                                if told.get(&i) != Some(&wait) {
                                    self.announce_wait(task, &wait)?;
                                    told.insert(i, wait);
                                }
                                k += 1;
                            }
                            Decision::Skip { failed } => {
                                let (_, restore) = queue.remove(k);
                                let target = targets.get(&i).map_or("HEAD", String::as_str);
                                let report = self.skip(task, target, &failed, restore)?;
                                done.insert(task.name.clone(), report.outcome);
                                reports.insert(i, report);
                                changed = true;
                            }
                            Decision::Start => {
                                let (_, restore) = queue.remove(k);
                                told.remove(&i);
                                running_idx.push(i);
                                locked(&self.slots).running = running_idx.len();
                                let target = targets.get(&i).cloned().unwrap_or_default();
                                running.push(async move {
                                    // While it goes, other tasks' sweeps leave its escapees
                                    // to its own; once it is over, they are no one's.
                                    let live =
                                        crate::run::exec::reaper::live(&self.run_id, &task.name);
                                    let r = self.run_task(task, &target, restore.map(|r| *r)).await;
                                    drop(live);
                                    // The task is over: nothing is left to fail (the sweep
                                    // warns when escapees outlast it).
                                    let _ = crate::run::exec::reaper::kill_adopted(
                                        &self.run_id,
                                        &task.name,
                                    );
                                    (i, r)
                                });
                                changed = true;
                            }
                        }
                    }
                }
                let changed = self.slots_changed.notified();
                let next = tokio::select! {
                    next = running.next() => next,
                    // A task started landing: its slot may take a task that waits.
                    () = changed => continue,
                    // A phase change not yet in the status files.
                    _ = state_tick.tick() => {
                        if self.state_behind.load(std::sync::atomic::Ordering::Relaxed) {
                            self.write_state()?;
                        }
                        if self.hears_budgets {
                            self.wall_thresholds(&running_idx)?;
                        }
                        continue;
                    }
                };
                let Some((i, result)) = next else {
                    break;
                };
                running_idx.retain(|&j| j != i);
                locked(&self.slots).running = running_idx.len();
                // A task back from landing may take the slot this one held.
                self.slots_changed.notify_waiters();
                // mvk's own failure stops the run (left for `mvk resume` while tasks have not
                // ended: `ended_on_error`); the other tasks' futures are dropped with it, which
                // kills their agents and gates (their process groups die with them).
                let (report, h) = result?;
                if h.is_some() {
                    handoff = h;
                }
                done.insert(program.tasks[i].name.clone(), report.outcome);
                reports.insert(i, report);
            }
            let reports: Vec<TaskReport> =
                selected.iter().filter_map(|i| reports.remove(i)).collect();
            if reports.iter().any(|r| r.outcome == Outcome::Waiting) {
                // Nothing more can run until a person answers: the run pauses, resumable.
                return self.paused(reports);
            }

            self.finished(reports, handoff)
        }
        .await;
        self.state_flushed
            .store(false, std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = &result {
            self.ended_on_error(e);
        }
        result
    }

    /// Ends the run with every task's report: its outcome (the worst of its tasks'), the
    /// ledger, the trail and the status files.
    pub(crate) fn finished(
        &self,
        reports: Vec<TaskReport>,
        handoff: Option<PathBuf>,
    ) -> Result<RunReport, RunError> {
        let run_id = self.run_id.clone();
        let outcome = reports
            .iter()
            .map(|r| r.outcome)
            .max_by_key(|o| o.severity())
            .unwrap_or(Outcome::Accepted);
        let outcome = if outcome == Outcome::Skipped {
            Outcome::Accepted
        } else {
            outcome
        };
        let exit_code = outcome.exit_code();
        self.ledger()
            .finish_run(&run_id, outcome.name(), i32::from(exit_code))?;
        self.emit(
            None,
            None,
            Event::RunFinished {
                outcome: outcome.name().to_string(),
                exit_code: i32::from(exit_code),
                error: None,
            },
        )?;
        self.state().outcome = Some(outcome.name().into());
        self.state().exit_code = Some(exit_code);
        self.state().task = None;
        self.state().phase = if outcome == Outcome::Human {
            "waiting-human".into()
        } else {
            "finished".into()
        };
        self.write_state()?;
        Ok(RunReport {
            schema: "mvk.apply.v1",
            run: run_id.clone(),
            outcome,
            exit_code,
            tasks: reports,
            handoff,
        })
    }

    /// Says in the ledger and the trail that mvk stopped on its own error `e`. A run whose
    /// tasks did not all end is left as it stands, not finished: `mvk resume` continues it
    /// (and refuses a finished run); its process gone, it reads as interrupted. Only a run
    /// whose every task ended is recorded finished, `error` (exit 70).
    pub(crate) fn ended_on_error(&self, e: &RunError) {
        // A full disk leaves no word at all: writing one would fail too.
        if e.is_out_of_space() {
            return;
        }
        let names: Vec<String> = self.state().tasks.iter().map(|t| t.name.clone()).collect();
        let unended =
            crate::run::driver::resume::unended_tasks(&self.ledger(), &self.run_id, &names);
        // When the ledger cannot say, the run stays resumable: the side that loses nothing.
        if unended.as_ref().map_or(true, |u| !u.is_empty()) {
            let _ = self.emit(
                None,
                None,
                // No exit code: the CLI decides it (64 for a usage error, else 70).
                Event::RunStopped {
                    error: e.to_string(),
                    unended: unended.unwrap_or_default(),
                },
            );
            self.state().phase = "stopped".into();
            let _ = self.write_state();
            return;
        }
        self.closed_on_error(e);
    }

    /// Records the run finished on mvk's own error `e`, whatever its tasks: for a run nothing
    /// can continue (a Temporal run whose workflow is closed).
    pub(crate) fn closed_on_error(&self, e: &RunError) {
        // Said so no one waits for the run; best effort, since the error may be the ledger
        // itself. (A full disk leaves the run as it stands instead.)
        if e.is_out_of_space() {
            return;
        }
        let run_id = self.run_id.clone();
        let message = e.to_string();
        let _ = self.ledger().finish_run(&run_id, "error", 70);
        let _ = self.emit(
            None,
            None,
            Event::RunFinished {
                outcome: "error".to_string(),
                exit_code: 70,
                error: Some(message),
            },
        );
        self.state().outcome = Some("error".into());
        self.state().exit_code = Some(70);
        self.state().phase = "finished".into();
        let _ = self.write_state();
    }

    /// Ends `task` unrun because tasks it starts after (`failed`) did not succeed.
    fn skip(
        &self,
        task: &Task,
        target: &str,
        failed: &[String],
        restore: Option<Box<Resume>>,
    ) -> Result<TaskReport, RunError> {
        let reason = format!(
            "skipped: {} did not succeed",
            failed
                .iter()
                .map(|d| format!("`{d}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !restore.is_some_and(|r| r.begun) {
            let base = land::branch_tip(&self.opts.repo_root, target)?;
            self.begin_task(task, base)?;
        }
        self.ledger()
            .finish_task(&self.run_id, &task.name, Outcome::Skipped.name(), None)?;
        self.emit(
            Some(&task.name),
            None,
            Event::TaskSkipped {
                reason: reason.clone(),
                after: failed.to_vec(),
            },
        )?;
        self.task_state(&task.name, |s| {
            s.state = "skipped".into();
            s.note = Some(reason.clone());
        });
        self.write_state()?;
        Ok(TaskReport {
            name: task.name.clone(),
            outcome: Outcome::Skipped,
            attempts: 0,
            merged: None,
            branch: None,
            usd: 0.0,
            tokens: 0,
            reason,
        })
    }

    /// Says why `task` has not started: an event, and its line in the status files.
    fn announce_wait(&self, task: &Task, wait: &Wait) -> Result<(), RunError> {
        let text = wait.text();
        let waiting = Event::TaskWaiting {
            wait: wait.clone(),
            reason: text.clone(),
        };
        self.emit(Some(&task.name), None, waiting)?;
        self.task_state(&task.name, |s| {
            s.state = "pending".into();
            s.note = Some(text);
        });
        self.write_state()
    }

    /// Starts `task` from `base`: its ledger row, then its `task.started` event.
    fn start_task(&self, task: &Task, base: Oid, target: &str) -> Result<(), RunError> {
        self.begin_task(task, base)?;
        self.emit(
            Some(&task.name),
            None,
            Event::TaskStarted {
                digest: task.meta.digest.to_string(),
                base: base.to_string(),
                target: target.to_string(),
            },
        )
    }

    /// Records the start of a task: its digests, dependencies, base and sealed contents.
    pub(crate) fn begin_task(&self, task: &Task, base: Oid) -> Result<(), RunError> {
        self.with_task_start(task, base, |start| Ok(self.ledger().begin_task(start)?))
    }

    /// Calls `record` with `task`'s start from `base` as the ledger keeps it (its digests,
    /// dependencies, base and sealed contents): for its first start and for a re-plan alike.
    fn with_task_start<T>(
        &self,
        task: &Task,
        base: Oid,
        record: impl FnOnce(&ledger::TaskStart<'_>) -> Result<T, RunError>,
    ) -> Result<T, RunError> {
        let fields: Vec<(String, String)> = task
            .meta
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        let seal_digest = self.seal_digest(task, base)?;
        record(&ledger::TaskStart {
            run: &self.run_id,
            name: &task.name,
            digest: &task.meta.digest.to_string(),
            fields: &fields,
            after: &task.after,
            base: &base.to_string(),
            seal_digest: &seal_digest,
        })
    }

    /// The digest of `task`'s sealed files at `base`.
    pub(crate) fn seal_digest(&self, task: &Task, base: Oid) -> Result<String, RunError> {
        let sealed = crate::run::git::seal::Seal::new(&task.seal).map_err(RunError::Seal)?;
        let repo =
            git2::Repository::open(&self.opts.repo_root).map_err(|source| RunError::Git {
                action: "open the repository".into(),
                source,
            })?;
        let files =
            crate::run::git::seal::sealed_files(&repo, base, &sealed).map_err(RunError::Seal)?;
        Ok(crate::run::git::seal::sealed_digest(&files))
    }
}

#[cfg(test)]
mod tests {
    use super::RunMode;

    #[test]
    fn a_run_mode_is_kept_by_its_name_and_read_back() {
        for mode in [RunMode::Auto, RunMode::Batch, RunMode::Step] {
            assert_eq!(RunMode::parse(mode.name()), Some(mode));
        }
        assert_eq!(RunMode::parse("Step"), None);
        assert_eq!(RunMode::parse(""), None);
    }
}
