//! The workflow [`MvkFlow`]: a flow's input in; its tasks started as the local driver's schedule
//! says, each a loop of the attempt policy around the attempt activity, out its summary. Its
//! code is deterministic: replayed, it issues the same activities in the same order.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::{FutureExt, LocalBoxFuture, select_all};
use temporalio_client::RetryPolicy;
use temporalio_macros::{workflow, workflow_methods};
use temporalio_sdk::{
    ActivityOptions, ApplicationFailure, WorkflowContext, WorkflowResult, WorkflowTermination,
};

use super::coordinator::CoordActs;
use super::wire::{AttemptIn, ClimbIn, EndIn, FlowIn, LandIn, LandOut, RecordIn, TaskIn};
use super::worker::WorkerActs;
use super::{COORD_HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT};
use crate::run::attempt::Failure;
use crate::run::driver::Outcome;
use crate::run::policy::{self, RungKind};
use crate::run::schedule::{self, Board, Decision, Entry};

/// What attempts have spent so far (a task's, or the whole flow's).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Spent {
    tokens: u64,
    usd_micros: u64,
}

impl Spent {
    pub(super) fn add(&mut self, usage: &crate::run::attempt_result::UsageResult) {
        let usage = crate::run::judge::adapter::Usage::from(*usage);
        self.tokens = self.tokens.saturating_add(usage.tokens());
        self.usd_micros = self
            .usd_micros
            .saturating_add(usage.usd_micros.unwrap_or(0));
    }

    pub(super) fn wire(self) -> super::wire::SpentIn {
        super::wire::SpentIn {
            tokens: self.tokens,
            usd_micros: self.usd_micros,
        }
    }

    /// What the policy weighs against the limits: this, and `wall_ms` of time.
    pub(super) fn tally(self, wall_ms: u64) -> policy::Tally {
        policy::Tally {
            tokens: self.tokens,
            usd_micros: self.usd_micros,
            wall_ms,
        }
    }
}

#[workflow]
#[derive(Default)]
pub(crate) struct MvkFlow;

pub(super) type TaskFut<'a> = LocalBoxFuture<'a, (usize, WorkflowResult<Outcome>)>;

pub(super) fn fail_workflow(message: String) -> WorkflowTermination {
    WorkflowTermination::failed_application(ApplicationFailure::non_retryable(message))
}

pub(super) fn outcome_of(name: &str) -> WorkflowResult<Outcome> {
    Outcome::from_name(name).ok_or_else(|| fail_workflow(format!("unknown outcome `{name}`")))
}

/// Options of an activity the coordinator runs. A refusal it answers is not retried (the
/// workflow fails on it); mvk's own error stops the coordinator with a retryable answer, and a
/// coordinator that dies mid-answer stops heartbeating: either way the request is asked again,
/// for as long as it takes, of the coordinator `mvk resume` starts (its answers are
/// idempotent: see `driver::remote`).
pub(super) fn coord_opts(queue: &str) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(Duration::from_secs(24 * 3600))
        .task_queue(queue.to_string())
        .heartbeat_timeout(COORD_HEARTBEAT_TIMEOUT)
        .retry_policy(
            RetryPolicy::builder()
                .initial_interval(Duration::from_secs(1))
                .backoff_coefficient(2.0)
                .maximum_interval(Duration::from_secs(30))
                .maximum_attempts(0)
                .build(),
        )
        .build()
}

/// Options of an attempt: heartbeats, so a dead worker's attempt is made again promptly.
pub(super) fn attempt_opts(input: &FlowIn) -> ActivityOptions {
    ActivityOptions::with_start_to_close_timeout(Duration::from_millis(input.attempt_timeout_ms))
        .task_queue(input.attempt_queue.clone())
        .heartbeat_timeout(HEARTBEAT_TIMEOUT)
        .retry_policy(
            RetryPolicy::builder()
                .initial_interval(Duration::from_secs(1))
                .backoff_coefficient(2.0)
                .maximum_interval(Duration::from_secs(30))
                .maximum_attempts(5)
                .build(),
        )
        .build()
}

#[workflow_methods]
impl MvkFlow {
    #[run]
    pub(crate) async fn run(
        ctx: &mut WorkflowContext<Self>,
        input: FlowIn,
    ) -> WorkflowResult<String> {
        let names: Vec<&str> = input.tasks.iter().map(|t| t.name.as_str()).collect();
        let mut done: BTreeMap<String, Outcome> = BTreeMap::new();
        let mut queue: Vec<usize> = (0..input.tasks.len()).collect();
        let mut running: Vec<usize> = Vec::new();
        // Declared before the task futures, which borrow it.
        let shared = FlowSpent {
            spent: std::cell::RefCell::new(Spent::default()),
            started: ctx.workflow_time(),
        };
        let shared = &shared;
        let mut inflight: Vec<TaskFut<'_>> = Vec::new();
        loop {
            // Start or skip each queued task as the local driver's rules say (what it starts
            // after, `parallel`, scopes); a skip can free others, so go round until stable.
            let mut changed = true;
            while changed {
                changed = false;
                let mut k = 0;
                while k < queue.len() {
                    let i = queue[k];
                    let t = &input.tasks[i];
                    let entries: Vec<Entry<'_>> = running
                        .iter()
                        .map(|&j| {
                            let r = &input.tasks[j];
                            Entry {
                                name: &r.name,
                                after: &r.after,
                                scope: &r.scope,
                            }
                        })
                        .collect();
                    let board = Board {
                        done: &done,
                        selected: &names,
                        running: &entries,
                        holding: &[],
                        parallel: input.parallel,
                        continue_on_failure: input.continue_on_failure,
                    };
                    let me = Entry {
                        name: &t.name,
                        after: &t.after,
                        scope: &t.scope,
                    };
                    match schedule::decide(me, &board) {
                        Decision::Wait(_) => k += 1,
                        Decision::Skip { failed } => {
                            queue.remove(k);
                            let end = EndIn::Skipped {
                                task: t.name.clone(),
                                failed,
                            };
                            let o = ctx
                                .execute_activity(
                                    CoordActs::task_end,
                                    end,
                                    coord_opts(&input.coord_queue),
                                )
                                .await?;
                            done.insert(t.name.clone(), outcome_of(&o)?);
                            changed = true;
                        }
                        Decision::Start => {
                            queue.remove(k);
                            running.push(i);
                            let c = ctx.clone();
                            let flow = &input;
                            inflight.push(
                                async move { (i, run_task(c, flow, &flow.tasks[i], shared).await) }
                                    .boxed_local(),
                            );
                            changed = true;
                        }
                    }
                }
            }
            if inflight.is_empty() {
                break;
            }
            // `select_all` polls in vector order: replay sees the same commands.
            let ((i, outcome), _, rest) = select_all(inflight).await;
            inflight = rest;
            running.retain(|&j| j != i);
            done.insert(input.tasks[i].name.clone(), outcome?);
        }
        let summary: Vec<String> = input
            .tasks
            .iter()
            .map(|t| {
                format!(
                    "{}={}",
                    t.name,
                    done.get(&t.name).map_or("unrun", |o| o.name())
                )
            })
            .collect();
        Ok(summary.join(" "))
    }
}

/// What the flow's tasks have spent together, and when the flow started (workflow time).
pub(super) struct FlowSpent {
    spent: std::cell::RefCell<Spent>,
    started: Option<std::time::SystemTime>,
}

/// Milliseconds of workflow time from `from` to `to` (0 when either is unknown).
pub(super) fn elapsed_ms(
    from: Option<std::time::SystemTime>,
    to: Option<std::time::SystemTime>,
) -> u64 {
    match (from, to) {
        (Some(from), Some(to)) => to.duration_since(from).map_or(0, crate::run::attempt::ms),
        _ => 0,
    }
}

/// One task to its end, as the local driver takes it: attempts on the workers, each told the
/// failure before it and made by its rung's agent, each recorded, a passed one landed by the
/// coordinator; the attempt policy ([`policy::decide`]) says when it climbs and when it stops.
pub(super) async fn run_task(
    ctx: WorkflowContext<MvkFlow>,
    flow: &FlowIn,
    task: &TaskIn,
    shared: &FlowSpent,
) -> WorkflowResult<Outcome> {
    let started = ctx.workflow_time();
    let mut spent = Spent::default();
    let coord = || coord_opts(&flow.coord_queue);
    let end = |e: EndIn| ctx.execute_activity(CoordActs::task_end, e, coord());
    let mut base = ctx
        .execute_activity(CoordActs::task_begin, task.name.clone(), coord())
        .await?;
    let ladder: Vec<RungKind> = task.ladder.iter().map(RungKind::from).collect();
    let rules = policy::Rules {
        ladder: &ladder,
        iterations: task.iterations,
        same_failure: task.same_failure,
        review_rounds: task.review_rounds,
        task: task.budget,
        flow: flow.budget,
        // This executor has no checkpoints: `apply` refuses another mode for it.
        mode: policy::RunMode::Auto,
    };
    let mut last: Option<Failure> = None;
    let (mut same, mut rejections, mut number) = (0u32, 0u32, 0u32);
    // The 0-based rung and the attempts made on it.
    let (mut rung_idx, mut rung_used) = (0usize, 0u32);
    loop {
        // The clock and the flow's spending as they are now: read again after a climb, whose
        // activities let time pass and other tasks spend (a replay must see what it saw then).
        let decide = |rung_idx: usize, rung_used: u32, last: Option<&Failure>, spent: Spent| {
            let now = ctx.workflow_time();
            let flow_spent = *shared.spent.borrow();
            policy::decide(
                &rules,
                &policy::Standing {
                    attempts: number,
                    rung: rung_idx,
                    on_rung: rung_used,
                    last,
                    same,
                    rejections,
                    fresh: false,
                    task_spent: spent.tally(elapsed_ms(started, now)),
                    flow_spent: flow_spent.tally(elapsed_ms(shared.started, now)),
                },
            )
        };
        let mut decision = decide(rung_idx, rung_used, last.as_ref(), spent);
        for &to in &decision.climbed {
            ctx.execute_activity(
                CoordActs::rung_climbed,
                ClimbIn {
                    task: task.name.clone(),
                    to,
                },
                coord(),
            )
            .await?;
        }
        if !decision.climbed.is_empty() {
            // Past the climbs nothing stops the task before the rung is reached (the brake and
            // the review's rounds were weighed first): this decides the rung, a person or a
            // budget, with no climb left to make.
            decision = decide(decision.rung, decision.on_rung, last.as_ref(), spent);
        }
        (rung_idx, rung_used) = (decision.rung, decision.on_rung);
        if let Some(e) = ending(task, decision.next, (number, same), &mut last)? {
            return outcome_of(&end(e).await?);
        }
        number += 1;
        rung_used += 1;
        let rung = u32::try_from(rung_idx + 1).unwrap_or(u32::MAX);
        let spending = (&mut spent, shared);
        let made = make_attempt(
            &ctx,
            flow,
            task,
            (number, rung),
            last.as_ref(),
            &mut base,
            spending,
        )
        .await?;
        let failure = match made {
            Made::End(e) => return outcome_of(&end(e).await?),
            Made::Failed(failure) => failure,
        };
        let again = last
            .as_ref()
            .is_some_and(|l| l.signature == failure.signature);
        same = if again { same + 1 } else { 1 };
        if failure.kind == crate::run::failure::FailureKind::Review {
            rejections += 1;
        }
        last = Some(failure);
    }
}

/// How the policy's `next` step ends the task, if it does, after `number` attempts and `same`
/// equal failures in a row, the last `last`. A person decides where the local driver would stop
/// at a checkpoint: this executor has none, so the task ends for a person, with the branch.
fn ending(
    task: &TaskIn,
    next: policy::Next,
    (number, same): (u32, u32),
    last: &mut Option<Failure>,
) -> WorkflowResult<Option<EndIn>> {
    let name = task.name.clone();
    let for_person = |why: String| EndIn::Ended {
        task: task.name.clone(),
        number,
        outcome: Outcome::Human.name().to_string(),
        reason: format!(
            "{why}; a person decides: land its branch yourself, or run the task again with `--executor local` to approve it"
        ),
    };
    Ok(match next {
        policy::Next::Attempt => None,
        policy::Next::Stuck { .. } => last.as_ref().map(|f| EndIn::Stuck {
            task: name,
            same,
            last: f.clone(),
            attempts: number,
        }),
        policy::Next::ReviewRounds => last.as_ref().map(|f| {
            let rounds = task.review_rounds.unwrap_or(0);
            let blockers: Vec<String> = f
                .blockers
                .iter()
                .map(crate::prompt::Blocker::line)
                .collect();
            for_person(format!(
                "the reviewer rejected attempt {number} after {rounds} round{} of rework: {}",
                if rounds == 1 { "" } else { "s" },
                blockers.join("; ")
            ))
        }),
        policy::Next::RungsOutOnReview => Some(for_person(format!(
            "every rung's attempts were used and the reviewer rejected the last, attempt {number}{}",
            last.as_ref()
                .map_or(String::new(), |f| format!(": {}", f.criterion))
        ))),
        policy::Next::RungsOut { .. } => Some(EndIn::Rungs {
            task: name,
            used: number,
            last: last.take(),
        }),
        policy::Next::Budget {
            budget: policy::Budget::Iterations,
            ..
        } => Some(EndIn::Iterations {
            task: name,
            used: number,
            last: last.take(),
        }),
        policy::Next::Budget {
            budget,
            spent,
            limit,
            ..
        } => Some(EndIn::Budget {
            task: name,
            which: budget.name().to_string(),
            spent,
            limit,
            used: number,
            last: last.take(),
        }),
        // `apply` refuses such a flow before it starts; never a silent stop.
        policy::Next::Human | policy::Next::Step => {
            return Err(fail_workflow(format!(
                "task `{}` reached the `human` rung, which the temporal executor does not take",
                task.name
            )));
        }
    })
}

/// What an attempt on a worker came to: the task's end (landed, or ended by its landing), or a
/// failure for the policy to weigh.
enum Made {
    End(EndIn),
    Failed(Failure),
}

/// Attempt `number` of `task` on rung `rung`, told `previous`, from `base`: made on a worker,
/// recorded by the coordinator (what it spent counted in `spending`, the task's and the
/// flow's), and a passed one landed. A landing sent back for another attempt moves `base`.
async fn make_attempt(
    ctx: &WorkflowContext<MvkFlow>,
    flow: &FlowIn,
    task: &TaskIn,
    (number, rung): (u32, u32),
    previous: Option<&Failure>,
    base: &mut String,
    (spent, shared): (&mut Spent, &FlowSpent),
) -> WorkflowResult<Made> {
    let coord = || coord_opts(&flow.coord_queue);
    let flow_spent = shared.spent.borrow().wire();
    let out = ctx
        .execute_activity(
            WorkerActs::attempt,
            AttemptIn {
                workflow: flow.workflow.clone(),
                task: task.name.clone(),
                number,
                rung,
                previous: previous.cloned(),
                base: base.clone(),
                target: task.target.clone(),
                file: flow.file.clone(),
                digest: flow.digest.clone(),
                repo: flow.repo.clone(),
                spent: spent.wire(),
                flow_spent,
            },
            attempt_opts(flow),
        )
        .await?;
    let failure = out.failure.clone().map(|mut f| {
        // The task's attempt `number`, whatever the worker's run called it.
        f.attempt = number;
        f
    });
    let head = out.head.clone();
    spent.add(&out.usage);
    shared.spent.borrow_mut().add(&out.usage);
    let attempt_id = ctx
        .execute_activity(
            CoordActs::attempt_record,
            RecordIn {
                task: task.name.clone(),
                number,
                rung,
                base: base.clone(),
                out,
            },
            coord(),
        )
        .await?;
    let head = match (failure, head) {
        (Some(f), _) => return Ok(Made::Failed(f)),
        (None, None) => {
            return Err(fail_workflow(format!(
                "attempt {number} of `{}` passed without a commit",
                task.name
            )));
        }
        (None, Some(head)) => head,
    };
    let landed = ctx
        .execute_activity(
            CoordActs::land,
            LandIn {
                task: task.name.clone(),
                number,
                rung,
                base: base.clone(),
                attempt_id,
                head,
            },
            coord(),
        )
        .await?;
    Ok(match landed {
        LandOut::Landed { commit } => Made::End(EndIn::Landed {
            task: task.name.clone(),
            number,
            commit,
        }),
        LandOut::Ended { outcome, reason } => Made::End(EndIn::Ended {
            task: task.name.clone(),
            number,
            outcome,
            reason,
        }),
        LandOut::Retry {
            failure,
            base: new_base,
        } => {
            *base = new_base;
            Made::Failed(failure)
        }
    })
}

/// The workflow's generated handle type, for the coordinator that starts and watches it.
pub(super) type FlowRun = mvk_flow::Run;
