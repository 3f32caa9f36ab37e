//! The coordinator's side, in `mvk apply`: the workflow's requests in (begin, record, land, end a
//! task), answered by the loop that owns the run's `Runner`, so the ledger has one writer and
//! changes land through the local merge queue; out, the run's report. Also starting, resuming
//! and finding the workflow of a run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use git2::Oid;
use temporalio_client::{
    Client, WorkflowExecutionStatus, WorkflowGetResultOptions, WorkflowIdConflictPolicy,
    WorkflowIdReusePolicy, WorkflowStartOptions,
};
use temporalio_macros::activities;
use temporalio_sdk::activities::{ActivityContext, ActivityError};
use temporalio_sdk::{ApplicationFailure, Runtime, Worker, WorkerOptions};
use tokio::sync::{mpsc, oneshot};

use super::wire::{ClimbIn, EndIn, FlowIn, LandIn, LandOut, RecordIn, RungIn, TaskIn};
use super::worker::{git, retryable};
use super::workflow::{FlowRun, MvkFlow};
use super::{ATTEMPT_SLACK, Endpoint, HEARTBEAT_EVERY, REF_PREFIX};
use crate::ir::{Program, Rung};
use crate::run::driver::remote::{Coordinator, Landed, RemoteAttempt};
use crate::run::driver::{Observer, Outcome, RunError, RunOptions, RunReport, TaskReport};
use crate::run::event::Event;
use crate::run::host::Host;
use crate::run::policy::{self};

pub(super) enum Request {
    Begin(String),
    Climb(ClimbIn),
    Record(RecordIn),
    Land(LandIn),
    End(EndIn),
}

pub(super) enum Reply {
    Base(String),
    Id(i64),
    Land(LandOut),
    Outcome(String),
    /// The label of the rung climbed to.
    Climbed(String),
}

/// Why the coordinator gave no answer to a request.
pub(super) enum Unanswered {
    /// Not something the run's own workflow honestly asks (a forged answer earlier in it): the
    /// workflow fails on it.
    Refused(String),
    /// mvk's own failure (the ledger, git, the disk): the coordinator stops, the run stays as it
    /// stood, and the request, asked again, waits for `mvk resume`.
    Broken(String),
}

pub(super) type Asked = (Request, oneshot::Sender<Result<Reply, Unanswered>>);

pub(crate) struct CoordActs {
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

pub(super) fn unexpected() -> ActivityError {
    ActivityError::application(ApplicationFailure::non_retryable(
        "the coordinator answered another request".to_string(),
    ))
}

#[activities]
impl CoordActs {
    #[activity]
    pub(crate) async fn task_begin(
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
    pub(crate) async fn rung_climbed(
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
    pub(crate) async fn attempt_record(
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
    pub(crate) async fn land(
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
    pub(crate) async fn task_end(
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

pub(super) fn oid(hex: &str) -> Result<Oid, String> {
    Oid::from_str(hex).map_err(|e| format!("`{hex}` is not a commit id: {e}"))
}

/// Answers one request with the run's `Coordinator`; the reports of ended tasks go to `reports`.
pub(super) async fn answer(
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
pub(crate) struct Temporal {
    pub(crate) endpoint: Endpoint,
    /// Where workers fetch bases from and push changes to: this repository, by a URL they reach.
    pub(crate) repo_url: String,
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
pub(crate) async fn apply(
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
pub(super) async fn connect(
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
pub(super) async fn coordinate_to_end(
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
                .get_workflow_handle::<FlowRun>(workflow.clone())
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
pub(crate) fn recorded_endpoint(
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
pub(crate) async fn resume(
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

pub(super) async fn coordinate(
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
        client.get_workflow_handle::<FlowRun>(workflow.clone())
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
                client.get_workflow_handle::<FlowRun>(workflow.clone())
            }
            Err(e) => return Err(executor(format!("cannot start workflow `{workflow}`: {e}"))),
        }
    };
    if !resuming {
        coord.runner().emit(
            None,
            None,
            Event::TemporalStarted {
                workflow: workflow.clone(),
                task_queue: endpoint.task_queue.clone(),
                address: endpoint.address.clone(),
                repo_url: repo_url.to_string(),
            },
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
        Event::TemporalFinished {
            workflow: workflow.clone(),
            summary: summary.clone(),
        },
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
pub(super) async fn reaches_this_repository<'t>(
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
