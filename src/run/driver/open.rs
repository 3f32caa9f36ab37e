//! A program and the options of `mvk apply` (or a ledger's unfinished run, for `mvk resume`) in;
//! an opened run out: its id, its lock, its ledger rows and trail, the tasks selected and their
//! targets, handed to the [`Runner`](super::Runner) that drives it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::Oid;

use super::{Observer, RunError, RunOptions, RunReport, Runner};
use crate::ir::Program;
use crate::ledger::{self, Ledger};
use crate::run::event::Event;
use crate::run::git::land;
use crate::run::host::Host;
use crate::run::sandbox::Protected;
use crate::run::trail::Trail;
use crate::run::worktree::Pool;

/// Runs `program` in `opts.repo_root` to an end. `Err` only for mvk's own failures (the
/// ledger, git, the disk); whatever agents and gates do is in the report.
pub(crate) async fn apply(
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
            Some(opened.started),
        )
        .await
}

/// A new run of `mvk apply`, opened but not yet started: its runner, the tasks selected (in
/// plan order) with their target branches, and the detail of its `run.started` event.
pub(crate) struct Opened<'a> {
    pub(crate) runner: Runner<'a>,
    pub(crate) selected: Vec<usize>,
    pub(crate) targets: BTreeMap<usize, String>,
    pub(crate) started: Event,
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
    let started = Event::RunStarted {
        file: opts.file.clone(),
        program: program.name.clone(),
        digest: program.digest.to_string(),
        base: base.to_string(),
        target: first_target,
        tasks: selected
            .iter()
            .map(|&i| program.tasks[i].name.clone())
            .collect(),
        // What a resume needs to go on as this run would have: whether it ran the whole program,
        // and where tasks without `merge into=` land.
        whole: opts.task.is_none(),
        current: land::current_branch(repo_root).ok(),
        attempt_only: None,
        executor: executor.map(str::to_string),
        temporal: None,
    };
    Ok(Opened {
        runner,
        selected,
        targets,
        started,
    })
}

/// How a resumed run goes on: what the ledger says of it, and the drift that was accepted.
pub(crate) struct ResumeFrom {
    pub(crate) run: ledger::RunRow,
    /// The accepted drift, or `None` when the definition is unchanged.
    pub(crate) drift: Option<crate::drift::DriftReport>,
    /// `interrupted` or `paused`.
    pub(crate) found: String,
}

/// Continues the interrupted or paused run `from.run` with `program` (the definition as
/// compiled now: unchanged, or with accepted drift). Finished tasks are not run again; a task
/// caught in flight carries on from its last durable step: an attempt whose agent finished is
/// judged from the seal check on, one whose agent was running is restarted under its number, a
/// merge that may have happened is checked against git and never done twice.
pub(crate) async fn resume(
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
    let restored = crate::run::driver::resume::restore(&runner, &selected, &targets, &replanned)?;
    record_resume(&runner, program, &from)?;
    runner.drive(&selected, &targets, restored, None).await
}

/// An interrupted run, opened again for its resume: its runner, the tasks it goes on with (in
/// plan order) and their target branches, and how it began.
pub(crate) struct Reopened<'a> {
    pub(crate) runner: Runner<'a>,
    pub(crate) selected: Vec<usize>,
    pub(crate) targets: BTreeMap<usize, String>,
    pub(crate) began: crate::run::driver::resume::Began,
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
    let orphans = crate::run::exec::reaper::kill_orphans(opening.trail.run_dir(), &run_id);
    let mut ref_locks = crate::run::driver::resume::clear_ref_locks(&opts.repo_root, &run_id)?;
    ref_locks.extend(opening.pool.clear_idle_locks()?);
    let began = crate::run::driver::resume::began(&opening.ledger, &from.run)?;
    let selected = crate::run::driver::resume::selected_tasks(&began, program);
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
        Event::RunResumed {
            found: from.found.clone(),
            orphans_killed: orphans,
            ref_locks_removed: ref_locks
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
            digest: program.digest.to_string(),
            drift_accepted: from
                .drift
                .as_ref()
                .map(|d| d.replanned().into_iter().collect()),
        },
    )?;
    let last = crate::run::driver::resume::last_sign_of_life(
        &runner.ledger(),
        &run_id,
        None,
        runner.run_dir(),
    )?;
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
pub(super) fn open_run(program: &Program, opts: &RunOptions) -> Result<Opening, RunError> {
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
    crate::run::exec::reaper::become_subreaper().map_err(|source| RunError::Io {
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
pub(super) struct Opening {
    pub(super) ledger: Ledger,
    pub(super) trail: Trail,
    pub(super) pool: Pool,
    /// Where no sandbox grant may lead (see [`refuse_exposing_grants`]).
    pub(super) protected: Vec<Protected>,
}

/// Refuses, before anything of the run is written, a sandbox that grants a place where mvk
/// keeps what no confined process may write (review r8d, W3): `worktrees` holds the pools. Out
/// come those places, which each sandboxed start checks its grants against again.
pub(super) fn refuse_exposing_grants(
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
pub(super) fn select(program: &Program, opts: &RunOptions) -> Result<Vec<usize>, RunError> {
    match &opts.task {
        None => Ok(crate::plan::plan(program).order),
        Some(name) => match program.tasks.iter().position(|t| &t.name == name) {
            Some(i) => Ok(vec![i]),
            None => Err(RunError::Config {
                message: format!(
                    "`{}` has no task `{name}`; it has: {}",
                    opts.file,
                    task_names(program)
                ),
            }),
        },
    }
}

/// Each selected task's target branch, checked to exist. `current` is the branch a loop
/// without `merge into=` lands on (the one checked out, when `None`).
pub(super) fn targets_of(
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

pub(super) fn program_sources(program: &Program) -> Vec<(String, String)> {
    program
        .sources
        .iter()
        .map(|(_, f)| (f.name.clone(), f.text.to_string()))
        .collect()
}

/// This machine's name, as `uname -n` says.
pub(crate) fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The program as JSON for the ledger: what a resume needs without the original files.
pub(super) fn program_json(program: &Program) -> Result<String, RunError> {
    serde_json::to_string(&crate::drift::StoredIr::of(program)).map_err(|e| RunError::Config {
        message: format!("cannot encode the program for the ledger: {e}"),
    })
}

/// `20261203T001945Z-3fa2`: sortable by time, unique by its random part.
pub(crate) fn new_run_id() -> Result<String, RunError> {
    let (time, _) = crate::clock::now();
    let stamp: String = time
        .chars()
        .take(19)
        .filter(|c| c.is_ascii_digit() || *c == 'T')
        .collect();
    let nonce = crate::run::judge::evidence::new_nonce().map_err(|e| RunError::Config {
        message: e.to_string(),
    })?;
    Ok(format!("{stamp}-{}", &nonce[..4]))
}

/// Adds `/.mvk/` to the repository's `info/exclude` so mvk's files never show in `git status`.
pub(super) fn exclude_mvk_dir(repo_root: &Path) -> Result<(), RunError> {
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
pub(super) fn begin_run(
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
pub(super) fn begin_run_of(
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

/// The program's task names, for a message that asks for one.
pub(super) fn task_names(program: &Program) -> String {
    let names: Vec<&str> = program.tasks.iter().map(|t| t.name.as_str()).collect();
    names.join(", ")
}
