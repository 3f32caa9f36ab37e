//! A compiled program and a repository in; the run carried to an end out: each task's attempts
//! (see [`attempt`](crate::run::attempt)) driven through budgets and the ladder, accepted work
//! landed on its target, every transition written to the ledger and the trail before its effect,
//! and a [`RunReport`] whose outcome maps to the contract's exit codes.
//!
//! Tasks of a flow run side by side, up to the flow's `parallel`, as [`schedule`] allows: each
//! starts from the target's tip once the tasks it starts after have landed, so it sees their
//! merged results; landings take turns, and changes accepted meanwhile land together
//! ([`landing`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use git2::Oid;
use serde_json::{Value, json};

use crate::ir::{Program, Rung, Task};
use crate::ledger::{self, Ledger};
use crate::run::attempt::{self, AttemptEnd, AttemptSpec, Failure, FailureKind};
use crate::run::evidence::GateVerdict;
use crate::run::gate::{self, GateRun};
use crate::run::land::{self, LandError};
use crate::run::policy::{self, CheckpointKind};
use crate::run::sandbox::Protected;
use crate::run::schedule::{self, Board, Decision, Entry, Wait};
use crate::run::trail::{self, Event, Limits, LoopState, OpenFailure, TaskState, Trail};
use crate::run::worktree::{self, Lease, Pool};

mod landing;
#[cfg(feature = "temporal")]
pub mod remote;

use landing::Landing;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot {action} `{}`", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot {action}")]
    Git {
        action: String,
        #[source]
        source: git2::Error,
    },
    #[error(transparent)]
    Worktree(#[from] worktree::WorktreeError),
    #[error(transparent)]
    Ledger(#[from] ledger::LedgerError),
    #[error(transparent)]
    Trail(#[from] trail::TrailError),
    #[error(transparent)]
    Land(#[from] LandError),
    #[error(transparent)]
    Seal(crate::run::seal::SealError),
    #[error(transparent)]
    Gate(gate::GateError),
    #[error("cannot run agent `{agent}`")]
    Agent {
        agent: String,
        #[source]
        source: crate::run::process::ProcessError,
    },
    #[error("template `{template}` does not render{}: {message}", line.map_or(String::new(), |l| format!(" at line {l}")))]
    Template {
        template: String,
        message: String,
        line: Option<usize>,
    },
    #[error("{message}")]
    Config { message: String },
    /// A request from a Temporal workflow that no honest one sends (an answer to one of its
    /// activities came from someone else): refused, and the workflow fails on it.
    #[error("{message}")]
    Refused { message: String },
    /// The executor that runs attempts elsewhere (Temporal) failed: the server, a worker.
    #[error("{message}")]
    Executor { message: String },
    #[error("a worker thread doing `{action}` ended abnormally")]
    Worker {
        action: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Runs F, a git or filesystem step that takes a while (a checkout, a commit of a worktree, a
/// merge), on tokio's blocking pool: a flow's tasks are futures of one task, so a step run in
/// place would stall every other task's agent, gate and landing until it ended.
pub async fn blocking<T, F>(action: &'static str, f: F) -> Result<T, RunError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| RunError::Worker { action, source })
}

impl RunError {
    /// Whether the error is the disk (or a file-size limit) running out of room while mvk wrote
    /// its ledger, trail or repository: the run is then left as it stands, to be resumed.
    pub fn is_out_of_space(&self) -> bool {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = next {
            if let Some(io) = e.downcast_ref::<std::io::Error>()
                && (matches!(
                    io.kind(),
                    std::io::ErrorKind::StorageFull
                        | std::io::ErrorKind::FileTooLarge
                        | std::io::ErrorKind::QuotaExceeded
                ))
            {
                return true;
            }
            if let Some(rusqlite::Error::SqliteFailure(f, _)) = e.downcast_ref::<rusqlite::Error>()
                && matches!(
                    f.code,
                    rusqlite::ErrorCode::DiskFull | rusqlite::ErrorCode::SystemIoFailure
                )
            {
                return true;
            }
            if let Some(g) = e.downcast_ref::<git2::Error>()
                && g.message().contains("No space left")
            {
                return true;
            }
            next = e.source();
        }
        false
    }
}

pub use crate::run::outcome::{Outcome, RunReport, TaskReport};
pub use crate::run::policy::RunMode;

/// Where and how to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub repo_root: PathBuf,
    /// The loop file as the user named it (for reports).
    pub file: String,
    /// Run only this task of a flow.
    pub task: Option<String>,
    /// The worktree pool's root; `None` for [`Pool::default_root`].
    pub worktree_root: Option<PathBuf>,
    pub mode: RunMode,
    /// The run's id: a new one from [`new_run_id`], or the one being resumed.
    pub run_id: String,
}

/// Sees every event as it is written (the CLI's progress display).
pub trait Observer: Send + Sync {
    fn event(&self, event: &Event);
}

/// The limits that apply to an attempt: the task's budget and, in a flow, the flow's.
#[derive(Debug, Clone)]
pub struct Budgets {
    pub wall: Option<Duration>,
    pub context_tokens: u32,
    /// When the flow's wall budget runs out, if it has one: attempts in flight stop there too.
    pub deadline: Option<Instant>,
}

impl Budgets {
    /// Time left before the wall budget runs out from `started` (or the flow's, if sooner);
    /// `None` when it has run out.
    pub fn time_left(&self, started: Instant) -> Option<Duration> {
        let task = match self.wall {
            None => Some(Duration::MAX),
            Some(w) => w.checked_sub(started.elapsed()).filter(|d| !d.is_zero()),
        }?;
        let flow = match self.deadline {
            None => Duration::MAX,
            Some(d) => d
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())?,
        };
        Some(task.min(flow))
    }
}

/// What a resume found of a task.
#[derive(Debug)]
pub enum Restored {
    /// It finished before the interruption (and is not re-planned): its report, from the ledger.
    Finished(TaskReport),
    /// It waits at a checkpoint no one has answered yet: it stays there, the rest goes on.
    Waiting(TaskReport),
    /// It goes on from where the ledger says it stopped.
    Resume(Box<Resume>),
}

/// Where an unfinished task stands, as the ledger says.
#[derive(Debug, Default)]
pub struct Resume {
    /// The task has a ledger row: it had started (or was re-planned).
    pub begun: bool,
    pub progress: Progress,
    pub pending: Option<Pending>,
    /// Wall time the task used before, which its wall budget still counts.
    pub elapsed: Duration,
    /// `(attempt, branch, failure)` of its attempts so far, for a handoff.
    pub history: Vec<(u32, String, Option<Failure>)>,
}

/// A task's way through its ladder so far.
#[derive(Debug, Default)]
pub struct Progress {
    /// Attempts made (the last attempt's number).
    pub number: u32,
    /// Attempts numbered before the task's current epoch: its budgets count from here.
    pub first: u32,
    /// 0-based index of the current rung, and the attempts made on it.
    pub rung_idx: usize,
    pub rung_used: u32,
    pub last: Option<Failure>,
    /// How many times in a row `last`'s signature has been seen.
    pub same: u32,
    pub spent_tokens: u64,
    pub spent_usd: u64,
    pub last_branch: Option<String>,
    /// The task's epoch (see `Ledger::reset_task`).
    pub epoch: u32,
}

/// An attempt a resume found half done.
#[derive(Debug)]
pub enum Pending {
    /// Its agent finished and its change was captured: judge it from the seal check on.
    Judge(ledger::AttemptRow),
    /// It passed and was not landed: land it — at once when a person approved it (`true`) or
    /// the run stops for no one; else after asking, as the run's mode says.
    Land(ledger::AttemptRow, bool),
}

impl Pending {
    pub fn row(&self) -> &ledger::AttemptRow {
        match self {
            Pending::Judge(r) | Pending::Land(r, _) => r,
        }
    }

    pub fn name(&self) -> &'static str {
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
pub struct Runner<'a> {
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
}

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

/// Runs `program` in `opts.repo_root` to an end. `Err` only for mvk's own failures (the
/// ledger, git, the disk); whatever agents and gates do is in the report.
pub async fn apply(
    program: &Program,
    opts: &RunOptions,
    observer: &dyn Observer,
) -> Result<RunReport, RunError> {
    let opened = open_apply(program, opts, observer, None)?;
    opened
        .runner
        .drive(
            &opened.selected,
            &opened.targets,
            BTreeMap::new(),
            Some(("run.started", opened.started)),
        )
        .await
}

/// A new run of `mvk apply`, opened but not yet started: its runner, the tasks selected (in
/// plan order) with their target branches, and the detail of its `run.started` event.
pub(crate) struct Opened<'a> {
    pub runner: Runner<'a>,
    pub selected: Vec<usize>,
    pub targets: BTreeMap<usize, String>,
    pub started: Value,
}

/// Opens a new run of `program` as `mvk apply` does, whichever executor makes its attempts
/// (`executor` is recorded in `run.started` when it is not the local one): the ledger row and
/// the trail, the selected tasks and their targets, the base the first target's tip gives.
pub(crate) fn open_apply<'a>(
    program: &'a Program,
    opts: &'a RunOptions,
    observer: &'a dyn Observer,
    executor: Option<&str>,
) -> Result<Opened<'a>, RunError> {
    let repo_root = &opts.repo_root;
    let mut opening = open_run(program, opts)?;
    let selected = select(program, opts)?;
    let targets = targets_of(program, &selected, repo_root, None)?;
    let first_target = selected
        .first()
        .and_then(|i| targets.get(i))
        .cloned()
        .unwrap_or_else(|| "HEAD".into());
    let base = land::branch_tip(repo_root, &first_target)?;

    begin_run(&mut opening.ledger, program, opts, base, &first_target)?;
    let runner = Runner::new(program, opts, opening, observer, &selected);
    let mut started = json!({
        "file": opts.file,
        "program": program.name,
        "digest": program.digest.to_string(),
        "base": base.to_string(),
        "target": first_target,
        "tasks": selected.iter().map(|&i| program.tasks[i].name.clone()).collect::<Vec<_>>(),
        // What a resume needs to go on as this run would have: whether it ran the whole program,
        // and where tasks without `merge into=` land.
        "whole": opts.task.is_none(),
        "current": land::current_branch(repo_root).ok(),
    });
    if let Some(executor) = executor {
        started["executor"] = json!(executor);
    }
    Ok(Opened {
        runner,
        selected,
        targets,
        started,
    })
}

/// How a resumed run goes on: what the ledger says of it, and the drift that was accepted.
pub struct ResumeFrom {
    pub run: ledger::RunRow,
    /// The accepted drift, or `None` when the definition is unchanged.
    pub drift: Option<crate::drift::DriftReport>,
    /// `interrupted` or `paused`.
    pub found: String,
}

/// Continues the interrupted or paused run `from.run` with `program` (the definition as
/// compiled now: unchanged, or with accepted drift). Finished tasks are not run again; a task
/// caught in flight carries on from its last durable step: an attempt whose agent finished is
/// judged from the seal check on, one whose agent was running is restarted under its number, a
/// merge that may have happened is checked against git and never done twice.
pub async fn resume(
    program: &Program,
    opts: &RunOptions,
    observer: &dyn Observer,
    from: ResumeFrom,
) -> Result<RunReport, RunError> {
    let Reopened {
        runner,
        selected,
        targets,
        began,
    } = reopen(program, opts, observer, &from)?;
    // Its attempts were made by workers and its scheduling lives in a Temporal workflow: the
    // local driver cannot carry that on (`run::temporal::resume` does).
    if let Some(executor) = &began.executor {
        return Err(RunError::Config {
            message: format!(
                "run `{}` ran with `--executor {executor}`, which this mvk cannot continue (it was built without that executor); resume it with an mvk that has it",
                opts.run_id
            ),
        });
    }
    let replanned = from
        .drift
        .as_ref()
        .map(crate::drift::DriftReport::replanned)
        .unwrap_or_default();
    let restored = crate::run::resume::restore(&runner, &selected, &targets, &replanned)?;
    record_resume(&runner, program, &from)?;
    runner.drive(&selected, &targets, restored, None).await
}

/// An interrupted run, opened again for its resume: its runner, the tasks it goes on with (in
/// plan order) and their target branches, and how it began.
pub(crate) struct Reopened<'a> {
    pub runner: Runner<'a>,
    pub selected: Vec<usize>,
    pub targets: BTreeMap<usize, String>,
    pub began: crate::run::resume::Began,
}

/// Opens the interrupted run `from.run` again, whichever executor ran it: stops what its dead
/// mvk left running, announces `run.resumed`, and restores the run's clock. Nothing of its
/// tasks is restored yet, and the resume is not recorded ([`record_resume`]).
pub(crate) fn reopen<'a>(
    program: &'a Program,
    opts: &'a RunOptions,
    observer: &'a dyn Observer,
    from: &ResumeFrom,
) -> Result<Reopened<'a>, RunError> {
    let run_id = opts.run_id.clone();
    let opening = open_run(program, opts)?;
    // A dead mvk's agents and gates may live on (SIGKILL spares its children): stop them before
    // anything of the run is reused, so none can edit a worktree or forge a log.
    let orphans = crate::run::reaper::kill_orphans(opening.trail.run_dir(), &run_id);
    let mut ref_locks = crate::run::resume::clear_ref_locks(&opts.repo_root, &run_id)?;
    ref_locks.extend(opening.pool.clear_idle_locks()?);
    let began = crate::run::resume::began(&opening.ledger, &from.run)?;
    let selected = crate::run::resume::selected_tasks(&began, program);
    // A task without `merge into=` lands on the branch checked out when the run began, whatever
    // is checked out now.
    let targets = targets_of(
        program,
        &selected,
        &opts.repo_root,
        began.current.as_deref(),
    )?;
    let runner = Runner::new(program, opts, opening, observer, &selected);
    // Announced first, so what the resume finds (abandoned attempts, settled merges, re-planned
    // tasks) follows it in the trail.
    runner.emit(
        None,
        None,
        "run.resumed",
        json!({
            "found": from.found,
            "orphans_killed": orphans,
            "ref_locks_removed": ref_locks.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "digest": program.digest.to_string(),
            "drift_accepted": from.drift.as_ref().map(|d| d.replanned()),
        }),
    )?;
    let last =
        crate::run::resume::last_sign_of_life(&runner.ledger(), &run_id, None, runner.run_dir())?;
    let elapsed = last.map_or(0, |l| l.saturating_sub(from.run.started_at));
    runner.restore_run_clock(Duration::from_millis(u64::try_from(elapsed).unwrap_or(0)))?;
    Ok(Reopened {
        runner,
        selected,
        targets,
        began,
    })
}

/// Records the resume of `from.run` in the ledger, with the program it goes on with: last, once
/// its tasks are restored, so that a crash before this leaves the ledger on the old program, and
/// the next resume sees the drift again and re-plans again, rather than going on half re-planned
/// under the new digest.
pub(crate) fn record_resume(
    runner: &Runner<'_>,
    program: &Program,
    from: &ResumeFrom,
) -> Result<(), RunError> {
    let drift_json = match &from.drift {
        Some(d) => Some(serde_json::to_string(d).map_err(|e| RunError::Config {
            message: format!("cannot encode the drift report: {e}"),
        })?),
        None => None,
    };
    runner.ledger().resume_run(&ledger::ResumeStart {
        run: runner.run_id(),
        pid: std::process::id(),
        host: &host_name(),
        found: &from.found,
        old_program_digest: &from.run.program_digest,
        new_program_digest: &program.digest.to_string(),
        ir_json: &program_json(program)?,
        sources: &program_sources(program),
        drift_json: drift_json.as_deref(),
    })?;
    Ok(())
}

/// The ledger, the trail and the worktree pool of a run, with the process ready to run agents.
fn open_run(program: &Program, opts: &RunOptions) -> Result<Opening, RunError> {
    let repo_root = &opts.repo_root;
    let mvk_dir = repo_root.join(".mvk");
    let pool_root = opts
        .worktree_root
        .clone()
        .unwrap_or_else(|| Pool::default_root(repo_root));
    // The default root holds the pools of every repository mvk runs in: all of it is mvk's.
    let worktrees = match &opts.worktree_root {
        Some(root) => root.clone(),
        None => pool_root
            .parent()
            .map_or_else(|| pool_root.clone(), Path::to_path_buf),
    };
    let protected = refuse_exposing_grants(program, repo_root, &worktrees)?;
    crate::run::reaper::become_subreaper().map_err(|source| RunError::Io {
        action: "become the reaper of escaped agent processes (prctl)",
        path: PathBuf::from("/proc/self"),
        source,
    })?;
    exclude_mvk_dir(repo_root)?;
    let ledger = Ledger::open(&mvk_dir.join("ledger.db"))?;
    let trail = Trail::create(&mvk_dir, &opts.run_id)?;
    let pool = Pool::open(repo_root, &pool_root)?;
    Ok(Opening {
        ledger,
        trail,
        pool,
        protected,
    })
}

/// What [`open_run`] opened, for the run's [`Runner`].
struct Opening {
    ledger: Ledger,
    trail: Trail,
    pool: Pool,
    /// Where no sandbox grant may lead (see [`refuse_exposing_grants`]).
    protected: Vec<Protected>,
}

/// Refuses, before anything of the run is written, a sandbox that grants a place where mvk
/// keeps what no confined process may write (review r8d, W3): `worktrees` holds the pools. Out
/// come those places, which each sandboxed start checks its grants against again.
fn refuse_exposing_grants(
    program: &Program,
    repo_root: &Path,
    worktrees: &Path,
) -> Result<Vec<Protected>, RunError> {
    let mut protected = vec![
        Protected::new("the main checkout and mvk's ledger", repo_root),
        Protected::new(
            "the attempt worktrees and mvk's trusted index copies",
            worktrees,
        ),
        Protected::new(
            "the cache of imported gate libraries",
            &crate::resolve::git::default_root(),
        ),
    ];
    if let Ok(repo) = git2::Repository::open(repo_root) {
        protected.push(Protected::new(
            "the repository's git directory",
            repo.commondir(),
        ));
    }
    // Every sandboxed process starts through it: replaced (`write "~/.cargo"` holds
    // `~/.cargo/bin/mvk`), the next spawn would run the agent's code unconfined (review r8e, H2).
    if let Ok(exe) = crate::exe::path() {
        protected.push(Protected::new("mvk's own executable", exe));
    }
    crate::run::sandbox::refuse_exposing_grants(program, &protected).map_err(|e| {
        RunError::Config {
            message: e.to_string(),
        }
    })?;
    Ok(protected)
}

/// The tasks to run, in dependency order: all of them, or the one `--task` names.
fn select(program: &Program, opts: &RunOptions) -> Result<Vec<usize>, RunError> {
    match &opts.task {
        None => Ok(crate::plan::plan(program).order),
        Some(name) => match program.tasks.iter().position(|t| &t.name == name) {
            Some(i) => Ok(vec![i]),
            None => Err(RunError::Config {
                message: format!(
                    "`{}` has no task `{name}`; it has: {}",
                    opts.file,
                    program
                        .tasks
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        },
    }
}

/// Each selected task's target branch, checked to exist. `current` is the branch a loop
/// without `merge into=` lands on (the one checked out, when `None`).
fn targets_of(
    program: &Program,
    selected: &[usize],
    repo_root: &Path,
    current: Option<&str>,
) -> Result<BTreeMap<usize, String>, RunError> {
    let mut targets = BTreeMap::new();
    for &i in selected {
        let task = &program.tasks[i];
        let target = if task.merge.into != crate::ir::CURRENT_BRANCH {
            task.merge.into.clone()
        } else if let Some(c) = current {
            c.to_string()
        } else {
            land::current_branch(repo_root)?
        };
        land::branch_tip(repo_root, &target)?;
        targets.insert(i, target);
    }
    // A task starts from a base holding what it waits for: only so on one branch. (`mvk
    // check` refuses two named branches; the checked-out one is known only now.)
    for (&i, target) in &targets {
        let task = &program.tasks[i];
        for dep in &task.after {
            let theirs = program
                .tasks
                .iter()
                .position(|t| &t.name == dep)
                .and_then(|j| targets.get(&j));
            if let Some(theirs) = theirs.filter(|t| *t != target) {
                return Err(RunError::Config {
                    message: format!(
                        "task `{}` starts after `{dep}`, but lands on `{target}` while `{dep}` lands on `{theirs}`, so its base would not hold `{dep}`'s work; give both the same `merge into=`, or run from `{theirs}`",
                        task.name
                    ),
                });
            }
        }
    }
    Ok(targets)
}

fn program_sources(program: &Program) -> Vec<(String, String)> {
    program
        .sources
        .iter()
        .map(|(_, f)| (f.name.clone(), f.text.to_string()))
        .collect()
}

/// This machine's name, as `uname -n` says.
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
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
        let (now, _) = trail::now();
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
        Runner {
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
        }
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
        first: Option<(&str, Value)>,
    ) -> Result<RunReport, RunError> {
        let program = self.program;
        let _heartbeat = self.trail.heartbeat();
        self.state_flushed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let result: Result<RunReport, RunError> = async {
            if let Some((event, detail)) = first {
                self.emit(None, None, event, detail)?;
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
                                    let live = crate::run::reaper::live(&self.run_id, &task.name);
                                    let r = self.run_task(task, &target, restore.map(|r| *r)).await;
                                    drop(live);
                                    // The task is over: nothing is left to fail (the sweep
                                    // warns when escapees outlast it).
                                    let _ =
                                        crate::run::reaper::kill_adopted(&self.run_id, &task.name);
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
            "run.finished",
            json!({"outcome": outcome.name(), "exit_code": exit_code}),
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
        let unended = crate::run::resume::unended_tasks(&self.ledger(), &self.run_id, &names);
        // When the ledger cannot say, the run stays resumable: the side that loses nothing.
        if unended.as_ref().map_or(true, |u| !u.is_empty()) {
            let _ = self.emit(
                None,
                None,
                "run.stopped",
                // No exit code: the CLI decides it (64 for a usage error, else 70).
                json!({
                    "error": e.to_string(),
                    "unended": unended.unwrap_or_default(),
                }),
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
            "run.finished",
            json!({"outcome": "error", "exit_code": 70, "error": message}),
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
            "task.skipped",
            json!({ "reason": reason, "after": failed }),
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
        let mut detail = serde_json::to_value(wait).unwrap_or_else(|_| json!({}));
        detail["reason"] = json!(text);
        self.emit(Some(&task.name), None, "task.waiting", detail)?;
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
            "task.started",
            json!({"digest": task.meta.digest.to_string(), "base": base.to_string(), "target": target}),
        )
    }

    /// Records the start of a task: its digests, dependencies, base and sealed contents.
    pub(crate) fn begin_task(&self, task: &Task, base: Oid) -> Result<(), RunError> {
        let fields: Vec<(String, String)> = task
            .meta
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        let seal_digest = self.seal_digest(task, base)?;
        Ok(self.ledger().begin_task(&ledger::TaskStart {
            run: &self.run_id,
            name: &task.name,
            digest: &task.meta.digest.to_string(),
            fields: &fields,
            after: &task.after,
            base: &base.to_string(),
            seal_digest: &seal_digest,
        })?)
    }

    /// The digest of `task`'s sealed files at `base`.
    pub(crate) fn seal_digest(&self, task: &Task, base: Oid) -> Result<String, RunError> {
        let sealed = crate::run::seal::Seal::new(&task.seal).map_err(RunError::Seal)?;
        let repo =
            git2::Repository::open(&self.opts.repo_root).map_err(|source| RunError::Git {
                action: "open the repository".into(),
                source,
            })?;
        let files = crate::run::seal::sealed_files(&repo, base, &sealed).map_err(RunError::Seal)?;
        Ok(crate::run::seal::sealed_digest(&files))
    }
}

impl<'a> Runner<'a> {
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Where no sandbox grant may lead (see [`Protected`]).
    pub fn protected(&self) -> &[Protected] {
        &self.protected
    }

    /// `.mvk/runs/<run>`.
    pub fn run_dir(&self) -> &Path {
        self.trail.run_dir()
    }

    pub fn program(&self) -> &'a Program {
        self.program
    }

    /// The ledger, for one statement's use (see the note on [`Runner`]'s fields).
    pub fn ledger(&self) -> MutexGuard<'_, Ledger> {
        locked(&self.ledger)
    }

    fn state(&self) -> MutexGuard<'_, LoopState> {
        locked(&self.state)
    }

    fn history(&self) -> MutexGuard<'_, Vec<Tried>> {
        locked(&self.history)
    }

    fn run_started(&self) -> Instant {
        *locked(&self.run_started)
    }

    /// Re-plans `task` after accepted drift: a new epoch from `base`.
    pub(crate) fn reset_task(&self, task: &Task, base: Oid, epoch: u32) -> Result<(), RunError> {
        let fields: Vec<(String, String)> = task
            .meta
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        let seal_digest = self.seal_digest(task, base)?;
        self.ledger().reset_task(
            &ledger::TaskStart {
                run: &self.run_id,
                name: &task.name,
                digest: &task.meta.digest.to_string(),
                fields: &fields,
                after: &task.after,
                base: &base.to_string(),
                seal_digest: &seal_digest,
            },
            epoch,
        )?;
        self.emit(
            Some(&task.name),
            None,
            "task.replanned",
            json!({"digest": task.meta.digest.to_string(), "epoch": epoch, "base": base.to_string()}),
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
        let reason = format!(
            "accepted on attempt {}; landed as {} before the run was interrupted",
            a.number,
            &commit[..10.min(commit.len())]
        );
        self.ledger().finish_task(
            &self.run_id,
            &task.name,
            Outcome::Accepted.name(),
            Some(commit),
        )?;
        self.emit(
            Some(&task.name),
            None,
            "task.finished",
            json!({"outcome": "accepted", "reason": reason, "merged": commit}),
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

    pub fn repo_root(&self) -> &Path {
        &self.opts.repo_root
    }

    /// When `task` started: its wall budget counts from here.
    pub fn started(&self, task: &str) -> Instant {
        locked(&self.task_started)
            .get(task)
            .copied()
            .unwrap_or_else(Instant::now)
    }

    pub fn attempt_dir(&self, task: &str, attempt: u32) -> PathBuf {
        attempt::attempt_dir(self.trail.run_dir(), task, attempt)
    }

    /// The worktree pool's root directory (outside the repository).
    pub fn pool_root(&self) -> &Path {
        self.pool.root()
    }

    /// A lease on a clean checkout of `base` on `branch`. A worktree error that may pass (a
    /// neighbour's lease holding the branch, a slot's lock held by another process, the disk)
    /// is tried again after each of [`WORKTREE_WAITS`], each wait an event: a moment's trouble
    /// of the pool must not end the run; one that outlasts them is mvk's own error.
    pub async fn acquire(&self, base: Oid, branch: &str) -> Result<Lease, RunError> {
        let mut waits = WORKTREE_WAITS.iter();
        loop {
            let pool = self.pool.clone();
            let wanted = branch.to_string();
            let got = blocking("check out a worktree", move || {
                if crate::run::failing("worktree-acquire") {
                    return Err(worktree::WorktreeError::Io {
                        action: "check out a worktree",
                        path: pool.root().to_path_buf(),
                        source: std::io::Error::other("failing on purpose (MVK_FAILPOINT)"),
                    });
                }
                pool.acquire(base, &wanted)
            })
            .await?;
            let e = match got {
                Ok(lease) => return Ok(lease),
                Err(e) => e,
            };
            let Some(wait) = waits.next().filter(|_| e.is_transient()) else {
                return Err(e.into());
            };
            self.emit(
                None,
                None,
                "worktree.retry",
                json!({
                    "branch": branch,
                    "error": crate::run::error_chain(&e),
                    "wait_ms": attempt::ms(*wait),
                }),
            )?;
            tokio::time::sleep(*wait).await;
        }
    }

    /// Writes an event to the ledger and the trail (in that order), then shows it.
    pub fn emit(
        &self,
        task: Option<&str>,
        attempt: Option<u32>,
        event: &str,
        detail: Value,
    ) -> Result<(), RunError> {
        let (_, time_ms) = trail::now();
        self.ledger().event(
            &self.run_id,
            task,
            attempt,
            time_ms,
            event,
            &detail.to_string(),
        )?;
        let record = self.trail.event(task, attempt, event, detail)?;
        self.observer.event(&record);
        Ok(())
    }

    /// How many stop signals the processes counted in `window` sent mvk, once every signal
    /// delivered so far is decided; recorded as `event` (with `signals` added to `detail`) when
    /// there were any.
    pub async fn signals_sent(
        &self,
        window: &crate::run::signals::Window,
        task: &str,
        attempt: u32,
        event: &str,
        mut detail: Value,
    ) -> Result<u64, RunError> {
        crate::run::signals::settle().await;
        let signals = window.signals();
        if signals > 0 {
            detail["signals"] = json!(signals);
            self.emit(Some(task), Some(attempt), event, detail)?;
        }
        Ok(signals)
    }

    pub fn set_phase(&self, phase: &str, task: Option<&str>, attempt: u32) -> Result<(), RunError> {
        {
            let mut state = self.state();
            state.phase = phase.to_string();
            state.task = task.map(str::to_string);
            state.iteration = attempt;
        }
        if let Some(t) = task {
            self.task_state(t, |s| {
                s.state = "running".into();
                s.attempt = attempt;
            });
        }
        self.ledger().heartbeat(&self.run_id)?;
        let recent = locked(&self.state_written).is_some_and(|at| at.elapsed() < STATE_EVERY);
        if recent
            && self
                .state_flushed
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            self.state_behind
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        self.write_state()
    }

    fn task_state(&self, task: &str, f: impl FnOnce(&mut TaskState)) {
        if let Some(s) = self.state().tasks.iter_mut().find(|s| s.name == task) {
            f(s);
        }
    }

    fn write_state(&self) -> Result<(), RunError> {
        *locked(&self.state_written) = Some(Instant::now());
        self.state_behind
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let wall = attempt::ms(self.run_started().elapsed());
        let mut state = self.state();
        state.updated = trail::now().0;
        state.budget_spent.wall_ms = wall;
        Ok(self.trail.write_state(&state)?)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn ledger_begin_attempt(
        &self,
        task: &str,
        number: u32,
        rung: u32,
        agent: &str,
        branch: &str,
        worktree: &Path,
        base: Oid,
        epoch: u32,
    ) -> Result<i64, RunError> {
        self.task_state(task, |s| {
            s.rung = rung;
            s.agent = Some(agent.to_string());
            s.branch = Some(branch.to_string());
        });
        Ok(self.ledger().begin_attempt(&ledger::AttemptStart {
            run: &self.run_id,
            task,
            number,
            rung,
            agent,
            branch,
            worktree: &worktree.display().to_string(),
            base: &base.to_string(),
            epoch,
        })?)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn ledger_agent_done(
        &self,
        id: i64,
        exit_code: Option<i32>,
        timed_out: bool,
        duration: Duration,
        head: Option<Oid>,
        usage: &crate::run::adapter::Usage,
        retries: u32,
    ) -> Result<(), RunError> {
        let head = head.map(|h| h.to_string());
        let reported = usage.tokens() > 0 || usage.usd_micros.is_some();
        Ok(self.ledger().agent_done(
            id,
            &ledger::AgentEnd {
                exit_code,
                timed_out,
                duration_ms: attempt::ms(duration),
                head: head.as_deref(),
                usage: reported.then(|| ledger::Cost {
                    input_tokens: usage.input_tokens,
                    output_tokens: usage.output_tokens,
                    usd_micros: usage.usd_micros.unwrap_or(0),
                }),
                rate_limited: retries,
            },
        )?)
    }

    pub fn record_gate(
        &self,
        attempt_id: i64,
        task: &str,
        attempt: u32,
        phase: &str,
        ordinal: usize,
        run: &GateRun,
    ) -> Result<(), RunError> {
        let counts = run
            .counts()
            .map(|c| (c.executed, c.passed, c.failed, c.skipped));
        let log = run.log.display().to_string();
        let verdict = verdict_name(run.verdict);
        self.ledger().record_gate(
            attempt_id,
            &ledger::GateRow {
                phase,
                ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
                name: &run.gate,
                verdict,
                exit_code: run.exit_code,
                counts,
                evidence: &run.evidence_label(),
                reason: &run.reason,
                log: &log,
                duration_ms: run.duration_ms,
            },
        )?;
        self.emit(
            Some(task),
            Some(attempt),
            "gate.finished",
            json!({
                "gate": run.gate,
                "phase": phase,
                "verdict": verdict,
                "exit_code": run.exit_code,
                "counts": run.counts(),
                "reason": run.reason,
                "log": log,
            }),
        )
    }

    /// Runs one task through its ladder to an outcome; `resume` carries on a task a resumed
    /// run found unfinished.
    async fn run_task(
        &self,
        task: &'a Task,
        target: &str,
        resume: Option<Resume>,
    ) -> Result<(TaskReport, Option<PathBuf>), RunError> {
        let repo_root = self.opts.repo_root.clone();
        let mut base = land::branch_tip(&repo_root, target)?;
        let resume = resume.unwrap_or_default();
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
                "task.resumed",
                json!({
                    "digest": task.meta.digest.to_string(),
                    "base": base.to_string(),
                    "target": target,
                    "attempts": resume.progress.number,
                    "epoch": resume.progress.epoch,
                    "pending": resume.pending.as_ref().map(Pending::name),
                }),
            )?;
        } else {
            self.start_task(task, base, target)?;
        }
        let flow_budget = self.program.flow.as_ref().map(|f| f.budget.clone());
        let budgets = Budgets {
            wall: task.budget.wall,
            context_tokens: task.budget.context_tokens,
            deadline: flow_budget
                .as_ref()
                .and_then(|f| f.wall)
                .map(|w| self.run_started() + w),
        };
        let Progress {
            mut number,
            first,
            mut rung_idx,
            mut rung_used,
            mut last,
            mut same,
            mut spent_tokens,
            mut spent_usd,
            mut last_branch,
            epoch,
        } = resume.progress;
        let mut pending = resume.pending;
        for (n, branch, f) in resume.history {
            self.history().push((task.name.clone(), n, branch, f));
        }

        let end = |runner: &Runner<'a>,
                   outcome: Outcome,
                   reason: String,
                   merged: Option<Oid>,
                   branch: Option<String>,
                   attempts: u32,
                   tokens: u64,
                   usd: u64|
         -> Result<TaskReport, RunError> {
            let merged = merged.map(|m| m.to_string());
            runner.ledger().finish_task(
                &runner.run_id,
                &task.name,
                outcome.name(),
                merged.as_deref(),
            )?;
            runner.emit(
                Some(&task.name),
                None,
                "task.finished",
                json!({"outcome": outcome.name(), "reason": reason, "merged": merged}),
            )?;
            runner.task_state(&task.name, |s| {
                s.state = outcome.name().into();
                s.note = Some(reason.clone());
                s.merged = merged.clone();
            });
            if let Some(m) = &merged {
                runner.state().last_green_commit = Some(m.clone());
            }
            if outcome == Outcome::Accepted {
                runner.state().open_failures.retain(|o| o.task != task.name);
            }
            runner.write_state()?;
            Ok(TaskReport {
                name: task.name.clone(),
                outcome,
                attempts,
                merged,
                branch,
                usd: usd as f64 / 1e6,
                tokens,
                reason,
            })
        };

        // Every end of the task reports the attempts and spending so far.
        macro_rules! end_task {
            ($outcome:expr, $reason:expr, $merged:expr, $branch:expr) => {
                end(
                    self,
                    $outcome,
                    $reason,
                    $merged,
                    $branch,
                    number,
                    spent_tokens,
                    spent_usd,
                )?
            };
        }
        let ladder: Vec<policy::RungKind> =
            task.ladder.iter().map(policy::RungKind::from).collect();
        let rules = policy::Rules {
            ladder: &ladder,
            iterations: task.budget.iterations,
            same_failure: task.budget.same_failure,
            review_rounds: task.review.as_ref().map(|r| r.rounds),
            task: policy::Limits::of(task.budget.tokens, task.budget.usd_micros, task.budget.wall),
            flow: flow_budget
                .as_ref()
                .map(|f| policy::Limits::of(f.tokens, f.usd_micros, f.wall))
                .unwrap_or_default(),
            mode: self.opts.mode,
        };
        // The attempt that failed with `last` as `(ledger id, number, branch)`, when this process
        // made it; a resumed task finds it in the ledger.
        let mut last_attempt: Option<(i64, u32, String)> = None;
        // `last` was just recorded here (not restored by a resume), and whether no person has
        // seen it yet (an attempt a resume found passed and approved, whose landing failed, was).
        let (mut just_failed, mut unseen) = (false, false);
        loop {
            let pend = pending.take();
            let mut fresh_agent = None;
            if pend.is_none() {
                let rejections = match &last {
                    Some(f) if f.kind == FailureKind::Review && task.review.is_some() => self
                        .ledger()
                        .review_rejections(&self.run_id, &task.name, epoch)?,
                    _ => 0,
                };
                let (task_spent, flow_spent) = (
                    policy::Tally {
                        tokens: spent_tokens,
                        usd_micros: spent_usd,
                        wall_ms: attempt::ms(self.started(&task.name).elapsed()),
                    },
                    self.flow_tally()?,
                );
                let decision = policy::decide(
                    &rules,
                    &policy::Standing {
                        attempts: number - first,
                        rung: rung_idx,
                        on_rung: rung_used,
                        last: last.as_ref(),
                        same,
                        rejections,
                        fresh: just_failed && unseen,
                        task_spent,
                        flow_spent,
                    },
                );
                let stuck_here = std::mem::take(&mut just_failed);
                for &to in &decision.climbed {
                    self.emit(
                        Some(&task.name),
                        None,
                        "rung.climbed",
                        json!({"from": to, "to": to + 1, "rung": rung_label(&task.ladder[to])}),
                    )?;
                }
                (rung_idx, rung_used) = (decision.rung, decision.on_rung);
                // The attempt `last` came from, for a checkpoint on it.
                let made = |last: &Failure| -> Result<Option<(i64, u32, String)>, RunError> {
                    Ok(match &last_attempt {
                        Some(a) => Some(a.clone()),
                        None => self
                            .last_attempt_row(task, epoch, last.attempt)?
                            .map(|a| (a.id, a.number, a.branch)),
                    })
                };
                match decision.next {
                    policy::Next::Attempt => {
                        fresh_agent = match task.ladder.get(rung_idx) {
                            Some(Rung::Agent { agent, .. }) => Some(agent),
                            _ => None,
                        };
                    }
                    policy::Next::ReviewRounds => {
                        let f = last.as_ref().ok_or_else(|| no_failure(task))?;
                        let (id, n, branch) = made(f)?.ok_or_else(|| no_row(task, f))?;
                        let rounds = task.review.as_ref().map_or(0, |r| r.rounds);
                        let why = rounds_used(n, rounds, rejections, f);
                        let (r, path) =
                            self.review_checkpoint(task, target, f, (id, n, &branch), &why)?;
                        return Ok((r, Some(path)));
                    }
                    policy::Next::Stuck { outcome } => {
                        let f = last.as_ref().ok_or_else(|| no_failure(task))?;
                        if stuck_here {
                            self.emit(
                                Some(&task.name),
                                None,
                                "task.stuck",
                                json!({"signature": f.signature, "times": same}),
                            )?;
                        }
                        let reason = format!(
                            "stuck: the same failure {same} times in a row: {}",
                            f.criterion
                        );
                        let r = end_task!(outcome, reason, None, last_branch);
                        return Ok((r, None));
                    }
                    policy::Next::Step => {
                        let f = last.as_ref().ok_or_else(|| no_failure(task))?;
                        let (id, n, branch) = made(f)?.ok_or_else(|| no_row(task, f))?;
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
                        return Ok((r, None));
                    }
                    // The maker and the reviewer did not agree, and only a person can say
                    // which was wrong.
                    policy::Next::RungsOutOnReview
                        if let Some(f) = &last
                            && let Some((id, n, branch)) = made(f)? =>
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
                        let (r, path) =
                            self.review_checkpoint(task, target, f, (id, n, &branch), &why)?;
                        return Ok((r, Some(path)));
                    }
                    policy::Next::RungsOutOnReview => {
                        let reason = format!(
                            "every rung's attempts were used{}",
                            last_reason(last.as_ref())
                        );
                        let r = end_task!(Outcome::Rejected, reason, None, last_branch);
                        return Ok((r, None));
                    }
                    policy::Next::RungsOut { outcome } => {
                        let reason = format!(
                            "every rung's attempts were used{}",
                            last_reason(last.as_ref())
                        );
                        let r = end_task!(outcome, reason, None, last_branch);
                        return Ok((r, None));
                    }
                    policy::Next::Human => {
                        let path = self.stop_for_person(task, target, last.as_ref(), None)?;
                        // A person answers on the last attempt: approve judges its branch as
                        // it now stands (they may have finished the work there) and lands it
                        // if it passes; reject gives one more attempt, told their reason.
                        let made = self.ledger().attempt_rows(&self.run_id, &task.name)?;
                        if let Some(a) = made
                            .iter()
                            .filter(|a| a.epoch == epoch && a.state != "abandoned")
                            .max_by_key(|a| a.number)
                        {
                            let question = format!(
                                "the ladder reached `human` after attempt {n}{}; finish the work on branch `{branch}` and approve to have it checked (seal, gates, review) and landed, or reject with a reason for one more attempt (see {})",
                                last_reason(last.as_ref()),
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
                            last_reason(last.as_ref())
                        );
                        let r = end_task!(Outcome::Human, reason, None, last_branch);
                        return Ok((r, Some(path)));
                    }
                    policy::Next::Budget {
                        budget,
                        spent,
                        limit,
                        outcome,
                    } => {
                        let reason = self.budget_exhausted(
                            &task.name,
                            (budget.name(), spent, limit),
                            last.as_ref(),
                        )?;
                        let r = end_task!(outcome, reason, None, last_branch);
                        return Ok((r, None));
                    }
                }
            }
            // An attempt a resume found half done goes on from its last durable step;
            // otherwise a fresh one.
            // Whether a passed attempt must still be put to a person (batch and step modes): a
            // fresh one always; one a resume found passed, unless a person already approved it.
            let mut ask = true;
            let (spec, record, settled) = match pend {
                None => {
                    number += 1;
                    rung_used += 1;
                    let agent = fresh_agent.ok_or_else(|| RunError::Config {
                        message: format!(
                            "task `{}` has no agent on rung {}",
                            task.name,
                            rung_idx + 1
                        ),
                    })?;
                    let spec = AttemptSpec {
                        task,
                        number,
                        rung: u32::try_from(rung_idx + 1).unwrap_or(u32::MAX),
                        agent,
                        base,
                        previous: last.as_ref(),
                        epoch,
                    };
                    let record = attempt::run_attempt(self, &spec, &budgets).await?;
                    (spec, record, false)
                }
                Some(p) => {
                    let row = p.row();
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
                        previous: last.as_ref(),
                        epoch,
                    };
                    let head = oid(row.head.as_deref().unwrap_or_default())?;
                    match p {
                        Pending::Judge(row) => {
                            let record = attempt::judge(
                                self,
                                &spec,
                                &budgets,
                                attempt::Judged {
                                    ledger_id: row.id,
                                    branch: row.branch.clone(),
                                    head,
                                    exit_code: row.exit_code,
                                    timed_out: row.timed_out.unwrap_or(false),
                                    retries: row.rate_limited,
                                    // Already counted: the restored spending includes it.
                                    usage: crate::run::adapter::Usage::default(),
                                    lease: None,
                                },
                            )
                            .await?;
                            (spec, record, false)
                        }
                        Pending::Land(row, approved) => {
                            ask = !approved;
                            let record = attempt::AttemptRecord {
                                ledger_id: row.id,
                                number: row.number,
                                branch: row.branch.clone(),
                                head: Some(head),
                                usage: crate::run::adapter::Usage::default(),
                                end: AttemptEnd::Passed {
                                    head,
                                    gates: Vec::new(),
                                },
                            };
                            (spec, record, true)
                        }
                    }
                }
            };
            let number = spec.number;
            spent_tokens = spent_tokens.saturating_add(record.usage.tokens());
            spent_usd = spent_usd.saturating_add(record.usage.usd_micros.unwrap_or(0));
            self.state().budget_spent.attempts += 1;
            self.state().budget_spent.tokens += record.usage.tokens();
            self.state().budget_spent.usd_micros += record.usage.usd_micros.unwrap_or(0);
            let wall = attempt::ms(self.started(&task.name).elapsed());
            self.task_state(&task.name, |s| {
                s.spent.attempts = number;
                s.spent.tokens = spent_tokens;
                s.spent.usd_micros = spent_usd;
                s.spent.wall_ms = wall;
            });
            last_branch = Some(record.branch.clone());

            let failure = match record.end {
                AttemptEnd::WallSpent => {
                    let f = Failure::new(
                        number,
                        FailureKind::Agent,
                        "the attempt ends within the wall budget (it ran out during the attempt)"
                            .into(),
                        &["wall"],
                    );
                    self.finish_attempt(record.ledger_id, Some(&f))?;
                    continue; // the budget check above stops the task
                }
                AttemptEnd::Failed(f) => f,
                AttemptEnd::Passed { head, .. } => {
                    if !settled {
                        self.emit(
                            Some(&task.name),
                            Some(number),
                            "attempt.passed",
                            json!({"head": head.to_string()}),
                        )?;
                        self.finish_attempt(record.ledger_id, None)?;
                        crate::run::failpoint("attempt-passed");
                    }
                    // Also after a crash between the attempt's end and its checkpoint: a change
                    // lands in batch or step mode only once a person said so.
                    if let Some(kind) = policy::on_pass(self.opts.mode, !ask) {
                        let question = format!(
                            "attempt {number} passed{}; approve to land it on `{target}`, or reject with a reason for another attempt",
                            if task.review.is_some() {
                                " seal, gates and review"
                            } else {
                                " seal and gates"
                            }
                        );
                        let r = self.checkpoint(
                            task,
                            (record.ledger_id, number, &record.branch),
                            kind,
                            true,
                            &question,
                        )?;
                        return Ok((r, None));
                    }
                    // While its change waits to land the task holds its scope, not a slot of
                    // `parallel`: mvk's landing work is not an agent's or a gate's.
                    locked(&self.slots).landing.insert(task.name.clone());
                    self.slots_changed.notify_waiters();
                    let landing = self
                        .land(task, target, &spec, (record.ledger_id, head), false)
                        .await?;
                    if !matches!(landing, Landing::Retry(..)) {
                        locked(&self.slots).landing.remove(&task.name);
                    }
                    match landing {
                        Landing::Landed(commit) => {
                            let reason = match commit {
                                Some(c) => format!(
                                    "accepted on attempt {number}; landed on `{target}` as {}",
                                    short(c)
                                ),
                                None => format!(
                                    "accepted on attempt {number}; the change was empty, nothing to land"
                                ),
                            };
                            let r =
                                end_task!(Outcome::Accepted, reason, commit, Some(record.branch));
                            return Ok((r, None));
                        }
                        Landing::Retry(f, new_base) => {
                            base = new_base;
                            // Recorded before it waits for a slot: a crash meanwhile resumes
                            // from the failure, not by landing the change again.
                            self.fail(task, number, &f)?;
                            self.rejoin(&task.name).await;
                            f
                        }
                        Landing::Rejected(outcome, reason) => {
                            let r = end_task!(outcome, reason, None, Some(record.branch));
                            return Ok((r, None));
                        }
                        Landing::Human(reason) => {
                            self.history().push((
                                task.name.clone(),
                                number,
                                record.branch.clone(),
                                None,
                            ));
                            let path = self.stop_for_person(task, target, None, Some(&reason))?;
                            let r = end_task!(Outcome::Human, reason, None, Some(record.branch));
                            return Ok((r, Some(path)));
                        }
                        Landing::Wait(question) => {
                            let r = self.checkpoint(
                                task,
                                (record.ledger_id, number, &record.branch),
                                CheckpointKind::Landing,
                                true,
                                &question,
                            )?;
                            return Ok((r, None));
                        }
                    }
                }
            };
            if failure.kind != FailureKind::Merge {
                self.finish_attempt(record.ledger_id, Some(&failure))?;
                self.fail(task, number, &failure)?;
            }
            same = if last
                .as_ref()
                .is_some_and(|l| l.signature == failure.signature)
            {
                same + 1
            } else {
                1
            };
            self.history().push((
                task.name.clone(),
                number,
                record.branch.clone(),
                Some(failure.clone()),
            ));
            if failure.kind == FailureKind::Review && task.review.is_some() {
                crate::run::failpoint("review-rejected");
            }
            last_attempt = Some((record.ledger_id, number, record.branch.clone()));
            (just_failed, unseen) = (true, !settled);
            last = Some(failure);
        }
    }

    /// Stops at a `review` checkpoint on attempt `(id, number, branch)`, whose rejection
    /// `failure` the maker and the reviewer could not settle (`why`): a person decides, and
    /// approving lands the attempt the reviewer rejected.
    fn review_checkpoint(
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
    fn last_attempt_row(
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
    fn checkpoint(
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
            "checkpoint.waiting",
            json!({"checkpoint": id, "kind": kind.name(), "lands": lands, "question": question}),
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
    fn paused(&self, reports: Vec<TaskReport>) -> Result<RunReport, RunError> {
        let waiting: Vec<&str> = reports
            .iter()
            .filter(|r| r.outcome == Outcome::Waiting)
            .map(|r| r.name.as_str())
            .collect();
        self.ledger().pause_run(&self.run_id)?;
        self.emit(None, None, "run.paused", json!({"waiting": waiting}))?;
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

    fn finish_attempt(&self, id: i64, failure: Option<&Failure>) -> Result<(), RunError> {
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

    fn fail(&self, task: &Task, number: u32, f: &Failure) -> Result<(), RunError> {
        self.emit(
            Some(&task.name),
            Some(number),
            "attempt.failed",
            json!({
                "kind": f.kind.name(),
                "signature": f.signature,
                "criterion": f.criterion,
                "gate": f.gate,
                "exit_code": f.exit_code,
                "counts": f.counts,
                // Whole, so a resume can replay a failure that has no attempt row of its own
                // (a landing that conflicted).
                "failure": f,
            }),
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
    async fn rejoin(&self, task: &str) {
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
    fn flow_tally(&self) -> Result<policy::Tally, RunError> {
        let s = self.ledger().spent(&self.run_id, None)?;
        Ok(policy::Tally {
            tokens: s.input_tokens.saturating_add(s.output_tokens),
            usd_micros: s.usd_micros,
            wall_ms: attempt::ms(self.run_started().elapsed()),
        })
    }

    /// Stops `task` for a person: writes HANDOFF.md (what was tried and where the work is) and
    /// says so in a `human.handoff` event, with the reason and the reviewer's blockers when a
    /// rejection stopped it.
    fn stop_for_person(
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
            if task.seal.is_empty() {
                "none".to_string()
            } else {
                task.seal
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
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
        let path = self
            .trail
            .write_handoff(&attempt::slug(&task.name), &text)?;
        let mut detail = json!({"file": path.display().to_string()});
        if let Some(why) = why {
            detail["reason"] = json!(why);
        }
        if let Some(f) = last.filter(|f| !f.blockers.is_empty()) {
            detail["blockers"] = json!(f.blockers);
        }
        self.emit(Some(&task.name), None, "human.handoff", detail)?;
        Ok(path)
    }
}

fn verdict_name(v: GateVerdict) -> &'static str {
    match v {
        GateVerdict::Pass => "pass",
        GateVerdict::Fail => "fail",
        GateVerdict::Unknown => "unknown",
    }
}

fn rung_label(r: &Rung) -> String {
    match r {
        Rung::Agent { agent, .. } => agent.label(),
        Rung::Human => "human".into(),
    }
}

/// Why attempt `number`'s rejection, the `rejections`-th, went past the review's `rounds`.
fn rounds_used(number: u32, rounds: u32, rejections: u32, failure: &Failure) -> String {
    let blockers: Vec<String> = failure
        .blockers
        .iter()
        .map(crate::prompt::Blocker::line)
        .collect();
    format!(
        "the reviewer rejected attempt {number} after {rounds} round{} of rework ({rejections} rejection{} in all): {}",
        if rounds == 1 { "" } else { "s" },
        if rejections == 1 { "" } else { "s" },
        blockers.join("; ")
    )
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

fn last_reason(f: Option<&Failure>) -> String {
    f.map_or(String::new(), |f| {
        format!("; last failure: {}", f.criterion)
    })
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
            "budget.exhausted",
            json!({"budget": which, "spent": spent, "limit": limit}),
        )?;
        Ok(format!(
            "the {which} budget ran out ({}){}",
            budget_text(which, spent, limit),
            last_reason(last)
        ))
    }
}

fn budget_text(which: &str, spent: u64, limit: u64) -> String {
    if which.ends_with("usd") {
        format!(
            "{} of {}",
            crate::plan::format_usd(spent),
            crate::plan::format_usd(limit)
        )
    } else if which.ends_with("wall") {
        format!(
            "{} of {}",
            crate::plan::format_duration(Duration::from_millis(spent)),
            crate::plan::format_duration(Duration::from_millis(limit))
        )
    } else {
        format!("{spent} of {limit}")
    }
}

fn short(id: Oid) -> String {
    id.to_string()[..10].to_string()
}

/// The program as JSON for the ledger: what a resume needs without the original files.
fn program_json(program: &Program) -> Result<String, RunError> {
    serde_json::to_string(&crate::drift::StoredIr::of(program)).map_err(|e| RunError::Config {
        message: format!("cannot encode the program for the ledger: {e}"),
    })
}

/// `20261203T001945Z-3fa2`: sortable by time, unique by its random part.
pub fn new_run_id() -> Result<String, RunError> {
    let (time, _) = trail::now();
    let stamp: String = time
        .chars()
        .take(19)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let nonce = crate::run::evidence::new_nonce().map_err(|e| RunError::Config {
        message: e.to_string(),
    })?;
    Ok(format!("{stamp}-{}", &nonce[..4]))
}

/// Adds `/.mvk/` to the repository's `info/exclude` so mvk's files never show in `git status`.
fn exclude_mvk_dir(repo_root: &Path) -> Result<(), RunError> {
    let repo = git2::Repository::open(repo_root).map_err(|source| RunError::Git {
        action: format!("open the repository at `{}`", repo_root.display()),
        source,
    })?;
    let info = repo.commondir().join("info");
    let path = info.join("exclude");
    let existing = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(RunError::Io {
                action: "read",
                path,
                source,
            });
        }
    };
    let listed = String::from_utf8_lossy(&existing)
        .lines()
        .any(|l| l.trim() == "/.mvk/" || l.trim() == ".mvk/" || l.trim() == "/.mvk");
    if listed {
        return Ok(());
    }
    std::fs::create_dir_all(&info).map_err(|source| RunError::Io {
        action: "create",
        path: info.clone(),
        source,
    })?;
    // Appended to what is there, byte for byte: the user's own patterns stay as they are.
    let mut text = existing;
    if !text.is_empty() && !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    text.extend_from_slice(b"# mvk's runs, ledger and status files\n/.mvk\n");
    std::fs::write(&path, text).map_err(|source| RunError::Io {
        action: "write",
        path,
        source,
    })
}

/// Records a run's start in the ledger: its program (IR and sources), base and target.
fn begin_run(
    ledger: &mut Ledger,
    program: &Program,
    opts: &RunOptions,
    base: Oid,
    target: &str,
) -> Result<(), RunError> {
    begin_run_of(
        ledger,
        program,
        opts,
        (base, target),
        ledger::RunCommand::Apply,
    )
}

/// Records the start of a run that `command` started (for `attempt_once`: an attempt-only run,
/// which `mvk resume` refuses to continue as a landing run).
fn begin_run_of(
    ledger: &mut Ledger,
    program: &Program,
    opts: &RunOptions,
    (base, target): (Oid, &str),
    command: ledger::RunCommand,
) -> Result<(), RunError> {
    let ir_json = program_json(program)?;
    let sources = program_sources(program);
    let kind = match program.kind {
        crate::ir::ProgramKind::Flow => "flow",
        _ => "loop",
    };
    ledger.begin_run_of(
        &ledger::RunStart {
            id: &opts.run_id,
            file: &opts.file,
            program: &program.name,
            kind,
            program_digest: &program.digest.to_string(),
            ir_json: &ir_json,
            sources: &sources,
            repo_root: &opts.repo_root.display().to_string(),
            base_commit: &base.to_string(),
            target_branch: target,
            pid: std::process::id(),
            host: &host_name(),
            mode: opts.mode.name(),
        },
        command,
    )?;
    Ok(())
}

/// What [`attempt_once`] did: the run it recorded, the task, and how its one attempt ended.
#[derive(Debug)]
pub struct OnceReport {
    pub run: String,
    pub task: String,
    /// The attempt's ledger row id.
    pub attempt_id: i64,
    pub number: u32,
    pub base: Oid,
    pub head: Option<Oid>,
    pub branch: String,
    /// How the run was recorded as ending (a passed attempt is `skipped`: nothing lands).
    pub outcome: Outcome,
    /// `None` when the attempt passed seal, gates and review.
    pub failure: Option<Failure>,
    /// What its agent (and reviewer) spent.
    pub usage: crate::run::adapter::Usage,
}

/// Which attempt of its task `attempt_once` makes: by default the first, on the first rung,
/// with no failure before it. An executor whose attempts run elsewhere (`run::temporal`) asks
/// for attempt `number` on `rung`, told `previous`, so its prompt and environment are the ones
/// the local driver would give that attempt.
#[derive(Debug, Clone)]
pub struct OnceSpec {
    pub number: u32,
    /// 1-based, as the ledger counts rungs.
    pub rung: u32,
    pub previous: Option<Failure>,
    /// The commit to start from and the branch it stands for (a Temporal worker's base, fetched
    /// from the coordinator); `None`: the task's target's tip here.
    pub start: Option<(Oid, String)>,
}

impl Default for OnceSpec {
    fn default() -> Self {
        OnceSpec {
            number: 1,
            rung: 1,
            previous: None,
            start: None,
        }
    }
}

/// One evidenced attempt of one task (`opts.task`, or the program's only task) from its
/// target's tip, judged exactly as `apply` judges one (seal, gates with evidence, reviewer),
/// on `once`'s rung (the first by default); nothing lands. It is recorded as a run of its own
/// that ends with the attempt (`skipped` when it passed: its change waits on its branch), in
/// `step` mode so that a `mvk resume` of it after a crash stops for a person before any
/// landing.
pub async fn attempt_once(
    program: &Program,
    opts: &RunOptions,
    observer: &dyn Observer,
    once: &OnceSpec,
) -> Result<OnceReport, RunError> {
    let i = match (&opts.task, program.tasks.len()) {
        (None, 1) => 0,
        (None, _) => {
            return Err(RunError::Config {
                message: format!(
                    "`{}` has {} tasks; name the one to attempt: {}",
                    opts.file,
                    program.tasks.len(),
                    program
                        .tasks
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        (Some(_), _) => select(program, opts)?[0],
    };
    let task = &program.tasks[i];
    let number = once.number.max(1);
    let rung = once.rung.max(1);
    let agent = match task.ladder.get(rung as usize - 1) {
        Some(Rung::Agent { agent, .. }) => agent,
        Some(Rung::Human) if rung == 1 => {
            return Err(RunError::Config {
                message: format!(
                    "task `{}` starts its ladder with `human`: there is no agent to attempt it",
                    task.name
                ),
            });
        }
        _ => {
            return Err(RunError::Config {
                message: format!("task `{}` has no agent on rung {rung}", task.name),
            });
        }
    };
    let mut opening = open_run(program, opts)?;
    let (base, target) = match &once.start {
        Some((base, target)) => (*base, target.clone()),
        None => {
            let targets = targets_of(program, &[i], &opts.repo_root, None)?;
            let target = targets.get(&i).cloned().unwrap_or_else(|| "HEAD".into());
            (land::branch_tip(&opts.repo_root, &target)?, target)
        }
    };
    begin_run_of(
        &mut opening.ledger,
        program,
        opts,
        (base, &target),
        ledger::RunCommand::Attempt,
    )?;
    let runner = Runner::new(program, opts, opening, observer, &[i]);
    let _heartbeat = runner.trail.heartbeat();
    runner.emit(
        None,
        None,
        "run.started",
        json!({
            "file": opts.file,
            "program": program.name,
            "digest": program.digest.to_string(),
            "base": base.to_string(),
            "target": target,
            "tasks": [task.name.clone()],
            "whole": false,
            "current": land::current_branch(&opts.repo_root).ok(),
            "attempt_only": true,
        }),
    )?;
    runner.start_task(task, base, &target)?;
    let budgets = Budgets {
        wall: task.budget.wall,
        context_tokens: task.budget.context_tokens,
        deadline: None,
    };
    let spec = AttemptSpec {
        task,
        number,
        rung,
        agent,
        base,
        previous: once.previous.as_ref(),
        epoch: 0,
    };
    let result = async {
        let attempt::AttemptRecord {
            ledger_id,
            head,
            branch,
            end,
            usage,
            ..
        } = attempt::run_attempt(&runner, &spec, &budgets).await?;
        let (failure, outcome) = match end {
            AttemptEnd::Passed { head, .. } => {
                runner.emit(
                    Some(&task.name),
                    Some(number),
                    "attempt.passed",
                    json!({"head": head.to_string()}),
                )?;
                runner.finish_attempt(ledger_id, None)?;
                (None, Outcome::Skipped)
            }
            AttemptEnd::Failed(f) => {
                let outcome = if f.kind == FailureKind::Unknown {
                    Outcome::Unknown
                } else {
                    Outcome::Rejected
                };
                (Some(f), outcome)
            }
            AttemptEnd::WallSpent => (
                Some(Failure::new(
                    number,
                    FailureKind::Agent,
                    "the attempt ends within the wall budget (it ran out during the attempt)"
                        .into(),
                    &["wall"],
                )),
                Outcome::Budget,
            ),
        };
        let reason = match &failure {
            Some(f) => {
                runner.finish_attempt(ledger_id, Some(f))?;
                runner.fail(task, number, f)?;
                format!("attempt {number} failed: {}", f.criterion)
            }
            None => format!(
                "attempt {number} passed; not landed (one attempt only): its change is on `{branch}`"
            ),
        };
        runner
            .ledger()
            .finish_task(&runner.run_id, &task.name, outcome.name(), None)?;
        runner.emit(
            Some(&task.name),
            None,
            "task.finished",
            json!({"outcome": outcome.name(), "reason": reason, "merged": null}),
        )?;
        Ok::<_, RunError>(((ledger_id, head, branch, usage), failure, outcome))
    }
    .await;
    let (outcome, exit_code) = match &result {
        Ok((_, _, outcome)) => (outcome.name(), outcome.exit_code()),
        Err(_) => ("error", 70),
    };
    // Also on mvk's own error, so that no one waits for the run (best effort then: the error
    // may be the ledger itself).
    let finished = runner
        .ledger()
        .finish_run(&runner.run_id, outcome, i32::from(exit_code));
    let detail = match &result {
        Ok(_) => json!({"outcome": outcome, "exit_code": exit_code}),
        Err(e) => json!({"outcome": outcome, "exit_code": exit_code, "error": e.to_string()}),
    };
    let emitted = runner.emit(None, None, "run.finished", detail);
    {
        let mut state = runner.state();
        state.outcome = Some(outcome.into());
        state.exit_code = Some(exit_code);
        state.phase = "finished".into();
    }
    let written = runner.write_state();
    let ((attempt_id, head, branch, usage), failure, outcome) = result?;
    finished?;
    emitted?;
    written?;
    Ok(OnceReport {
        run: runner.run_id.clone(),
        task: task.name.clone(),
        attempt_id,
        number,
        base,
        head,
        branch,
        outcome,
        failure,
        usage,
    })
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
