//! A flow in, run as a Temporal workflow: its attempts made by `mvk worker` processes (each in
//! its own clone of the repository), its ledger rows, trail and landings written by the `mvk
//! apply` process that started it (the coordinator); out comes the same `RunReport` as `apply`.
//!
//! Three parts, each on its own task queue:
//! - the workflow [`MvkFlow`] (deterministic: which task starts when, each task's attempts,
//!   the same-failure brake, the iterations budget), run by the coordinator's worker;
//! - the coordinator's activities [`CoordActs`] (begin, record, land, end a task), on the
//!   coordinator's queue: they hand each request to the coordinator's loop, which owns the
//!   run's `Runner` (`driver::remote::Coordinator`), so the ledger has one writer and changes
//!   land through the local executor's merge queue;
//! - the attempt activity [`WorkerActs::attempt`], on the workers' queue: fetch the base from
//!   the coordinator's repository, `mvk attempt` in the worker's clone (worktree, agent, seal,
//!   gates, review, judged as locally), push a passed change to a ref of the coordinator's
//!   repository keyed by workflow, task and attempt number, answer with a small result.
//!
//! Execution is at-least-once: an attempt may run twice (a worker dying before it reports), so
//! each is a fresh `mvk attempt` run and its push goes to its own ref; the coordinator records an
//! attempt once per number and never lands an attempt whose merge the ledger already holds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::{FutureExt, LocalBoxFuture, select_all};
use futures_util::stream::FuturesUnordered;
use git2::Oid;
use serde::{Deserialize, Serialize};
use temporalio_client::{
    Client, ClientOptions, Connection, ConnectionOptions, RetryPolicy, Url,
    WorkflowExecutionStatus, WorkflowGetResultOptions, WorkflowIdConflictPolicy,
    WorkflowIdReusePolicy, WorkflowStartOptions,
};
use temporalio_macros::{activities, workflow, workflow_methods};
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use temporalio_sdk::runtime::worker_tuner::{FixedSizeSlotSupplier, TunerHolder};
use temporalio_sdk::{
    ActivityOptions, ApplicationFailure, Runtime, Worker, WorkerOptions, WorkflowContext,
    WorkflowResult, WorkflowTermination,
};
use tokio::sync::{mpsc, oneshot};

use crate::ir::{Program, Rung};
use crate::run::attempt::Failure;
use crate::run::attempt_result::{AttemptResult, GateResult};
use crate::run::driver::remote::{Coordinator, Landed, RemoteAttempt};
use crate::run::driver::{Observer, Outcome, RunError, RunOptions, RunReport, TaskReport};
use crate::run::policy::{self, RungKind};
use crate::run::schedule::{self, Board, Decision, Entry};

/// The task queue `mvk worker` polls and attempts are sent to, unless told another.
pub const DEFAULT_TASK_QUEUE: &str = "mvk";
/// Without a heartbeat for this long, an attempt's worker is taken for dead and the attempt is
/// made again elsewhere.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a worker heartbeats while its attempt runs.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// How long a coordinator's answer may go without a heartbeat before the request is taken for
/// lost (its `mvk apply` dead) and asked again: long, since a busy coordinator (a gate's output
/// written, the ledger) must not be taken for dead and asked twice.
const COORD_HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a fetch of a base or a push of a change may take.
const TRANSFER_LIMIT: Duration = Duration::from_secs(10 * 60);

/// How long a cancelled attempt has, after SIGTERM, to stop its agent and gates and close its
/// attempt before the worker kills it outright.
const CANCEL_GRACE: Duration = Duration::from_secs(30);

/// Added to an agent's timeout for the rest of an attempt (fetch, gates, review, push).
const ATTEMPT_SLACK: Duration = Duration::from_secs(30 * 60);
/// The prefix of the refs workers push passed changes to, in the coordinator's repository.
pub const REF_PREFIX: &str = "refs/mvk/temporal";

/// Where the Temporal server is and which queue attempts go to.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `HOST:PORT` (or a URL).
    pub address: String,
    pub task_queue: String,
    /// The server's namespace the workflows run in (`default` unless told).
    pub namespace: String,
}

impl Endpoint {
    fn url(&self) -> Result<Url, String> {
        let text = if self.address.contains("://") {
            self.address.clone()
        } else {
            format!("http://{}", self.address)
        };
        Url::parse(&text).map_err(|e| format!("`{}` is not a server address: {e}", self.address))
    }

    async fn client(&self, identity: String) -> Result<Client, String> {
        let conn = Connection::connect(
            ConnectionOptions::new(self.url()?)
                .identity(identity)
                .build(),
        )
        .await
        .map_err(|e| {
            format!(
                "cannot reach the Temporal server at `{}`: {e}",
                self.address
            )
        })?;
        Client::new(conn, ClientOptions::new(self.namespace.clone()).build())
            .map_err(|e| format!("cannot make a Temporal client: {e}"))
    }
}

// ---------------------------------------------------------------------------------------------
// What goes between the workflow, the coordinator and the workers (JSON payloads, kept small).

/// The workflow's input: the flow as scheduling needs it.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct FlowIn {
    pub run: String,
    pub workflow: String,
    pub file: String,
    pub digest: String,
    /// The coordinator's repository, where workers fetch bases and push changes.
    pub repo: String,
    pub parallel: usize,
    pub continue_on_failure: bool,
    pub tasks: Vec<TaskIn>,
    pub attempt_queue: String,
    pub coord_queue: String,
    pub attempt_timeout_ms: u64,
    /// The flow's own budget, shared by all its tasks.
    #[serde(default)]
    pub budget: Limits,
}

/// The task's and the flow's limits travel in the workflow's input as the policy reads them.
pub use crate::run::policy::Limits;

/// What attempts have spent so far (a task's, or the whole flow's).
#[derive(Clone, Copy, Debug, Default)]
struct Spent {
    tokens: u64,
    usd_micros: u64,
}

impl Spent {
    fn add(&mut self, usage: &crate::run::attempt_result::UsageResult) {
        let usage = crate::run::adapter::Usage::from(*usage);
        self.tokens = self.tokens.saturating_add(usage.tokens());
        self.usd_micros = self
            .usd_micros
            .saturating_add(usage.usd_micros.unwrap_or(0));
    }

    /// What the policy weighs against the limits: this, and `wall_ms` of time.
    fn tally(self, wall_ms: u64) -> policy::Tally {
        policy::Tally {
            tokens: self.tokens,
            usd_micros: self.usd_micros,
            wall_ms,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TaskIn {
    pub name: String,
    pub after: Vec<String>,
    pub scope: Vec<String>,
    pub target: String,
    pub iterations: u32,
    /// The task's ladder, as the workflow climbs it.
    pub ladder: Vec<RungIn>,
    pub same_failure: u32,
    /// The review's rounds of rework: past them a rejection ends the task for a person. `None`
    /// when the task has no reviewer (and in a workflow started by an older mvk).
    #[serde(default)]
    pub review_rounds: Option<u32>,
    /// The task's token, dollar and wall budgets.
    #[serde(default)]
    pub budget: Limits,
}

/// A rung of a task's ladder, as the workflow needs it (the agent itself is the worker's and
/// the coordinator's to look up).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub enum RungIn {
    /// `attempts`: how many this rung allows before the task climbs; `None`, as many as the
    /// budget allows.
    Agent {
        attempts: Option<u32>,
    },
    Human,
}

impl From<&RungIn> for RungKind {
    fn from(rung: &RungIn) -> RungKind {
        match rung {
            RungIn::Agent { attempts } => RungKind::Agent {
                attempts: *attempts,
            },
            RungIn::Human => RungKind::Human,
        }
    }
}

/// One attempt for a worker to make.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct AttemptIn {
    pub workflow: String,
    pub task: String,
    pub number: u32,
    /// The 1-based rung whose agent makes the attempt.
    pub rung: u32,
    /// The failure of the attempt before (or of its landing), for the prompt.
    pub previous: Option<Failure>,
    pub base: String,
    pub target: String,
    pub file: String,
    pub digest: String,
    pub repo: String,
}

/// How a worker's attempt ended.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct AttemptOut {
    pub worker: String,
    /// The change's commit, pushed to `pushed` in the coordinator's repository.
    pub head: Option<String>,
    pub pushed: Option<String>,
    pub failure: Option<Failure>,
    pub gates: Vec<GateResult>,
    pub duration_ms: u64,
    /// The worker's own run of `mvk attempt` (in its clone's ledger).
    pub worker_run: String,
    /// What the attempt's agent (and reviewer) spent.
    #[serde(default)]
    pub usage: crate::run::attempt_result::UsageResult,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct RecordIn {
    pub task: String,
    pub number: u32,
    pub rung: u32,
    pub base: String,
    pub out: AttemptOut,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct LandIn {
    pub task: String,
    pub number: u32,
    pub rung: u32,
    pub base: String,
    pub attempt_id: i64,
    pub head: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub enum LandOut {
    Landed { commit: Option<String> },
    Retry { failure: Failure, base: String },
    Ended { outcome: String, reason: String },
}

/// How a task ends, as the workflow knows it; the coordinator words the reason.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub enum EndIn {
    Landed {
        task: String,
        number: u32,
        commit: Option<String>,
    },
    Ended {
        task: String,
        number: u32,
        outcome: String,
        reason: String,
    },
    Iterations {
        task: String,
        used: u32,
        last: Option<Failure>,
    },
    /// A token, dollar or wall budget, the task's or the flow's (`which`: `usd`, `flow
    /// tokens`, …), ran out after `used` attempts.
    Budget {
        task: String,
        which: String,
        spent: u64,
        limit: u64,
        used: u32,
        last: Option<Failure>,
    },
    /// Every rung's attempts were used.
    Rungs {
        task: String,
        used: u32,
        last: Option<Failure>,
    },
    Stuck {
        task: String,
        same: u32,
        last: Failure,
        attempts: u32,
    },
    Skipped {
        task: String,
        failed: Vec<String>,
    },
}

impl EndIn {
    /// The task that ends.
    fn task(&self) -> &str {
        match self {
            EndIn::Landed { task, .. }
            | EndIn::Ended { task, .. }
            | EndIn::Iterations { task, .. }
            | EndIn::Budget { task, .. }
            | EndIn::Rungs { task, .. }
            | EndIn::Stuck { task, .. }
            | EndIn::Skipped { task, .. } => task,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The workflow.

#[workflow]
#[derive(Default)]
pub struct MvkFlow;

type TaskFut<'a> = LocalBoxFuture<'a, (usize, WorkflowResult<Outcome>)>;

fn fail_workflow(message: String) -> WorkflowTermination {
    WorkflowTermination::failed_application(ApplicationFailure::non_retryable(message))
}

fn outcome_of(name: &str) -> WorkflowResult<Outcome> {
    Outcome::from_name(name).ok_or_else(|| fail_workflow(format!("unknown outcome `{name}`")))
}

/// Options of an activity the coordinator runs. A refusal it answers is not retried (the
/// workflow fails on it); mvk's own error stops the coordinator with a retryable answer, and a
/// coordinator that dies mid-answer stops heartbeating: either way the request is asked again,
/// for as long as it takes, of the coordinator `mvk resume` starts (its answers are
/// idempotent: see `driver::remote`).
fn coord_opts(queue: &str) -> ActivityOptions {
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
fn attempt_opts(input: &FlowIn) -> ActivityOptions {
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
    pub async fn run(ctx: &mut WorkflowContext<Self>, input: FlowIn) -> WorkflowResult<String> {
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
struct FlowSpent {
    spent: std::cell::RefCell<Spent>,
    started: Option<std::time::SystemTime>,
}

/// Milliseconds of workflow time from `from` to `to` (0 when either is unknown).
fn elapsed_ms(from: Option<std::time::SystemTime>, to: Option<std::time::SystemTime>) -> u64 {
    match (from, to) {
        (Some(from), Some(to)) => to.duration_since(from).map_or(0, crate::run::attempt::ms),
        _ => 0,
    }
}

/// Task `task` climbed its ladder to the 0-based rung `to`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ClimbIn {
    pub task: String,
    pub to: usize,
}

/// One task to its end, as the local driver takes it: attempts on the workers, each told the
/// failure before it and made by its rung's agent, each recorded, a passed one landed by the
/// coordinator; the attempt policy ([`policy::decide`]) says when it climbs and when it stops.
async fn run_task(
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
        let now = ctx.workflow_time();
        let flow_spent = *shared.spent.borrow();
        let decision = policy::decide(
            &rules,
            &policy::Standing {
                attempts: number,
                rung: rung_idx,
                on_rung: rung_used,
                last: last.as_ref(),
                same,
                rejections,
                fresh: false,
                task_spent: spent.tally(elapsed_ms(started, now)),
                flow_spent: flow_spent.tally(elapsed_ms(shared.started, now)),
            },
        );
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
        (rung_idx, rung_used) = (decision.rung, decision.on_rung);
        let name = task.name.clone();
        // A person decides, and this executor has no checkpoint to wait at: the task ends for
        // a person, with the branch.
        let for_person = |why: String| EndIn::Ended {
            task: task.name.clone(),
            number,
            outcome: Outcome::Human.name().to_string(),
            reason: format!(
                "{why}; a person decides: land its branch yourself, or run the task again with `--executor local` to approve it"
            ),
        };
        let ending = match decision.next {
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
        };
        if let Some(e) = ending {
            let o = end(e).await?;
            return outcome_of(&o);
        }
        number += 1;
        rung_used += 1;
        let rung = u32::try_from(rung_idx + 1).unwrap_or(u32::MAX);
        let out = ctx
            .execute_activity(
                WorkerActs::attempt,
                AttemptIn {
                    workflow: flow.workflow.clone(),
                    task: task.name.clone(),
                    number,
                    rung,
                    previous: last.clone(),
                    base: base.clone(),
                    target: task.target.clone(),
                    file: flow.file.clone(),
                    digest: flow.digest.clone(),
                    repo: flow.repo.clone(),
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
        let failure = match (failure, head) {
            (Some(f), _) => f,
            (None, None) => {
                return Err(fail_workflow(format!(
                    "attempt {number} of `{}` passed without a commit",
                    task.name
                )));
            }
            (None, Some(head)) => {
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
                match landed {
                    LandOut::Landed { commit } => {
                        let o = end(EndIn::Landed {
                            task: task.name.clone(),
                            number,
                            commit,
                        })
                        .await?;
                        return outcome_of(&o);
                    }
                    LandOut::Ended { outcome, reason } => {
                        let o = end(EndIn::Ended {
                            task: task.name.clone(),
                            number,
                            outcome,
                            reason,
                        })
                        .await?;
                        return outcome_of(&o);
                    }
                    LandOut::Retry {
                        failure,
                        base: new_base,
                    } => {
                        base = new_base;
                        failure
                    }
                }
            }
        };
        same = if last
            .as_ref()
            .is_some_and(|l| l.signature == failure.signature)
        {
            same + 1
        } else {
            1
        };
        if failure.kind == crate::run::failure::FailureKind::Review {
            rejections += 1;
        }
        last = Some(failure);
    }
}

// ---------------------------------------------------------------------------------------------
// The coordinator: its activities hand requests to the loop that owns the run's `Runner`.

enum Request {
    Begin(String),
    Climb(ClimbIn),
    Record(RecordIn),
    Land(LandIn),
    End(EndIn),
}

enum Reply {
    Base(String),
    Id(i64),
    Land(LandOut),
    Outcome(String),
    /// The label of the rung climbed to.
    Climbed(String),
}

/// Why the coordinator gave no answer to a request.
enum Unanswered {
    /// Not something the run's own workflow honestly asks (a forged answer earlier in it): the
    /// workflow fails on it.
    Refused(String),
    /// mvk's own failure (the ledger, git, the disk): the coordinator stops, the run stays as it
    /// stood, and the request, asked again, waits for `mvk resume`.
    Broken(String),
}

type Asked = (Request, oneshot::Sender<Result<Reply, Unanswered>>);

pub struct CoordActs {
    tx: mpsc::UnboundedSender<Asked>,
    /// The run's workflow id: only its activities are served.
    workflow: String,
}

impl CoordActs {
    /// Serves `request` if it comes from the run's own workflow. Anyone who reaches the server
    /// can start a workflow on the coordinator's queue (an agent with the network, review r9d,
    /// F0): its activities are refused, so it can neither land nor record anything.
    async fn serve(&self, ctx: &ActivityContext, request: Request) -> Result<Reply, ActivityError> {
        let from = ctx.info().workflow_id.as_deref();
        if from != Some(self.workflow.as_str()) {
            return Err(ActivityError::application(
                ApplicationFailure::non_retryable(format!(
                    "refused: this coordinator serves workflow `{}` only, not `{}`",
                    self.workflow,
                    from.unwrap_or("(none)")
                )),
            ));
        }
        self.ask(ctx, request).await
    }

    async fn ask(&self, ctx: &ActivityContext, request: Request) -> Result<Reply, ActivityError> {
        let (reply, answer) = oneshot::channel();
        // Retried: a coordinator stopped by a signal (Ctrl-C, a lost terminal) leaves the
        // request to the one `mvk resume` starts, rather than failing the workflow.
        let gone = || retryable("the coordinator stopped serving its run".to_string());
        self.tx.send((request, reply)).map_err(|_| gone())?;
        let mut answer = std::pin::pin!(answer);
        // Beats while the answer is made (a landing waits its turn, gates run): a coordinator
        // that stops beating is dead, and the request goes to the one `mvk resume` starts.
        let answered = loop {
            tokio::select! {
                a = &mut answer => break a,
                () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                    let _ = ctx.record_heartbeat(()).await;
                }
            }
        };
        match answered.map_err(|_| gone())? {
            Ok(r) => Ok(r),
            Err(Unanswered::Refused(message)) => Err(ActivityError::application(
                ApplicationFailure::non_retryable(message),
            )),
            Err(Unanswered::Broken(message)) => Err(retryable(message)),
        }
    }
}

fn unexpected() -> ActivityError {
    ActivityError::application(ApplicationFailure::non_retryable(
        "the coordinator answered another request".to_string(),
    ))
}

#[activities]
impl CoordActs {
    #[activity]
    pub async fn task_begin(
        self: Arc<Self>,
        ctx: ActivityContext,
        task: String,
    ) -> Result<String, ActivityError> {
        match self.serve(&ctx, Request::Begin(task)).await? {
            Reply::Base(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    #[activity]
    pub async fn rung_climbed(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: ClimbIn,
    ) -> Result<String, ActivityError> {
        match self.serve(&ctx, Request::Climb(input)).await? {
            Reply::Climbed(rung) => Ok(rung),
            _ => Err(unexpected()),
        }
    }

    #[activity]
    pub async fn attempt_record(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: RecordIn,
    ) -> Result<i64, ActivityError> {
        match self.serve(&ctx, Request::Record(input)).await? {
            Reply::Id(id) => Ok(id),
            _ => Err(unexpected()),
        }
    }

    #[activity]
    pub async fn land(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: LandIn,
    ) -> Result<LandOut, ActivityError> {
        match self.serve(&ctx, Request::Land(input)).await? {
            Reply::Land(l) => Ok(l),
            _ => Err(unexpected()),
        }
    }

    #[activity]
    pub async fn task_end(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: EndIn,
    ) -> Result<String, ActivityError> {
        match self.serve(&ctx, Request::End(input)).await? {
            Reply::Outcome(o) => Ok(o),
            _ => Err(unexpected()),
        }
    }
}

fn oid(hex: &str) -> Result<Oid, String> {
    Oid::from_str(hex).map_err(|e| format!("`{hex}` is not a commit id: {e}"))
}

/// Answers one request with the run's `Coordinator`; the reports of ended tasks go to `reports`.
async fn answer(
    coord: &Coordinator<'_>,
    request: Request,
    reports: &std::sync::Mutex<BTreeMap<String, TaskReport>>,
) -> Result<Reply, Unanswered> {
    // A request the checks refuse fails the workflow; any other error of mvk's stops it here.
    let e = |e: RunError| match e {
        RunError::Refused { message } => Unanswered::Refused(message),
        other => Unanswered::Broken(crate::run::error_chain(&other)),
    };
    let oid = |hex: &str| oid(hex).map_err(Unanswered::Refused);
    let report = |r: TaskReport| {
        let name = r.outcome.name().to_string();
        if let Ok(mut all) = reports.lock() {
            all.insert(r.name.clone(), r);
        }
        Reply::Outcome(name)
    };
    Ok(match request {
        Request::Begin(task) => Reply::Base(coord.begin_task(&task).map_err(e)?.to_string()),
        Request::Climb(c) => Reply::Climbed(coord.climbed(&c.task, c.to).map_err(e)?),
        Request::Record(r) => {
            let failure = r.out.failure.map(|mut f| {
                // The task's attempt `number`, whatever the worker's run called it.
                f.attempt = r.number;
                f
            });
            let head = r.out.head.as_deref().map(oid).transpose()?;
            let a = RemoteAttempt {
                number: r.number,
                rung: r.rung,
                base: oid(&r.base)?,
                head,
                branch: r
                    .out
                    .pushed
                    .unwrap_or_else(|| format!("worker:{}", r.out.worker_run)),
                worker: r.out.worker,
                failure,
                duration_ms: r.out.duration_ms,
                gates: r.out.gates,
                usage: r.out.usage.into(),
            };
            Reply::Id(coord.record_attempt(&r.task, &a).map_err(e)?)
        }
        Request::Land(l) => {
            let landed = coord
                .land(
                    &l.task,
                    (l.number, l.rung),
                    oid(&l.base)?,
                    l.attempt_id,
                    oid(&l.head)?,
                )
                .await
                .map_err(e)?;
            Reply::Land(match landed {
                Landed::Landed(c) => LandOut::Landed {
                    commit: c.map(|c| c.to_string()),
                },
                Landed::Retry(failure, base) => LandOut::Retry {
                    failure,
                    base: base.to_string(),
                },
                Landed::Ended(o, reason) => LandOut::Ended {
                    outcome: o.name().into(),
                    reason,
                },
            })
        }
        // Asked again (the answer was cut short by the coordinator's death): what the ledger
        // says, not a second end.
        Request::End(end) if let Some(r) = coord.ended(end.task()).map_err(e)? => report(r),
        Request::End(end) => report(
            match end {
                EndIn::Landed {
                    task,
                    number,
                    commit,
                } => {
                    let commit = commit.as_deref().map(oid).transpose()?;
                    coord.check_landed(&task, commit).map_err(e)?;
                    let reason = match commit {
                        Some(c) => format!(
                            "accepted on attempt {number}; landed as {}",
                            &c.to_string()[..10]
                        ),
                        None => format!(
                            "accepted on attempt {number}; the change was empty, nothing to land"
                        ),
                    };
                    coord.end_task(&task, Outcome::Accepted, &reason, commit, number)
                }
                EndIn::Ended {
                    task,
                    number,
                    outcome,
                    reason,
                } => {
                    // A landing ends a task this way only when it did not land: never accepted.
                    let o = Outcome::from_name(&outcome)
                        .filter(|o| !matches!(o, Outcome::Accepted | Outcome::Skipped))
                        .ok_or_else(|| {
                            Unanswered::Refused(format!(
                                "refused: task `{task}` cannot end `{outcome}` so"
                            ))
                        })?;
                    coord.end_task(&task, o, &reason, None, number)
                }
                EndIn::Iterations { task, used, last } => {
                    coord.out_of_iterations(&task, used, last.as_ref())
                }
                EndIn::Rungs { task, used, last } => coord.out_of_rungs(&task, used, last.as_ref()),
                EndIn::Budget {
                    task,
                    which,
                    spent,
                    limit,
                    used,
                    last,
                } => coord.out_of_budget(&task, (&which, spent, limit), used, last.as_ref()),
                EndIn::Stuck {
                    task,
                    same,
                    last,
                    attempts,
                } => coord.stuck(&task, same, &last, attempts),
                EndIn::Skipped { task, failed } => coord.skip(&task, &failed),
            }
            .map_err(e)?,
        ),
    })
}

/// The executor that hands a run's attempts to `mvk worker`s through a Temporal server.
pub struct Temporal {
    pub endpoint: Endpoint,
    /// Where workers fetch bases from and push changes to: this repository, by a URL they reach.
    pub repo_url: String,
}

impl crate::run::executor::Executor for Temporal {
    fn apply<'a>(
        &'a self,
        program: &'a Program,
        opts: &'a RunOptions,
        observer: &'a dyn Observer,
    ) -> crate::run::executor::RunFuture<'a> {
        Box::pin(apply(
            program,
            opts,
            observer,
            &self.endpoint,
            &self.repo_url,
        ))
    }
}

/// Runs `program` as a Temporal workflow: the coordinator's side of `mvk apply --executor
/// temporal`. `Err` for mvk's own failures and the server's.
pub async fn apply(
    program: &Program,
    opts: &RunOptions,
    observer: &dyn Observer,
    endpoint: &Endpoint,
    repo_url: &str,
) -> Result<RunReport, RunError> {
    // The server first: a run that cannot start leaves no run behind.
    let client = connect(endpoint, "apply", opts).await?;
    let coord = Coordinator::open(
        program,
        opts,
        observer,
        "temporal",
        serde_json::json!({"address": endpoint.address, "task_queue": endpoint.task_queue, "namespace": endpoint.namespace, "repo_url": repo_url}),
    )?;
    coordinate_to_end(&coord, client, program, opts, (endpoint, repo_url)).await
}

/// A client of the server at `endpoint`, named for the coordinator's command (`apply`, `resume`).
async fn connect(
    endpoint: &Endpoint,
    command: &str,
    opts: &RunOptions,
) -> Result<Client, RunError> {
    endpoint
        .client(format!(
            "mvk-{command}-{}@{}",
            opts.run_id,
            crate::run::driver::host_name()
        ))
        .await
        .map_err(|message| RunError::Executor { message })
}

/// Coordinates the run to its end: its report, or mvk's own error, recorded as the run's end.
async fn coordinate_to_end(
    coord: &Coordinator<'_>,
    client: Client,
    program: &Program,
    opts: &RunOptions,
    (endpoint, repo_url): (&Endpoint, &str),
) -> Result<RunReport, RunError> {
    let workflow = format!("mvk-{}", opts.run_id);
    let asker = client.clone();
    match coordinate(coord, client, program, opts, endpoint, repo_url).await {
        Ok(reports) => coord.finish(reports),
        Err(e) => {
            // Its workflow runs on (the coordinator failed, not the workflow): the run stays as
            // it stood, for `mvk resume`. Ended here, it could never be continued, while the
            // workers went on making attempts that no coordinator would take (review r9g).
            // Ended only when the server says the workflow is closed, or never had one it was
            // never asked to start (a run that failed before starting it); unreachable, or not
            // knowing a workflow that was started (another server?), it may well run on.
            let started = coord
                .runner()
                .ledger()
                .first_event_detail(&opts.run_id, "temporal.started")
                .map_or(true, |d| d.is_some());
            let closed = match asker
                .get_workflow_handle::<mvk_flow::Run>(workflow.clone())
                .describe(Default::default())
                .await
            {
                Ok(d) => matches!(
                    d.status(),
                    WorkflowExecutionStatus::Completed
                        | WorkflowExecutionStatus::Failed
                        | WorkflowExecutionStatus::Canceled
                        | WorkflowExecutionStatus::Terminated
                        | WorkflowExecutionStatus::ContinuedAsNew
                        | WorkflowExecutionStatus::TimedOut
                ),
                Err(temporalio_client::errors::WorkflowInteractionError::NotFound(_)) => !started,
                Err(_) => false,
            };
            if !closed {
                return Err(RunError::Executor {
                    message: format!(
                        "{}; workflow `{workflow}` may run on, so the run stays as it stood: `mvk resume {}` continues it",
                        crate::run::error_chain(&e),
                        opts.run_id
                    ),
                });
            }
            coord.ended_on_error(&e);
            Err(e)
        }
    }
}

/// Where a Temporal run's workflow lives and how its workers reach the repository, as its
/// `run.started` event recorded them.
pub fn recorded_endpoint(
    ledger: &crate::ledger::Ledger,
    run: &str,
) -> Result<(Endpoint, String), RunError> {
    let detail = ledger
        .first_event_detail(run, "run.started")?
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&detail).unwrap_or_default();
    let field = |name: &str| {
        v.pointer(&format!("/temporal/{name}"))
            .and_then(serde_json::Value::as_str)
    };
    match (field("address"), field("task_queue"), field("repo_url")) {
        (Some(address), Some(task_queue), Some(repo_url)) => Ok((
            Endpoint {
                address: address.to_string(),
                task_queue: task_queue.to_string(),
                namespace: field("namespace").unwrap_or("default").to_string(),
            },
            repo_url.to_string(),
        )),
        _ => Err(RunError::Config {
            message: format!(
                "run `{run}`'s `run.started` event does not say where its Temporal workflow is (runs of mvk before 2026-12-05 recorded no address): start the flow again with `mvk apply`"
            ),
        }),
    }
}

/// Continues the interrupted Temporal run `from.run`: the coordinator's side of `mvk resume`.
/// The workflow lives on in the server (its attempts go on on the workers meanwhile); the new
/// coordinator restores from the ledger what the dead one had recorded, serves the workflow's
/// requests again (those the dead one was answering are asked again once their heartbeat
/// stops), and waits for its end. A workflow that was never started is started.
pub async fn resume(
    program: &Program,
    opts: &RunOptions,
    observer: &dyn Observer,
    (endpoint, repo_url): (&Endpoint, &str),
    from: crate::run::driver::ResumeFrom,
) -> Result<RunReport, RunError> {
    let client = connect(endpoint, "resume", opts).await?;
    let coord = Coordinator::reopen(program, opts, observer, &from, "temporal")?;
    coordinate_to_end(&coord, client, program, opts, (endpoint, repo_url)).await
}

async fn coordinate(
    coord: &Coordinator<'_>,
    client: Client,
    program: &Program,
    opts: &RunOptions,
    endpoint: &Endpoint,
    repo_url: &str,
) -> Result<BTreeMap<String, TaskReport>, RunError> {
    let executor = |message: String| RunError::Executor { message };
    let flow = program.flow.as_ref();
    let tasks: Vec<TaskIn> = coord
        .tasks()
        .map(|(t, target)| TaskIn {
            name: t.name.clone(),
            after: t.after.clone(),
            scope: t.scope.clone(),
            target: target.to_string(),
            iterations: t.budget.iterations,
            ladder: t
                .ladder
                .iter()
                .map(|r| match r {
                    Rung::Agent { attempts, .. } => RungIn::Agent {
                        attempts: *attempts,
                    },
                    Rung::Human => RungIn::Human,
                })
                .collect(),
            same_failure: t.budget.same_failure,
            review_rounds: t.review.as_ref().map(|r| r.rounds),
            budget: policy::Limits::of(t.budget.tokens, t.budget.usd_micros, t.budget.wall),
        })
        .collect();
    let longest = coord
        .tasks()
        .flat_map(|(t, _)| t.ladder.iter())
        .filter_map(|r| match r {
            Rung::Agent { agent, .. } => Some(agent.timeout),
            Rung::Human => None,
        })
        .max()
        .unwrap_or_default();
    let run = opts.run_id.clone();
    let workflow = format!("mvk-{run}");
    let coord_queue = format!("mvk-coordinator-{run}");
    let input = FlowIn {
        run: run.clone(),
        workflow: workflow.clone(),
        file: opts.file.clone(),
        digest: program.digest.to_string(),
        repo: repo_url.to_string(),
        parallel: flow.map_or(1, |f| usize::try_from(f.parallel).unwrap_or(usize::MAX)),
        continue_on_failure: flow.is_some_and(|f| f.continue_on_failure),
        tasks,
        attempt_queue: endpoint.task_queue.clone(),
        coord_queue: coord_queue.clone(),
        attempt_timeout_ms: crate::run::attempt::ms(longest + ATTEMPT_SLACK),
        budget: flow
            .map(|f| policy::Limits::of(f.budget.tokens, f.budget.usd_micros, f.budget.wall))
            .unwrap_or_default(),
    };

    reaches_this_repository(
        &opts.repo_root,
        repo_url,
        coord.tasks().map(|(_, target)| target),
    )
    .await
    .map_err(executor)?;

    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|e| executor(format!("cannot start the Temporal runtime: {e}")))?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Asked>();
    let options = WorkerOptions::new(coord_queue.clone())
        .register_workflow::<MvkFlow>()
        .map_err(|e| executor(format!("cannot register the workflow: {e}")))?
        .register_activities(CoordActs {
            tx,
            workflow: workflow.clone(),
        })
        // The coordinator runs no attempt itself.
        .max_eager_activity_reservations_per_workflow_task(0)
        // Heartbeats reach the server every 2 s rather than every 16 s (80 % of the timeout):
        // a live coordinator is never taken for dead and asked the same thing twice.
        .max_heartbeat_throttle_interval(HEARTBEAT_EVERY)
        .build();
    let mut worker = Worker::new(&runtime, client.clone(), options)
        .map_err(|e| executor(format!("cannot start the coordinator's worker: {e}")))?;
    let stop = worker.shutdown_handle();
    // A resumed run's workflow runs on (or has ended) in the server: it is joined, not started
    // again; one that a dead coordinator never got to start (or to record) is started now, or
    // joined if it runs.
    let resuming = coord
        .runner()
        .ledger()
        .first_event_detail(&run, "temporal.started")?
        .is_some();
    let handle = if resuming {
        // Never started again: a workflow the server no longer keeps (past its retention) would
        // begin every task anew. Its result is read, or its failure said.
        client.get_workflow_handle::<mvk_flow::Run>(workflow.clone())
    } else {
        let started = client
            .start_workflow(
                MvkFlow::run,
                input,
                WorkflowStartOptions::new(coord_queue.clone(), workflow.clone())
                    .id_conflict_policy(WorkflowIdConflictPolicy::UseExisting)
                    .id_reuse_policy(WorkflowIdReusePolicy::RejectDuplicate)
                    .build(),
            )
            .await;
        match started {
            Ok(handle) => handle,
            // Started by a coordinator that died before it could say so, and ended since.
            Err(temporalio_client::errors::WorkflowStartError::AlreadyStarted { .. })
                if coord.resumed() =>
            {
                client.get_workflow_handle::<mvk_flow::Run>(workflow.clone())
            }
            Err(e) => return Err(executor(format!("cannot start workflow `{workflow}`: {e}"))),
        }
    };
    if !resuming {
        coord.runner().emit(
            None,
            None,
            "temporal.started",
            serde_json::json!({"workflow": workflow, "task_queue": endpoint.task_queue, "address": endpoint.address, "repo_url": repo_url}),
        )?;
    }

    let reports = std::sync::Mutex::new(coord.ended_before().clone());
    // The requests run side by side (a landing waits in the merge queue while others record).
    // Out comes why it stopped serving: mvk's own error answering a request, or none.
    let serve = async {
        let mut pending = FuturesUnordered::new();
        loop {
            tokio::select! {
                asked = rx.recv() => {
                    let Some((request, reply)) = asked else { break None };
                    let reports = &reports;
                    pending.push(async move {
                        let answered = answer(coord, request, reports).await;
                        let broken = match &answered {
                            Err(Unanswered::Broken(why)) => Some(why.clone()),
                            _ => None,
                        };
                        let _ = reply.send(answered);
                        broken
                    });
                }
                Some(broken) = pending.next(), if !pending.is_empty() => {
                    if broken.is_some() {
                        break broken;
                    }
                }
            }
        }
    };
    let wait = async {
        let r = handle.get_result(WorkflowGetResultOptions::default()).await;
        stop();
        r
    };
    let run_worker = worker.run();
    let (worked, result) = tokio::select! {
        both = futures_util::future::join(run_worker, wait) => both,
        broken = serve => {
            return Err(executor(match broken {
                Some(why) => format!("the coordinator stopped on an error of its own: {why}"),
                None => "the coordinator's worker stopped".into(),
            }));
        }
    };
    worked.map_err(|e| executor(format!("the coordinator's worker failed: {e}")))?;
    let summary = result.map_err(|e| {
        executor(format!(
            "workflow `{workflow}` failed: {}",
            crate::run::error_chain(&e)
        ))
    })?;
    coord.runner().emit(
        None,
        None,
        "temporal.finished",
        serde_json::json!({"workflow": workflow, "summary": summary}),
    )?;
    let reports = reports
        .into_inner()
        .map_err(|_| executor("the reports' lock was poisoned".into()))?;
    // Every task's end goes through the coordinator; one it never heard of was answered by
    // someone else (review r9e): the run is not called a success.
    if let Some((t, _)) = coord.tasks().find(|(t, _)| !reports.contains_key(&t.name)) {
        return Err(executor(format!(
            "workflow `{workflow}` finished, but task `{}` never ended here: an answer to one of the run's activities did not come from mvk",
            t.name
        )));
    }
    Ok(reports)
}

/// Whether `url`, where workers will fetch bases and push changes, leads to the repository at
/// `root`: every target branch there must be where it is here. Checked before the workflow
/// starts, since a worker that cannot fetch would only fail each attempt, five times over.
async fn reaches_this_repository<'t>(
    root: &Path,
    url: &str,
    targets: impl Iterator<Item = &'t str>,
) -> Result<(), String> {
    // Git would read a leading dash as an option (`--upload-pack=…`) on every worker.
    if url.starts_with('-') {
        return Err(format!("`{url}` (`--repo-url`) is not a repository URL"));
    }
    let targets: std::collections::BTreeSet<&str> = targets.collect();
    for target in targets {
        let name = format!("refs/heads/{target}");
        let here = git(root, &["rev-parse", "--verify", "--quiet", &name])
            .await
            .map_err(|e| format!("the target branch `{target}` is not in this repository: {e}"))?;
        let there = git(root, &["ls-remote", "--heads", url, &name])
            .await
            .map_err(|e| {
                format!("workers could not reach this repository at `{url}` (`--repo-url`): {e}")
            })?;
        let there = there.lines().find_map(|l| {
            l.split_once('\t')
                .filter(|(_, r)| *r == name)
                .map(|(oid, _)| oid)
        });
        if there != Some(here.trim()) {
            return Err(format!(
                "`{url}` (`--repo-url`) is not this repository: its `{target}` is {}, here it is {}; workers must fetch from and push to the repository `mvk apply` runs in (this one, by any URL that reaches it)",
                there.unwrap_or("missing"),
                here.trim()
            ));
        }
    }
    // Equal tips are not enough (a mirror or the clone's origin has them too): a ref made here
    // this moment must show there.
    let probe = format!(
        "{REF_PREFIX}/probe-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    git(root, &["update-ref", &probe, "HEAD"])
        .await
        .map_err(|e| format!("cannot make the probe ref `{probe}`: {e}"))?;
    let seen = git(root, &["ls-remote", url, &probe]).await;
    let _ = git(root, &["update-ref", "-d", &probe]).await;
    match seen {
        Ok(listed) if listed.lines().any(|l| l.ends_with(probe.as_str())) => Ok(()),
        Ok(_) => Err(format!(
            "`{url}` (`--repo-url`) is not this repository: a ref made here does not show there (a mirror or another clone at the same commits?); workers must fetch from and push to the repository `mvk apply` runs in"
        )),
        Err(e) => Err(format!(
            "workers could not reach this repository at `{url}` (`--repo-url`): {e}"
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The worker.

pub struct WorkerActs {
    /// The worker's clone of the repository.
    repo: PathBuf,
    identity: String,
    /// The one repository this worker makes attempts for: its clone's `origin`. Anyone who
    /// reaches the server can start a workflow; a worker that took any repository would run a
    /// stranger's agent and gates with its own credentials (review r9e, 2).
    origin: String,
    /// Told when this worker's checkout cannot be used: the worker stops taking attempts.
    unusable: Arc<tokio::sync::Notify>,
}

/// A failure of the worker itself (git, its clone, `mvk attempt` not answering): retried,
/// perhaps elsewhere.
fn retryable(message: String) -> ActivityError {
    ActivityError::application(ApplicationFailure::new(message))
}

/// The ref a passed change is pushed to: keyed by workflow, task and attempt number. A task's
/// name may hold characters a ref may not (`w[item]`), so it is spelled safely, with a hash.
pub fn change_ref(workflow: &str, task: &str, number: u32) -> String {
    let safe: String = task
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let hash = blake3::hash(task.as_bytes()).to_hex();
    format!("{REF_PREFIX}/{workflow}/{safe}-{}/{number}", &hash[..8])
}

async fn git(repo: &Path, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        // A worker has nobody to answer a password prompt: git fails instead of waiting.
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Awaits `work` (a fetch, a push), heartbeating meanwhile: a slow network must not pass for a
/// dead worker (review r9d, F3). A cancellation drops `work`, which kills its git; so does
/// [`TRANSFER_LIMIT`] (a stalled transfer, an ssh prompt nobody answers), and the attempt is
/// made again, perhaps elsewhere.
async fn beating<T>(
    ctx: &ActivityContext,
    number: u32,
    work: impl std::future::Future<Output = Result<T, ActivityError>>,
) -> Result<T, ActivityError> {
    let mut work = std::pin::pin!(work);
    let limit = tokio::time::sleep(TRANSFER_LIMIT);
    let mut limit = std::pin::pin!(limit);
    loop {
        tokio::select! {
            done = &mut work => return done,
            () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                let _ = ctx.record_heartbeat(number).await;
            }
            () = &mut limit => {
                return Err(retryable(format!(
                    "git did not finish fetching or pushing within {} s",
                    TRANSFER_LIMIT.as_secs()
                )));
            }
            () = ctx.cancelled() => return Err(ActivityError::cancelled()),
        }
    }
}

#[activities]
impl WorkerActs {
    /// One attempt of a task in this worker's clone, from the workflow's base.
    #[activity]
    pub async fn attempt(
        self: Arc<Self>,
        ctx: ActivityContext,
        input: AttemptIn,
    ) -> Result<AttemptOut, ActivityError> {
        let started = Instant::now();
        let repo = &self.repo;
        // A checkout this worker must not or cannot use: the attempt goes to another worker,
        // and this one stops taking attempts.
        let unusable = |message: String| {
            tracing::error!("{message}; this worker stops");
            self.unusable.notify_one();
            retryable(message)
        };
        if same_repository(repo, &input.repo) {
            return Err(unusable(format!(
                "this worker runs in `{}`, the repository `mvk apply` runs in: it checks each attempt's base out, which would move the coordinator's own checkout; run workers in clones of their own",
                repo.display()
            )));
        }
        if !same_url(&self.origin, &input.repo) {
            return Err(ActivityError::application(
                ApplicationFailure::non_retryable(format!(
                    "refused: this worker makes attempts for `{}` (its clone's origin) only, not `{}`",
                    self.origin, input.repo
                )),
            ));
        }
        // The base, from the coordinator's repository, checked out: `mvk attempt` compiles the
        // flow file of the checkout and starts from the base (`--base`).
        let fetched = format!("refs/mvk/coordinator/{}", input.target);
        let refspec = format!("+refs/heads/{}:{fetched}", input.target);
        let args = ["fetch", "--quiet", "--no-tags", "--", &input.repo, &refspec];
        let fetch = git(repo, &args);
        beating(&ctx, input.number, async { fetch.await.map_err(retryable) }).await?;
        git(
            repo,
            &["cat-file", "-e", &format!("{}^{{commit}}", input.base)],
        )
        .await
        .map_err(|e| retryable(format!("the base {} did not arrive: {e}", input.base)))?;
        // Detached, and only over a clean checkout: no branch of the clone moves, and nothing
        // of a person's lost (review r9d, F0b: `checkout -f -B TARGET` did both).
        let dirty = git(repo, &["status", "--porcelain"])
            .await
            .map_err(retryable)?;
        if !dirty.trim().is_empty() {
            return Err(unusable(format!(
                "the worker's checkout `{}` has changes of its own, which a checkout of the base would overwrite: {}",
                repo.display(),
                dirty.lines().take(5).collect::<Vec<_>>().join("; ")
            )));
        }
        // An ignored file where the base has a tracked one is a person's: not overwritten.
        let args = [
            "checkout",
            "--quiet",
            "--no-overwrite-ignore",
            "--detach",
            &input.base,
        ];
        git(repo, &args).await.map_err(retryable)?;
        // The flow this worker would run must be the one the coordinator runs.
        let file = repo.join(&input.file);
        let root = repo.clone();
        let digest = tokio::task::spawn_blocking(move || {
            crate::resolve::compile(
                &file,
                &crate::resolve::Options {
                    repo_root: Some(root),
                    lock: crate::resolve::lock::Mode::Verify,
                    cache_dir: None,
                    confine: None,
                },
            )
            .program
            .map(|p| p.digest.to_string())
        })
        .await
        .map_err(|e| retryable(format!("the compile stopped: {e}")))?;
        if digest.as_deref() != Some(input.digest.as_str()) {
            return Err(ActivityError::application(
                ApplicationFailure::non_retryable(format!(
                    "`{}` at {} in the worker's clone `{}` does not compile to the flow the coordinator runs (digest {} here, {} there)",
                    input.file,
                    input.base,
                    repo.display(),
                    digest.as_deref().unwrap_or("none: it does not compile"),
                    input.digest
                )),
            ));
        }

        // The failure before goes in, and this attempt's comes out, whole, through files in the
        // clone's git directory (the JSON document only summarises a failure).
        let exchange = PathBuf::from(
            git(repo, &["rev-parse", "--absolute-git-dir"])
                .await
                .map_err(retryable)?
                .trim_end(),
        )
        .join("mvk-worker");
        let previous_file = exchange.join("previous.json");
        let failure_file = exchange.join("failure.json");
        let write = |path: &Path, text: &str| {
            std::fs::write(path, text)
                .map_err(|e| retryable(format!("cannot write `{}`: {e}", path.display())))
        };
        std::fs::create_dir_all(&exchange)
            .map_err(|e| retryable(format!("cannot create `{}`: {e}", exchange.display())))?;
        // A file left by an attempt before must not pass for this one's.
        match std::fs::remove_file(&failure_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(retryable(format!(
                    "cannot remove `{}`: {e}",
                    failure_file.display()
                )));
            }
        }
        let exe = crate::exe::path()
            .map_err(|e| retryable(format!("cannot find mvk's own executable: {e}")))?;
        let mut cmd = tokio::process::Command::new(exe);
        cmd.current_dir(repo)
            .args(["attempt", &input.file, "--task", &input.task, "--json"])
            // A worker killed outright (SIGKILL, OOM) takes its attempt with it: the activity
            // is made again elsewhere, and an orphan would go on spending the agent's budget.
            // The signal is armed by the thread that spawns: a runtime worker thread, which
            // lives as long as the worker.
            .arg(format!("--with-parent={}", std::process::id()))
            .arg("--number")
            .arg(input.number.to_string())
            .arg("--rung")
            .arg(input.rung.to_string())
            .args(["--base", &input.base, "--target", &input.target])
            .arg("--failure-out")
            .arg(&failure_file);
        if let Some(previous) = &input.previous {
            let text = serde_json::to_string(previous)
                .map_err(|e| retryable(format!("cannot encode the previous failure: {e}")))?;
            write(&previous_file, &text)?;
            cmd.arg("--previous-failure").arg(&previous_file);
        }
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .map_err(|e| retryable(format!("cannot run `mvk attempt`: {e}")))?;
        let pgid = child.id();
        let mut output = std::pin::pin!(child.wait_with_output());
        let out = loop {
            tokio::select! {
                out = &mut output => break out,
                () = tokio::time::sleep(HEARTBEAT_EVERY) => {
                    // Heartbeats say this worker lives; their answer carries a cancellation.
                    let _ = ctx.record_heartbeat(input.number).await;
                }
                () = ctx.cancelled() => {
                    // `mvk attempt` stops its agent and gates on SIGTERM.
                    if let Some(pid) = pgid.and_then(|p| rustix::process::Pid::from_raw(i32::try_from(p).unwrap_or(0))) {
                        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::TERM);
                    }
                    // Dropping the child now would SIGKILL `mvk attempt` before it stopped its
                    // agent and gates and closed its attempt (review r9d, F1): it is given time.
                    let _ = tokio::time::timeout(CANCEL_GRACE, &mut output).await;
                    return Err(ActivityError::cancelled());
                }
            }
        }
        .map_err(|e| retryable(format!("`mvk attempt` did not finish: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let result: AttemptResult = serde_json::from_str(&stdout).map_err(|e| {
            retryable(format!(
                "`mvk attempt` gave no result ({e}; exit {:?}): {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })?;
        let failure: Option<Failure> = std::fs::read_to_string(&failure_file)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(&text).map_err(|e| e.to_string()))
            .map_err(|e| {
                retryable(format!(
                    "`mvk attempt` left no failure in `{}`: {e}",
                    failure_file.display()
                ))
            })?;
        let passed = result.verdict == "passed";
        let pushed = match (&result.head, passed) {
            (Some(head), true) => {
                let name = change_ref(&input.workflow, &input.task, input.number);
                let refspec = format!("{head}:{name}");
                let args = ["push", "--quiet", "--force", "--", &input.repo, &refspec];
                let push = git(repo, &args);
                beating(&ctx, input.number, async { push.await.map_err(retryable) }).await?;
                Some(name)
            }
            _ => None,
        };
        Ok(AttemptOut {
            worker: self.identity.clone(),
            head: if passed { result.head.clone() } else { None },
            pushed,
            failure: if passed { None } else { failure },
            gates: result.gates,
            duration_ms: crate::run::attempt::ms(started.elapsed()),
            worker_run: result.run,
            usage: result.usage,
        })
    }
}

/// Whether two repository URLs name the same repository: equal, or local paths (`file://`
/// or plain) that resolve to the same directory.
fn same_url(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    // A `host:path` (scp-like) URL is no local path either.
    let local = |u: &str| {
        let scp_like = u.strip_prefix("file://").unwrap_or(u).contains(':');
        local_path(u).filter(|_| !scp_like)
    };
    matches!((local(a), local(b)), (Some(x), Some(y)) if x == y)
}

/// The directory a URL names when it is a local path (`file://…` or plain), resolved; `None`
/// for a URL with a scheme, or a path that does not exist.
fn local_path(url: &str) -> Option<PathBuf> {
    let path = url.strip_prefix("file://").unwrap_or(url);
    if path.contains("://") {
        return None;
    }
    std::fs::canonicalize(path).ok()
}

/// Whether `url` names, as a local path, the repository at `repo` (its checkout or its git
/// directory): a worker there would check bases out in the coordinator's own checkout.
fn same_repository(repo: &Path, url: &str) -> bool {
    let (Some(there), Ok(here)) = (local_path(url), std::fs::canonicalize(repo)) else {
        return false;
    };
    there == here || there == here.join(".git")
}

/// Refuses to start a worker whose checkout has changes: each attempt checks its base out there.
async fn check_worker_checkout(repo: &Path) -> Result<(), String> {
    let dirty = git(repo, &["status", "--porcelain"]).await?;
    if dirty.trim().is_empty() {
        return Ok(());
    }
    Err(format!(
        "`{}` has uncommitted changes ({}); a worker checks each attempt's base out there, which would overwrite them: run `mvk worker` in a clone of its own",
        repo.display(),
        dirty
            .lines()
            .take(3)
            .map(str::trim)
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// `mvk worker`: polls `endpoint.task_queue` and makes one attempt at a time in the clone at
/// `repo`, until SIGTERM or Ctrl-C (which let the running attempt finish).
pub async fn worker(endpoint: &Endpoint, repo: &Path) -> Result<(), RunError> {
    check_worker_checkout(repo)
        .await
        .map_err(|message| RunError::Config { message })?;
    let origin = git(repo, &["config", "--get", "remote.origin.url"])
        .await
        .map(|o| o.trim().to_string())
        .ok()
        .filter(|o| !o.is_empty())
        .ok_or_else(|| RunError::Config {
            message: format!(
                "`{}` has no `origin`: a worker makes attempts only for the repository its clone came from (`git clone URL`, then `mvk worker` in it)",
                repo.display()
            ),
        })?;
    let unusable = Arc::new(tokio::sync::Notify::new());
    let executor = |message: String| RunError::Executor { message };
    let identity = format!(
        "mvk-worker-{}@{}",
        std::process::id(),
        crate::run::driver::host_name()
    );
    let runtime = Runtime::from_current_tokio(Default::default())
        .map_err(|e| executor(format!("cannot start the Temporal runtime: {e}")))?;
    let client = endpoint.client(identity.clone()).await.map_err(executor)?;
    let tuner = TunerHolder::builder()
        .workflow_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        // One attempt at a time: it checks the base out in the clone's own checkout.
        .activity_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .local_activity_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .nexus_task_slot_supplier(FixedSizeSlotSupplier::new(1))
        .build();
    let options = WorkerOptions::new(endpoint.task_queue.clone())
        .register_activities(WorkerActs {
            repo: repo.to_path_buf(),
            identity: identity.clone(),
            origin,
            unusable: unusable.clone(),
        })
        .tuner(tuner)
        .build();
    let mut worker = Worker::new(&runtime, client, options)
        .map_err(|e| executor(format!("cannot start the worker: {e}")))?;
    let stop = worker.shutdown_handle();
    let broke = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let broken = broke.clone();
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
            () = unusable.notified() => broken.store(true, std::sync::atomic::Ordering::SeqCst),
        }
        stop();
    });
    worker
        .run()
        .await
        .map_err(|e| executor(format!("the worker failed: {e}")))?;
    if broke.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(RunError::Config {
            message: format!(
                "the worker stopped: its checkout `{}` cannot be used (see above); give it a clean clone of its own",
                repo.display()
            ),
        });
    }
    Ok(())
}
