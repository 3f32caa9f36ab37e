//! An interrupted run's ledger rows in; what each of its tasks carries on from out: finished
//! tasks keep their outcome, an attempt caught in flight is abandoned (its agent was running)
//! or judged from the seal check (its agent had finished), a merge intent is settled against
//! git before anything else so that no merge is ever done twice, and drift is measured.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use git2::{Oid, Repository};
use serde_json::json;

use crate::drift::{DriftReport, StoredIr, ValueChange};
use crate::ir::{Program, Task};
use crate::ledger::{self, AttemptRow, Ledger, RunRow, TaskRowState};
use crate::run::attempt::{self, Failure, FailureKind};
use crate::run::driver::{
    Outcome, Pending, Progress, Restored, Resume, RunError, Runner, TaskReport,
};
use crate::run::event::Event;
use crate::run::git::land;
use crate::run::host::Host;

/// What a run's `run.started` event says of how it began.
#[derive(Debug, Default)]
pub(crate) struct Began {
    /// The tasks it set out to run.
    tasks: Vec<String>,
    /// Whether those were all of its program's (no `--task`).
    whole: bool,
    /// The branch checked out when it began: where tasks without `merge into=` land.
    pub(crate) current: Option<String>,
    /// The executor that ran it, when not the local one (`temporal`).
    pub(crate) executor: Option<String>,
}

/// How the run began, from its `run.started` event (runs recorded before `whole` and `current`
/// were: from the program it began with, and its target branch).
pub(crate) fn began(ledger: &Ledger, run: &RunRow) -> Result<Began, RunError> {
    // Read as JSON, not as the typed event: a key that is absent (an older mvk's line) means
    // something else here than the default the typed reading gives it.
    let detail: serde_json::Value = ledger
        .first_event_detail(&run.id, "run.started")?
        .and_then(|d| serde_json::from_str(&d).ok())
        .unwrap_or_default();
    let tasks: Vec<String> = detail
        .get("tasks")
        .and_then(|t| serde_json::from_value(t.clone()).ok())
        .unwrap_or_default();
    let whole = match detail.get("whole").and_then(serde_json::Value::as_bool) {
        Some(w) => w,
        None => {
            // The program it began with is the one its `run.started` names, not the one a
            // later resume with accepted drift recorded on the run.
            let first = detail
                .get("digest")
                .and_then(serde_json::Value::as_str)
                .unwrap_or(&run.program_digest);
            ledger
                .stored_program(first)?
                .and_then(|p| serde_json::from_str::<StoredIr>(&p.ir_json).ok())
                .is_none_or(|s| s.tasks.len() <= tasks.len())
        }
    };
    let current = match detail.get("current") {
        Some(c) => c.as_str().map(str::to_string),
        None => Some(run.target_branch.clone()),
    };
    let executor = detail
        .get("executor")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    Ok(Began {
        tasks,
        whole,
        current,
        executor,
    })
}

/// Which tasks of run `run` did not end: of `names` (the tasks it set out to run), those the
/// ledger does not hold finished, and any other it holds begun and not finished; sorted.
pub(crate) fn unended_tasks(
    ledger: &Ledger,
    run: &str,
    names: &[String],
) -> Result<Vec<String>, RunError> {
    let rows = ledger.task_rows(run)?;
    let ended: BTreeSet<&str> = rows
        .iter()
        .filter(|r| r.state == TaskRowState::Finished)
        .map(|r| r.name.as_str())
        .collect();
    let mut unended: BTreeSet<String> = names
        .iter()
        .filter(|n| !ended.contains(n.as_str()))
        .cloned()
        .collect();
    unended.extend(
        rows.iter()
            .filter(|r| r.state != TaskRowState::Finished)
            .map(|r| r.name.clone()),
    );
    Ok(unended.into_iter().collect())
}

/// The tasks that did not end of a run recorded finished on mvk's own error (`error`, exit 70)
/// while they had not: what an earlier mvk wrote when a worktree error stopped it, which
/// `mvk resume` takes up again as an interrupted run. `None` for any other run, and for a run
/// on Temporal (its workflow closed, nothing can continue it).
pub(crate) fn stopped_on_error(
    ledger: &Ledger,
    run: &RunRow,
) -> Result<Option<Vec<String>>, RunError> {
    if run.state != "finished" || run.outcome.as_deref() != Some("error") || run.command != "apply"
    {
        return Ok(None);
    }
    let began = began(ledger, run)?;
    if began.executor.is_some() {
        return Ok(None);
    }
    let unended = unended_tasks(ledger, &run.id, &began.tasks)?;
    Ok((!unended.is_empty()).then_some(unended))
}

/// The tasks a resumed run goes on with, in dependency order: all of the program's (tasks
/// added by accepted drift included) when it began with all of them, else the one `--task`
/// chose.
pub(crate) fn selected_tasks(began: &Began, program: &Program) -> Vec<usize> {
    let order = crate::plan::plan(program).order;
    if began.whole || began.tasks.is_empty() {
        return order;
    }
    order
        .into_iter()
        .filter(|&i| began.tasks.contains(&program.tasks[i].name))
        .collect()
}

/// What each selected task of the run carries on from. Merge intents are settled first, for
/// every task, whatever else happens to it; `replanned` tasks (accepted drift) start a new epoch.
pub(crate) fn restore(
    runner: &Runner<'_>,
    selected: &[usize],
    targets: &BTreeMap<usize, String>,
    replanned: &BTreeSet<String>,
) -> Result<BTreeMap<String, Restored>, RunError> {
    let program = runner.program();
    let run = runner.run_id().to_string();
    let rows = task_rows_by_name(runner)?;
    let mut out = BTreeMap::new();
    recover_landings(runner, rows.keys())?;
    finish_interrupted_publish(runner, rows.keys())?;
    for &i in selected {
        let task = &program.tasks[i];
        let Some(row) = rows.get(&task.name) else {
            continue; // never started: it starts like in a fresh run
        };
        let target = targets.get(&i).map_or("HEAD", String::as_str);
        settle_merges(runner, &task.name)?;
        let attempts: Vec<AttemptRow> = runner.ledger().attempt_rows(&run, &task.name)?;
        if replanned.contains(&task.name) {
            // What was in flight belonged to the old definition: close it, keep its history.
            for a in attempts.iter().filter(|a| a.epoch == row.epoch) {
                match a.state.as_str() {
                    "running" => runner.ledger().abandon_attempt(a.id)?,
                    "agent-done" => runner.ledger().finish_attempt(
                        a.id,
                        &ledger::AttemptEnd {
                            outcome: "failed",
                            failure_kind: None,
                            signature: None,
                            criterion: Some(
                                "superseded: the definition changed and the drift was accepted",
                            ),
                            failure_json: None,
                        },
                    )?,
                    _ => {}
                }
            }
            let base = land::branch_tip(runner.repo_root(), target)?;
            runner.reset_task(task, base, row.epoch + 1)?;
            let made = attempts.iter().map(|a| a.number).max().unwrap_or(0);
            let resume = Resume {
                begun: true,
                progress: Progress {
                    epoch: row.epoch + 1,
                    number: made,
                    first: made,
                    ..Progress::default()
                },
                ..Resume::default()
            };
            out.insert(task.name.clone(), Restored::Resume(Box::new(resume)));
            continue;
        }
        if row.state == TaskRowState::Finished {
            out.insert(
                task.name.clone(),
                Restored::Finished(report_of(runner, row, &attempts)?),
            );
            continue;
        }
        let restored = progress_of(runner, task, row, &attempts)?;
        out.insert(task.name.clone(), restored);
    }
    Ok(out)
}

/// Where a task of a run whose attempts were made by workers (`--executor temporal`) stands at
/// its resume: the workflow on the server holds its progress, the ledger what the coordinator
/// recorded of it.
#[cfg(feature = "temporal")]
#[derive(Debug, Default)]
pub(crate) struct RemoteTask {
    /// The base its start recorded, once it started.
    pub(crate) base: Option<Oid>,
    /// Every base the coordinator may have handed it (see `driver::remote`).
    pub(crate) bases: BTreeSet<Oid>,
    /// The commit its landing merged (`Some(None)`: an empty change), once one is done.
    pub(crate) landed: Option<Option<Oid>>,
    /// Its report, once it finished.
    pub(crate) finished: Option<TaskReport>,
}

/// What each selected task of an interrupted run made by workers carries on from. Merge
/// intents are settled against git first (a landing asked again then finds its merge, done or
/// not, and is never done twice); an attempt whose recording was cut short is abandoned, so
/// that the workflow's retry of the recording writes it whole. The bases handed out are the
/// task's start's and its attempts' (those its landings' answers handed, the coordinator adds
/// from the ledger's `landing_answers`).
#[cfg(feature = "temporal")]
pub(crate) fn restore_remote(
    runner: &Runner<'_>,
    selected: &[usize],
) -> Result<BTreeMap<String, RemoteTask>, RunError> {
    let program = runner.program();
    let run = runner.run_id().to_string();
    let rows = task_rows_by_name(runner)?;
    recover_landings(runner, rows.keys())?;
    finish_interrupted_publish(runner, rows.keys())?;
    for name in rows.keys() {
        settle_merges(runner, name)?;
    }
    let mut out = BTreeMap::new();
    for &i in selected {
        let task = &program.tasks[i];
        let Some(row) = rows.get(&task.name) else {
            continue; // never started: the workflow asks for its start
        };
        let attempts = runner.ledger().attempt_rows(&run, &task.name)?;
        let mut restored = RemoteTask {
            base: row.base.as_deref().and_then(|b| Oid::from_str(b).ok()),
            ..RemoteTask::default()
        };
        if row.state == TaskRowState::Finished {
            restored.finished = Some(report_of(runner, row, &attempts)?);
            out.insert(task.name.clone(), restored);
            continue;
        }
        for a in &attempts {
            if matches!(a.state.as_str(), "running" | "agent-done") {
                runner.ledger().abandon_half_recorded(a.id)?;
                runner.emit(
                    Some(&task.name),
                    Some(a.number),
                    Event::AttemptAbandoned {
                        reason: "its recording was cut short; the workflow records it again"
                            .to_string(),
                    },
                )?;
            }
            if let Ok(b) = Oid::from_str(&a.base) {
                restored.bases.insert(b);
            }
        }
        let done = runner
            .ledger()
            .merge_rows(&run, &task.name)?
            .into_iter()
            .find(|m| m.state == "done");
        if let Some(m) = done {
            restored.landed = Some(m.commit.as_deref().and_then(|c| Oid::from_str(c).ok()));
        }
        restored.bases.extend(restored.base);
        out.insert(task.name.clone(), restored);
    }
    Ok(out)
}

/// The run's task rows, by task name.
fn task_rows_by_name(runner: &Runner<'_>) -> Result<BTreeMap<String, ledger::TaskRow>, RunError> {
    Ok(runner
        .ledger()
        .task_rows(runner.run_id())?
        .into_iter()
        .map(|t| (t.name.clone(), t))
        .collect())
}

/// Finishes or undoes each landing of the run cut short while it may have held the main
/// checkout's index lock (its intents name the lock's file): `land::recover` carries it out
/// when the branch is still where the landing began and the checkout holds nothing but mvk's
/// own files on the landing's paths, and puts those paths back otherwise, so that the main
/// checkout ends as after the landing or as before it, the lock given back either way. Runs
/// before any intent is settled, so that settling sees the branch as the landing leaves it.
fn recover_landings<'t>(
    runner: &Runner<'_>,
    tasks: impl Iterator<Item = &'t String>,
) -> Result<(), RunError> {
    let run = runner.run_id().to_string();
    // A batch's intents share one lock: the batch moves its target from the first change's
    // parent to the last change's commit.
    let mut batches: BTreeMap<String, Vec<(&String, ledger::MergeRow)>> = BTreeMap::new();
    for task in tasks {
        for m in runner.ledger().merge_rows(&run, task)? {
            if m.state != "intent" {
                continue;
            }
            if let Some(lock) = m.index_lock.clone() {
                batches.entry(lock).or_default().push((task, m));
            }
        }
    }
    let oid = |id: &str, what: &str| {
        Oid::from_str(id).map_err(|source| RunError::Git {
            action: format!("read the {what} `{id}` of an interrupted landing"),
            source,
        })
    };
    for (lock, mut rows) in batches {
        rows.sort_by_key(|(_, m)| m.id);
        let (Some((_, first)), Some((task, last))) = (rows.first(), rows.last()) else {
            continue;
        };
        let old_tip = oid(&first.old_tip, "old tip")?;
        let commit = oid(&last.new_commit, "commit")?;
        let reflog = format!("mvk: resume of run {run} finishes an interrupted landing");
        let recovery = land::recover(
            runner.repo_root(),
            &last.into,
            (old_tip, commit),
            &lock,
            &reflog,
        )?;
        let merges: Vec<i64> = rows.iter().map(|(_, m)| m.id).collect();
        match recovery {
            // Settling finds out from git whether the branch holds the landing.
            land::Recovery::NotHeld | land::Recovery::Released | land::Recovery::Untouched => {}
            land::Recovery::Finished => runner.emit(
                Some(task),
                None,
                Event::MergeFinishedByResume {
                    merge: last.id,
                    merges: Some(merges),
                    commit: last.new_commit.clone(),
                    into: last.into.clone(),
                },
            )?,
            land::Recovery::Undone { foreign } => runner.emit(
                Some(task),
                None,
                Event::MergeUndoneByResume {
                    merge: last.id,
                    merges,
                    into: last.into.clone(),
                    foreign,
                },
            )?,
        }
    }
    Ok(())
}

/// Carries out a landing cut short between bringing the main checkout to the landing's commit
/// and moving the branch, for intents recorded before landings took the index lock themselves
/// (migration 8): the checkout's index holds exactly the tree of a recorded intent's
/// commit, which descends from the checked-out branch's tip. The branch is moved there with a
/// compare-and-swap, as the landing would have, instead of the checkout's new files being taken
/// for a person's local changes (which would stop every change of the batch). Runs before any
/// intent is settled, so that the settling sees them landed.
fn finish_interrupted_publish<'t>(
    runner: &Runner<'_>,
    tasks: impl Iterator<Item = &'t String>,
) -> Result<(), RunError> {
    let run = runner.run_id().to_string();
    let mut intents = Vec::new();
    for task in tasks {
        let rows = runner.ledger().merge_rows(&run, task)?;
        intents.extend(
            rows.into_iter()
                .filter(|m| m.state == "intent" && m.index_lock.is_none())
                .map(|m| (task, m)),
        );
    }
    if intents.is_empty() {
        return Ok(());
    }
    let git = |action: &str| {
        let action = action.to_string();
        move |source| RunError::Git { action, source }
    };
    let repo = Repository::open(runner.repo_root()).map_err(git("open the repository"))?;
    if repo.is_bare() {
        return Ok(());
    }
    let Some(head_ref) = repo
        .find_reference("HEAD")
        .ok()
        .and_then(|h| h.symbolic_target().ok().flatten().map(str::to_string))
    else {
        return Ok(());
    };
    let Ok(tip) = repo.head().and_then(|h| h.peel_to_commit()) else {
        return Ok(());
    };
    // An index with conflicts has no tree: nothing mvk left half-published.
    let Ok(staged) = repo.index().and_then(|mut i| i.write_tree()) else {
        return Ok(());
    };
    if staged == tip.tree_id() {
        return Ok(());
    }
    // Each recorded landing commit of the checked-out branch, and the commit it was made on.
    let parents: BTreeMap<String, String> = intents
        .iter()
        .filter(|(_, m)| head_ref == format!("refs/heads/{}", m.into))
        .map(|(_, m)| (m.new_commit.clone(), m.old_tip.clone()))
        .collect();
    // Only a batch built on the tip as it stands: recorded intents all the way down to it (a
    // tip a person reset meanwhile, keeping the index, is theirs, not mvk's to move).
    let built_on_tip = |commit: &str| {
        let mut at = commit;
        for _ in 0..parents.len() {
            match parents.get(at) {
                Some(parent) if *parent == tip.id().to_string() => return true,
                Some(parent) => at = parent,
                None => return false,
            }
        }
        false
    };
    for (task, m) in intents {
        if head_ref != format!("refs/heads/{}", m.into) || !built_on_tip(&m.new_commit) {
            continue;
        }
        let Ok(new) = Oid::from_str(&m.new_commit) else {
            continue;
        };
        if !repo.find_commit(new).is_ok_and(|c| c.tree_id() == staged) {
            continue;
        }
        let reflog = format!("mvk: resume of run {run} finishes an interrupted landing");
        match repo.reference_matching(&head_ref, new, true, tip.id(), &reflog) {
            Ok(_) => {
                runner.emit(
                    Some(task),
                    None,
                    Event::MergeFinishedByResume {
                        merge: m.id,
                        commit: m.new_commit,
                        into: m.into,
                        merges: None,
                    },
                )?;
            }
            // Moved meanwhile: settling finds out which intents it holds.
            Err(e) if e.code() == git2::ErrorCode::Modified => {}
            Err(e) => return Err(git("move the branch an interrupted landing was moving")(e)),
        }
        break;
    }
    Ok(())
}

/// Removes the lock files a killed mvk left on the run's own branches
/// (`refs/heads/mvk/RUN/…/*.lock`: libgit2 writes a ref through such a file, and a kill between
/// its creation and the rename leaves it). Only this run's mvk writes those refs, and a resume
/// runs once its processes are dead and their orphans killed, so such a file is always stale;
/// left, every later update of that branch fails as `Locked`. Out come the files removed.
pub(crate) fn clear_ref_locks(
    repo_root: &Path,
    run: &str,
) -> Result<Vec<std::path::PathBuf>, RunError> {
    let repo = Repository::open(repo_root).map_err(|source| RunError::Git {
        action: "open the repository".into(),
        source,
    })?;
    let dir = repo.commondir().join("refs/heads/mvk").join(run);
    let mut removed = Vec::new();
    // Plain files only, never through a link (the walk does not follow them).
    for entry in walkdir::WalkDir::new(&dir).min_depth(1).into_iter() {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e)
                if e.io_error().map(std::io::Error::kind) == Some(std::io::ErrorKind::NotFound) =>
            {
                continue;
            }
            Err(e) => {
                return Err(RunError::Io {
                    action: "read the run's branches",
                    path: dir.clone(),
                    source: e.into(),
                });
            }
        };
        let path = entry.path();
        if entry.file_type().is_file() && path.extension().is_some_and(|x| x == "lock") {
            std::fs::remove_file(path).map_err(|source| RunError::Io {
                action: "remove a stale lock of the run's branch",
                path: path.to_path_buf(),
                source,
            })?;
            removed.push(path.to_path_buf());
        }
    }
    Ok(removed)
}

/// Settles a task's merge intents against git: done when the target holds the commit, aborted
/// (to be landed again) when it does not. A merge is never done twice.
fn settle_merges(runner: &Runner<'_>, task: &str) -> Result<(), RunError> {
    let run = runner.run_id().to_string();
    let merges = runner.ledger().merge_rows(&run, task)?;
    for m in merges.into_iter().filter(|m| m.state == "intent") {
        let repo = Repository::open(runner.repo_root()).map_err(|source| RunError::Git {
            action: "open the repository".into(),
            source,
        })?;
        let tip = land::branch_tip(runner.repo_root(), &m.into)?;
        let new = Oid::from_str(&m.new_commit).map_err(|source| RunError::Git {
            action: format!("read the commit id `{}` of merge #{}", m.new_commit, m.id),
            source,
        })?;
        let landed = tip == new || repo.graph_descendant_of(tip, new).unwrap_or(false);
        if landed {
            runner.ledger().finish_merge(
                m.id,
                "done",
                Some(&m.new_commit),
                "settled by resume: the target holds the commit",
            )?;
            runner.emit(
                Some(task),
                None,
                Event::MergeSettled {
                    merge: m.id,
                    commit: Some(m.new_commit),
                    into: m.into,
                    landed: true,
                    tip: None,
                },
            )?;
        } else {
            runner.ledger().finish_merge(
                m.id,
                "aborted",
                None,
                "interrupted before the target moved; landed again by resume",
            )?;
            runner.emit(
                Some(task),
                None,
                Event::MergeSettled {
                    merge: m.id,
                    into: m.into,
                    landed: false,
                    tip: Some(tip.to_string()),
                    commit: None,
                },
            )?;
        }
    }
    Ok(())
}

/// The report of a task that finished before the run was resumed.
pub(crate) fn report_of(
    runner: &Runner<'_>,
    row: &ledger::TaskRow,
    attempts: &[AttemptRow],
) -> Result<TaskReport, RunError> {
    let outcome = Outcome::from_name(row.outcome.as_deref().unwrap_or("")).ok_or_else(|| {
        RunError::Config {
            message: format!(
                "task `{}` finished with an outcome this mvk does not know: `{}`",
                row.name,
                row.outcome.as_deref().unwrap_or("")
            ),
        }
    })?;
    let spent = runner.ledger().spent(runner.run_id(), Some(&row.name))?;
    Ok(TaskReport {
        name: row.name.clone(),
        outcome,
        attempts: attempts.iter().map(|a| a.number).max().unwrap_or(0),
        merged: row.merged.clone(),
        branch: attempts.last().map(|a| a.branch.clone()),
        usd: spent.usd_micros as f64 / 1e6,
        tokens: spent.input_tokens.saturating_add(spent.output_tokens),
        reason: format!("{} before the run was resumed", outcome.name()),
    })
}

/// Where a started, unfinished task stands: its attempts replayed through the ladder.
fn progress_of(
    runner: &Runner<'_>,
    task: &crate::ir::Task,
    row: &ledger::TaskRow,
    attempts: &[AttemptRow],
) -> Result<Restored, RunError> {
    let run = runner.run_id().to_string();
    // Attempts of earlier epochs keep their numbers but not their claim on the budgets.
    let first = attempts
        .iter()
        .filter(|a| a.epoch < row.epoch)
        .map(|a| a.number)
        .max()
        .unwrap_or(0);
    let mut p = Progress {
        epoch: row.epoch,
        number: first,
        first,
        ..Progress::default()
    };
    let mut pending = None;
    let mut history = Vec::new();
    let count = |p: &mut Progress, a: &AttemptRow| {
        p.number = p.number.max(a.number);
        let idx = a.rung.saturating_sub(1) as usize;
        if idx == p.rung_idx && p.rung_used > 0 {
            p.rung_used += 1;
        } else {
            p.rung_idx = idx;
            p.rung_used = 1;
        }
        p.last_branch = Some(a.branch.clone());
    };
    for a in attempts.iter().filter(|a| a.epoch == row.epoch) {
        match a.state.as_str() {
            "abandoned" => {}
            "running" => {
                // Its agent was running when mvk died: restart it cleanly under its number,
                // keeping what the dead try left on disk, and any change it captured on its
                // branch, beside it.
                pending = None;
                keep_branch(runner.repo_root(), a)?;
                runner.ledger().abandon_attempt(a.id)?;
                let dir = runner.attempt_dir(&task.name, a.number);
                if dir.exists() {
                    let kept = dir.with_file_name(format!("{}.abandoned-{}", a.number, a.id));
                    std::fs::rename(&dir, &kept).map_err(|source| RunError::Io {
                        action: "keep the directory of an abandoned attempt",
                        path: dir.clone(),
                        source,
                    })?;
                }
                runner.emit(
                    Some(&task.name),
                    Some(a.number),
                    Event::AttemptAbandoned {
                        reason: "its process was gone when the run was resumed; it starts again"
                            .to_string(),
                    },
                )?;
            }
            "agent-done" if a.head.is_some() => {
                count(&mut p, a);
                pending = Some(Pending::Judge(a.clone()));
                if a.agent == PERSON {
                    p.same = 0;
                }
            }
            "agent-done" => {
                // A budget ran out before the agent produced a result to judge: the wall
                // time, or the dollars or tokens it was stopped on.
                count(&mut p, a);
                let stopped = !runner
                    .ledger()
                    .event_details(&run, &task.name, a.number, "agent.stopped")?
                    .is_empty();
                let f = if stopped {
                    Failure::new(
                        a.number,
                        FailureKind::Agent,
                        "the attempt ends within the budget (the agent was stopped on it)".into(),
                        &["budget"],
                    )
                } else {
                    Failure::new(
                        a.number,
                        FailureKind::Agent,
                        "the attempt ends within the wall budget (it ran out during the attempt)"
                            .into(),
                        &["wall"],
                    )
                };
                runner.finish_failed(a.id, &f)?;
                history.push((a.number, a.branch.clone(), Some(f.clone())));
                p.last = Some(f);
                p.same = 1;
            }
            "finished" if a.outcome.as_deref() == Some("passed") => {
                count(&mut p, a);
                let merges = runner.ledger().merge_rows(&run, &task.name)?;
                let landed = merges
                    .iter()
                    .find(|m| m.attempt_id == a.id && m.state == "done")
                    .map(|m| m.commit.clone().unwrap_or_default())
                    .or(runner
                        .ledger()
                        .pull_requests(&run)?
                        .into_iter()
                        .find(|p| p.attempt_id == a.id && p.state == "opened")
                        .map(|p| p.commit));
                if let Some(commit) = landed {
                    // It landed; only the task's end was not recorded.
                    let report = runner.finish_landed(task, a, &commit)?;
                    return Ok(Restored::Finished(report));
                }
                // A landing that failed (a conflict, the target moved) recorded its failure in
                // an event; without one, mvk died before deciding: land it again.
                let failed: Option<Failure> = runner
                    .ledger()
                    .event_details(&run, &task.name, a.number, "attempt.failed")?
                    .iter()
                    .rev()
                    .filter_map(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                    // The failure alone, whatever else the line holds: a landing whose failure
                    // was recorded must never be landed again.
                    .find_map(|v| serde_json::from_value(v.get("failure")?.clone()).ok());
                match failed {
                    Some(f) => {
                        pending = None;
                        replay_failure(&mut p, &mut history, a, f);
                    }
                    None => {
                        history.push((a.number, a.branch.clone(), None));
                        pending = Some(Pending::Land(a.clone(), false));
                    }
                }
            }
            "finished" => {
                count(&mut p, a);
                pending = None;
                let f: Option<Failure> = a
                    .failure_json
                    .as_deref()
                    .and_then(|j| serde_json::from_str(j).ok());
                if let Some(f) = f {
                    replay_failure(&mut p, &mut history, a, f);
                }
            }
            _ => {}
        }
    }
    // A person's answer at the checkpoint where the run paused, on the task's last attempt.
    // (`running` ones were abandoned above: the checkpoint's answer still stands, and is
    // followed again.)
    let last_attempt = attempts
        .iter()
        .filter(|a| a.epoch == row.epoch && a.state != "abandoned" && a.state != "running")
        .max_by_key(|a| a.number);
    let checkpoint = runner
        .ledger()
        .checkpoints(&run)?
        .into_iter()
        .rfind(|c| c.task == task.name);
    if let (Some(a), Some(c)) = (last_attempt, checkpoint)
        && c.attempt_id == a.id
    {
        // A landing that stopped on someone else's index lock asked only for the lock to go:
        // gone, the resume is the answer (recorded, as a person's would be).
        // (A pull request's refusal is not about the lock: it waits for a person's word.)
        let lock_gone = c.decision.is_none()
            && c.kind == "landing"
            && task.merge.strategy != crate::ir::Strategy::Pr
            && land::index_unlocked(runner.repo_root());
        if lock_gone {
            runner.ledger().decide(
                c.id,
                "approve",
                Some("the main checkout's index lock was gone when the run was resumed"),
            )?;
        }
        let decision = if lock_gone {
            Some("approve")
        } else {
            c.decision.as_deref()
        };
        let Some(decision) = decision else {
            // Still unanswered: the task stays at its checkpoint while the others go on.
            let spent = runner.ledger().spent(&run, Some(&task.name))?;
            return Ok(Restored::Waiting(TaskReport {
                name: task.name.clone(),
                outcome: Outcome::Waiting,
                attempts: a.number,
                merged: None,
                branch: Some(a.branch.clone()),
                usd: spent.usd_micros as f64 / 1e6,
                tokens: spent.input_tokens.saturating_add(spent.output_tokens),
                reason: format!(
                    "waiting for a person: {}; answer with `mvk approve {run} {}` or `mvk reject {run} {} --reason TEXT`",
                    c.question, task.name, task.name
                ),
            }));
        };
        runner.emit(
            Some(&task.name),
            Some(a.number),
            Event::CheckpointAnswered {
                checkpoint: c.id,
                kind: c.kind.clone(),
                decision: decision.to_string(),
                reason: c.reason.clone(),
            },
        )?;
        if decision == "approve" && c.kind == "human" {
            // The person vouches for the branch as they left it (they may have committed the
            // rest of the work on it): it becomes the next attempt, made by a person, and is
            // judged like any other (seal, gates, review); it lands only if it passes.
            let row = person_attempt(runner, task, a, p.number + 1)?;
            count(&mut p, &row);
            pending = Some(Pending::Judge(row));
            // If it fails too, the ladder is still at `human`: the person is asked again
            // rather than the same-failure brake ending the task.
            p.same = 0;
        } else if decision == "approve" {
            if c.lands {
                pending = Some(Pending::Land(a.clone(), true));
            }
        } else {
            let reason = c.reason.clone().unwrap_or_default();
            let mut f = Failure::new(
                a.number,
                FailureKind::Human,
                format!("a person rejected attempt {}: {reason}", a.number),
                &["human", &reason],
            );
            f.tail = format!("{reason}\n");
            // The attempt's own failure (the reviewer's blockers, the gate that failed) stays in
            // the next prompt beside the person's reason.
            if let Some(own) = p.last.as_ref().filter(|l| l.attempt == a.number) {
                f.blockers.clone_from(&own.blockers);
                f.gate.clone_from(&own.gate);
                f.exit_code = own.exit_code;
                f.counts = own.counts;
                f.tail = format!(
                    "{}\n{}\n(a person: {reason})\n",
                    own.criterion,
                    own.tail.trim_end()
                );
            }
            pending = None;
            history.push((a.number, a.branch.clone(), Some(f.clone())));
            p.last = Some(f);
            p.same = 1;
            if c.kind == "human"
                && let Some(crate::ir::Rung::Agent {
                    attempts: Some(n), ..
                }) = task.ladder.get(p.rung_idx)
            {
                // The ladder had climbed to `human`: the person's reason buys exactly one more
                // attempt on the last agent rung, however many they bought before.
                p.rung_used = n.saturating_sub(1);
            }
        }
    }
    let (tokens, usd) = runner
        .ledger()
        .spent_in_epoch(&run, &task.name, row.epoch)?;
    p.spent_tokens = tokens;
    p.spent_usd = usd;
    let last_seen = last_sign_of_life(&runner.ledger(), &run, Some(&task.name), runner.run_dir())?;
    let elapsed = match (last_seen, row.started_at) {
        (Some(last), Some(start)) if last > start => {
            Duration::from_millis(u64::try_from(last - start).unwrap_or(0))
        }
        _ => Duration::ZERO,
    };
    Ok(Restored::Resume(Box::new(Resume {
        begun: true,
        progress: p,
        pending,
        elapsed,
        history,
    })))
}

/// Replays one failed attempt: the same-failure count, the last failure, the handoff's history.
fn replay_failure(
    p: &mut Progress,
    history: &mut Vec<(u32, String, Option<Failure>)>,
    a: &AttemptRow,
    f: Failure,
) {
    // A person's attempt starts a chain of its own, as it did when it was judged: failing
    // like the attempt before it sends the task back to the person, not into the brake.
    p.same = if a.agent != PERSON && p.last.as_ref().is_some_and(|l| l.signature == f.signature) {
        p.same + 1
    } else {
        1
    };
    history.push((a.number, a.branch.clone(), Some(f.clone())));
    p.last = Some(f);
}

/// When a run (or its task) was last seen alive: its last event, or the heartbeat file its
/// process touched every two seconds while an agent or gate ran, whichever is later.
pub(crate) fn last_sign_of_life(
    ledger: &Ledger,
    run: &str,
    task: Option<&str>,
    run_dir: &Path,
) -> Result<Option<i64>, RunError> {
    let event = ledger.last_event_ms(run, task)?;
    let beat = std::fs::metadata(run_dir.join("heartbeat"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok());
    Ok(match (event, beat) {
        (Some(e), Some(b)) => Some(e.max(b)),
        (e, b) => e.or(b),
    })
}

/// Keeps a change an abandoned attempt captured on its branch (mvk died after capturing it and
/// before recording the agent's result) as `BRANCH-abandoned-ID`, since the attempt made again
/// under its number resets the branch.
/// Records attempt NUMBER of TASK as made by a person: its branch starts at the tip of A's
/// branch (where the person left their work), from A's base, and its agent is done.
fn person_attempt(
    runner: &Runner<'_>,
    task: &Task,
    a: &AttemptRow,
    number: u32,
) -> Result<AttemptRow, RunError> {
    let git = |action: String| move |source| RunError::Git { action, source };
    let repo = Repository::open(runner.repo_root()).map_err(git("open the repository".into()))?;
    let tip = crate::run::git::land::branch_tip(runner.repo_root(), &a.branch)?;
    let branch = attempt::branch_name(runner.run_id(), &task.name, number);
    let commit = repo
        .find_commit(tip)
        .map_err(git(format!("read commit `{tip}`")))?;
    repo.branch(&branch, &commit, true)
        .map_err(git(format!("create branch `{branch}`")))?;
    let base = Oid::from_str(&a.base).map_err(git(format!("read base `{}`", a.base)))?;
    let id = runner.ledger_begin_attempt(
        &task.name,
        number,
        a.rung,
        PERSON,
        &branch,
        runner.repo_root(),
        base,
        a.epoch,
    )?;
    runner.emit(
        Some(&task.name),
        Some(number),
        Event::AttemptStarted {
            rung: a.rung,
            agent: PERSON.to_string(),
            branch,
            base: a.base.clone(),
            from: Some(a.branch.clone()),
            worktree_ms: None,
            worktree: None,
            worker: None,
        },
    )?;
    // Exit 0: the person finished; what they left is judged from the seal on.
    runner.ledger_agent_done(
        id,
        Some(0),
        false,
        Duration::ZERO,
        Some(tip),
        &crate::run::judge::adapter::Usage::default(),
        0,
    )?;
    let rows = runner.ledger().attempt_rows(runner.run_id(), &task.name)?;
    rows.into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| RunError::Config {
            message: format!(
                "attempt {number} of task `{}` is not in the ledger",
                task.name
            ),
        })
}

/// The agent a person's attempt is recorded under.
const PERSON: &str = "person";

fn keep_branch(repo_root: &Path, a: &AttemptRow) -> Result<(), RunError> {
    let git = |action: String| move |source| RunError::Git { action, source };
    let repo = Repository::open(repo_root).map_err(git("open the repository".into()))?;
    let Ok(tip) = repo.refname_to_id(&format!("refs/heads/{}", a.branch)) else {
        return Ok(()); // never created: the attempt died before its worktree was ready
    };
    if tip.to_string() == a.base {
        return Ok(());
    }
    let kept = format!("{}-abandoned-{}", a.branch, a.id);
    let commit = repo
        .find_commit(tip)
        .map_err(git(format!("read commit `{tip}`")))?;
    repo.branch(&kept, &commit, true)
        .map_err(git(format!("keep branch `{kept}`")))?;
    Ok(())
}

/// Compares the program a run began with (from the ledger) with `program` as compiled now,
/// and each started task's sealed files at its recorded base with those at `bases` (the commit
/// the task would go on from).
pub(crate) fn drift(
    ledger: &Ledger,
    run: &RunRow,
    program: &Program,
    repo_root: &Path,
) -> Result<DriftReport, RunError> {
    let current = began(ledger, run)?.current;
    let stored = ledger
        .stored_program(&run.program_digest)?
        .ok_or_else(|| RunError::Config {
            message: format!(
                "the ledger has no program `{}` for run `{}`",
                run.program_digest, run.id
            ),
        })?;
    let old: StoredIr = serde_json::from_str(&stored.ir_json).map_err(|e| RunError::Config {
        message: format!("the stored program of run `{}` cannot be read: {e}", run.id),
    })?;
    let mut report = crate::drift::compare(&run.id, &old, &stored.sources, program);
    let repo = Repository::open(repo_root).map_err(|source| RunError::Git {
        action: "open the repository".into(),
        source,
    })?;
    let rows = ledger.task_rows(&run.id)?;
    // What this run itself landed, per target, latest last: a sibling task of a flow may change
    // files another task seals, and that is the flow's own work, not drift.
    let mut landed: BTreeMap<String, (i64, String)> = BTreeMap::new();
    for row in &rows {
        for m in ledger.merge_rows(&run.id, &row.name)? {
            if let (true, Some(commit)) = (m.state == "done", m.commit) {
                let e = landed.entry(m.into).or_insert((m.id, commit.clone()));
                if m.id >= e.0 {
                    *e = (m.id, commit);
                }
            }
        }
    }
    for row in rows {
        let (Some(base), Some(digest)) = (&row.base, &row.seal_digest) else {
            continue;
        };
        // Finished tasks do not start again, so their oracle cannot drift under them.
        if row.state == TaskRowState::Finished {
            continue;
        }
        let Some(task) = program.task(&row.name) else {
            continue;
        };
        let target = if task.merge.into != crate::ir::CURRENT_BRANCH {
            task.merge.into.clone()
        } else if let Some(c) = &current {
            c.clone()
        } else {
            land::current_branch(repo_root)?
        };
        let now = land::branch_tip(repo_root, &target)?;
        let seal = crate::run::git::seal::Seal::new(&task.seal).map_err(RunError::Seal)?;
        let files_now =
            crate::run::git::seal::sealed_files(&repo, now, &seal).map_err(RunError::Seal)?;
        if &crate::run::git::seal::sealed_digest(&files_now) == digest {
            continue;
        }
        // Sealed files as the run's own last landing left them, when it landed since: changed
        // only by the run, they are what the task's next attempt is meant to start from.
        if let Some((_, ours)) = landed.get(&target)
            && let Ok(ours) = Oid::from_str(ours)
        {
            let files_ours =
                crate::run::git::seal::sealed_files(&repo, ours, &seal).map_err(RunError::Seal)?;
            if files_ours == files_now {
                continue;
            }
        }
        let base = Oid::from_str(base).map_err(|source| RunError::Git {
            action: format!("read the base `{base}` of task `{}`", row.name),
            source,
        })?;
        let files_then =
            crate::run::git::seal::sealed_files(&repo, base, &seal).map_err(RunError::Seal)?;
        let mut changes = Vec::new();
        let paths: BTreeSet<&String> = files_then.keys().chain(files_now.keys()).collect();
        for path in paths {
            let (a, b) = (files_then.get(path), files_now.get(path));
            if a != b {
                let show = |f: Option<&(u32, String)>| {
                    f.map(|(mode, blob)| json!(format!("{mode:o} {}", &blob[..12.min(blob.len())])))
                };
                changes.push(ValueChange {
                    path: path.clone(),
                    old: show(a),
                    new: show(b),
                });
            }
        }
        report.add_sealed_change(
            &row.name,
            (&row.digest, &task.meta.digest.to_string()),
            changes,
        );
    }
    Ok(report)
}

/// The exit code recorded for a run closed as `interrupted`: a process ended by a signal.
pub(crate) const INTERRUPTED_EXIT: i32 = 130;

/// A run of `mvk attempt` in, as the ledger of `repo_root` has it; when its process is dead (an
/// attempt is never resumed), what it left running is killed (the agent and gate groups it
/// recorded, wherever they wandered) and the run is closed as `interrupted` — so it does not
/// look alive forever and `mvk gc` removes its branches. Out: how many processes were killed,
/// or `None` when there was nothing to close (not an attempt, still alive, on another host, or
/// closed by another process first).
pub(crate) fn close_dead_attempt(
    repo_root: &Path,
    run: &RunRow,
) -> Result<Option<usize>, RunError> {
    if run.command != "attempt" {
        return Ok(None);
    }
    let mvk_dir = repo_root.join(".mvk");
    if !matches!(
        ledger::read::liveness(&mvk_dir, run),
        ledger::read::Liveness::Interrupted { .. }
    ) {
        return Ok(None);
    }
    let killed =
        crate::run::exec::reaper::kill_orphans(&mvk_dir.join("runs").join(&run.id), &run.id);
    let mut ledger = Ledger::open(&mvk_dir.join("ledger.db"))?;
    if !ledger.close_interrupted(&run.id, INTERRUPTED_EXIT)? {
        return Ok(None);
    }
    let closed = Event::RunClosed {
        outcome: "interrupted".into(),
        exit_code: INTERRUPTED_EXIT,
        reason: "the attempt's process died; an attempt is not resumed".into(),
        orphans_killed: killed,
    };
    let (name, detail) =
        closed
            .into_parts()
            .map_err(|source| crate::run::trail::TrailError::Json {
                what: "an event",
                source,
            })?;
    ledger.event(
        &run.id,
        None,
        None,
        crate::clock::now().1,
        name,
        &detail.to_string(),
    )?;
    Ok(Some(killed))
}
