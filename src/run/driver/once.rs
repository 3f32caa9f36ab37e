//! One attempt of one task on its own (`mvk attempt`, and a Temporal worker's activity) in:
//! the task, its base and the failure before it; out, its judged result and the run that
//! recorded it, with nothing landed.

use git2::Oid;

use super::open::{begin_run_of, open_run, select, targets_of, task_names};
use super::{Budgets, Observer, Outcome, RunError, RunOptions, Runner};
use crate::ir::{Program, Rung};
use crate::ledger;
use crate::run::attempt::{self, AttemptEnd, AttemptSpec};
use crate::run::event::Event;
use crate::run::failure::{Failure, FailureKind};
use crate::run::git::land;
use crate::run::host::Host;

/// What [`attempt_once`] did: the run it recorded, the task, and how its one attempt ended.
#[derive(Debug)]
pub(crate) struct OnceReport {
    pub(crate) run: String,
    pub(crate) task: String,
    /// The attempt's ledger row id.
    pub(crate) attempt_id: i64,
    pub(crate) number: u32,
    pub(crate) base: Oid,
    pub(crate) head: Option<Oid>,
    pub(crate) branch: String,
    /// How the run was recorded as ending (a passed attempt is `skipped`: nothing lands).
    pub(crate) outcome: Outcome,
    /// `None` when the attempt passed seal, gates and review.
    pub(crate) failure: Option<Failure>,
    /// What its agent (and reviewer) spent.
    pub(crate) usage: crate::run::judge::adapter::Usage,
}

/// Which attempt of its task `attempt_once` makes: by default the first, on the first rung,
/// with no failure before it. An executor whose attempts run elsewhere (`run::temporal`) asks
/// for attempt `number` on `rung`, told `previous`, so its prompt and environment are the ones
/// the local driver would give that attempt.
#[derive(Debug, Clone)]
pub(crate) struct OnceSpec {
    pub(crate) number: u32,
    /// 1-based, as the ledger counts rungs.
    pub(crate) rung: u32,
    pub(crate) previous: Option<Failure>,
    /// The commit to start from and the branch it stands for (a Temporal worker's base, fetched
    /// from the coordinator); `None`: the task's target's tip here.
    pub(crate) start: Option<(Oid, String)>,
    /// What the task and the whole flow spent before (a Temporal workflow's count): the
    /// attempt is held to what is left.
    pub(crate) spent: crate::run::meter::Spend,
    pub(crate) flow_spent: crate::run::meter::Spend,
    /// Where to keep what the attempt has spent so far, as it runs.
    pub(crate) spending_out: Option<std::path::PathBuf>,
}

impl Default for OnceSpec {
    fn default() -> Self {
        OnceSpec {
            number: 1,
            rung: 1,
            previous: None,
            start: None,
            spent: crate::run::meter::Spend::default(),
            flow_spent: crate::run::meter::Spend::default(),
            spending_out: None,
        }
    }
}

/// One evidenced attempt of one task (`opts.task`, or the program's only task) from its
/// target's tip, judged exactly as `apply` judges one (seal, gates with evidence, reviewer),
/// on `once`'s rung (the first by default); nothing lands. It is recorded as a run of its own
/// that ends with the attempt (`skipped` when it passed: its change waits on its branch), in
/// `step` mode so that a `mvk resume` of it after a crash stops for a person before any
/// landing.
pub(crate) async fn attempt_once(
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
                    task_names(program)
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
    let mut runner = Runner::new(program, opts, opening, observer, &[i]);
    // What the flow spent elsewhere (a workflow's other attempts) counts against its budget.
    runner.purse = std::sync::Arc::new(crate::run::meter::Purse::new(
        super::flow_limits(program),
        once.flow_spent,
    ));
    runner.spending_out.clone_from(&once.spending_out);
    let _heartbeat = runner.trail.heartbeat();
    runner.emit(
        None,
        None,
        Event::RunStarted {
            file: opts.file.clone(),
            program: program.name.clone(),
            digest: program.digest.to_string(),
            base: base.to_string(),
            target: target.clone(),
            tasks: vec![task.name.clone()],
            whole: false,
            current: land::current_branch(&opts.repo_root).ok(),
            attempt_only: Some(true),
            executor: None,
            temporal: None,
        },
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
        left: crate::run::policy::Left::default(),
        // The task's own budgets hold it, less what was spent before it.
        caps: crate::run::meter::TaskCaps {
            spent: once.spent,
            tokens: task.budget.tokens,
            usd_micros: task.budget.usd_micros,
        },
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
                    Event::AttemptPassed { head: head.to_string(), },
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
            AttemptEnd::Stopped(trip) => (
                Some(super::stopped_failure(number, &trip)),
                Outcome::Budget,
            ),
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
            Event::TaskFinished {
                outcome: outcome.name().to_string(),
                reason,
                merged: None,
            },
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
    let finished_event = Event::RunFinished {
        outcome: outcome.to_string(),
        exit_code: i32::from(exit_code),
        error: result.as_ref().err().map(ToString::to_string),
    };
    let emitted = runner.emit(None, None, finished_event);
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
