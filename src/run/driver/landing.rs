//! Accepted changes in, landed commits out: the merge queue. A change accepted while others land
//! waits in a queue; whoever lands next takes every waiting change bound for the same target and
//! lands them as one batch. Each change becomes its own commit, merged onto the one before it in
//! the order they were accepted, and is gated on exactly that commit when it is not what its
//! gates saw (the batch's changes side by side, up to the flow's `parallel`); then the ledger
//! records every intent and the target moves once, past all of them.
//!
//! A batch gives each change the guarantee landing it alone would (its gates passed on the
//! commit that lands it), while a wide flow's tasks, which finish together, pay for one update
//! of the main checkout instead of one each. A change that does not fit (a conflict, a gate
//! failing on the merged result) leaves the batch and is answered once the rest has landed, so
//! its next attempt starts from the new tip.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use git2::Oid;
use tokio::sync::oneshot;

use super::{Outcome, RunError, Runner, blocking, locked};
use crate::ir::{Gate, Task};
use crate::ledger;
use crate::run::attempt::{self, AttemptSpec, Failure, FailureKind};
use crate::run::event::Event;
use crate::run::git::land::{self, LandError, Prepared};
use crate::run::host::Host;
use crate::run::judge::evidence::GateVerdict;
use crate::run::judge::gate::{self, GateContext};
use crate::run::worktree::Lease;

/// Numbers the changes in the order they were accepted.
static ACCEPTED: AtomicU64 = AtomicU64::new(0);

/// How long a landing waits for the main checkout's index lock while another landing of
/// mvk's holds it, and how often it looks.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long it waits for a lock of unknown owner: git holds one for the moment a command
/// takes (an editor's periodic `git status`); one still there after this is stale, and a
/// person is asked.
const FOREIGN_LOCK_WAIT: Duration = Duration::from_secs(2);
const LOCK_POLL: Duration = Duration::from_millis(200);

/// How often a change is landed again when the target moves between preparing and publishing
/// (someone else pushed to it meanwhile).
const LAND_RETRIES: u32 = 3;

/// How landing an accepted attempt ended.
pub(super) enum Landing {
    Landed(Option<Oid>),
    /// Not landed; try again from this base with this failure in the prompt.
    Retry(Failure, Oid),
    Rejected(Outcome, String),
    Human(String),
    /// Not landed, for a reason outside the change (the main checkout's index is locked): it
    /// waits for a person at a checkpoint, and lands when they approve.
    Wait(String),
}

/// The changes waiting to land, in the order they were accepted.
pub(super) type Queue<'a> = Mutex<Vec<Request<'a>>>;

/// An accepted attempt waiting to land, and where to send how it ended.
pub(super) struct Request<'a> {
    /// Its place in the order changes were accepted, kept when it is queued again.
    seq: u64,
    task: &'a Task,
    target: String,
    number: u32,
    base: Oid,
    attempt_id: i64,
    head: Oid,
    /// Land in a batch of its own: the batch it was in could not be published (a local change
    /// in the main checkout, say), and only landing alone says which change that blocks.
    alone: bool,
    /// How often the target moved while it was being published.
    moved: u32,
    /// Made and judged elsewhere (a Temporal worker): its task gates run again here before it
    /// lands, whether or not the target moved, since its verdict came over the network.
    verify: bool,
    reply: oneshot::Sender<Result<Landing, RunError>>,
}

/// A landing's answer as the ledger keeps it for a change made elsewhere (`landing_answers`),
/// so that the same request asked again, after the coordinator's death, gets the same answer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(super) enum StoredAnswer {
    Landed { commit: Option<String> },
    Retry { failure: Failure, base: String },
    Ended { outcome: String, reason: String },
}

impl StoredAnswer {
    pub(super) fn of(landing: &Landing) -> StoredAnswer {
        match landing {
            Landing::Landed(c) => StoredAnswer::Landed {
                commit: c.map(|c| c.to_string()),
            },
            Landing::Retry(failure, base) => StoredAnswer::Retry {
                failure: failure.clone(),
                base: base.to_string(),
            },
            Landing::Rejected(outcome, reason) => StoredAnswer::Ended {
                outcome: outcome.name().to_string(),
                reason: reason.clone(),
            },
            Landing::Human(reason) | Landing::Wait(reason) => StoredAnswer::Ended {
                outcome: Outcome::Human.name().to_string(),
                reason: reason.clone(),
            },
        }
    }
}

/// Why a change left its batch, answered once the batch has landed.
enum Left {
    /// It does not merge onto the target, or cannot fast-forward.
    Conflict(Vec<String>, &'static str),
    /// Its gates fail on the merged result.
    Regated(Failure),
    /// The target kept moving under it.
    Moving,
}

/// A change of the batch whose commit is ready to publish.
struct Ready<'a> {
    request: Request<'a>,
    /// The commit it was merged onto: the target's tip or the change before it.
    parent: Oid,
    commit: Oid,
}

impl<'a> Runner<'a> {
    /// Tells `request` how its landing ended. The answer for a change made elsewhere is kept in
    /// the ledger first, the moment it is settled: the task holding the landing lock may settle
    /// others' changes and go on gating more, and a coordinator that dies meanwhile must not
    /// lose a rejection it had decided (review r9g).
    fn answer(&self, request: Request<'_>, landing: Landing) -> Result<(), RunError> {
        if request.verify {
            let json = serde_json::to_string(&StoredAnswer::of(&landing)).map_err(|e| {
                RunError::Config {
                    message: format!("cannot encode a landing's answer: {e}"),
                }
            })?;
            self.ledger()
                .record_landing_answer(request.attempt_id, &json)?;
        }
        let _ = request.reply.send(Ok(landing));
        Ok(())
    }

    /// Lands an accepted attempt (`head`, made from `spec.base`) on `target`, in a batch with
    /// whatever else waits, and says how it ended. A change to `verify` was judged elsewhere:
    /// its task gates run again here before it lands.
    pub(super) async fn land(
        &self,
        task: &'a Task,
        target: &str,
        spec: &AttemptSpec<'_>,
        (attempt_id, head): (i64, Oid),
        verify: bool,
    ) -> Result<Landing, RunError> {
        self.set_phase("merging", Some(&task.name), spec.number)?;
        self.emit(
            Some(&task.name),
            Some(spec.number),
            Event::MergeStarted {
                into: target.to_string(),
                strategy: task.merge.strategy.name().to_string(),
            },
        )?;
        // A pull request moves no branch of anyone else's: nothing to queue behind. (A change
        // made elsewhere never gets here: the Temporal coordinator refuses `strategy="pr"`,
        // whose landing does not gate it again.)
        if task.merge.strategy == crate::ir::Strategy::Pr {
            if verify {
                return Err(RunError::Refused {
                    message: format!(
                        "task `{}` was made elsewhere and lands as a pull request, which is not gated again here",
                        task.name
                    ),
                });
            }
            return self.land_pr(task, target, spec, (attempt_id, head)).await;
        }
        let (reply, mut answer) = oneshot::channel();
        locked(&self.queue).push(Request {
            seq: ACCEPTED.fetch_add(1, Ordering::Relaxed),
            task,
            target: target.to_string(),
            number: spec.number,
            base: spec.base,
            attempt_id,
            head,
            alone: false,
            moved: 0,
            verify,
            reply,
        });
        // Whoever holds the turn lands every change waiting for the same target: ours may have
        // landed by the time we get it.
        let _turn = self.landing.lock().await;
        loop {
            match answer.try_recv() {
                Ok(landing) => return landing,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(RunError::Config {
                        message: format!(
                            "the change of task `{}` was not landed: its batch stopped on an error of mvk's",
                            task.name
                        ),
                    });
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let batch = self.next_batch();
            if batch.is_empty() {
                // Ours is queued until answered, so this is a broken queue, not a wait.
                return Err(RunError::Config {
                    message: format!(
                        "the change of task `{}` left the landing queue unanswered",
                        task.name
                    ),
                });
            }
            self.land_batch(batch).await?;
        }
    }

    /// Takes the next batch off the queue: the oldest waiting change and every other one bound
    /// for the same target, in order (a change that must land alone goes alone).
    fn next_batch(&self) -> Vec<Request<'a>> {
        let mut queue = locked(&self.queue);
        if queue.is_empty() {
            return Vec::new();
        }
        let first = queue.remove(0);
        if first.alone {
            return vec![first];
        }
        let (mut batch, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut *queue)
            .into_iter()
            .partition(|r| !r.alone && r.target == first.target);
        *queue = rest;
        batch.insert(0, first);
        batch
    }

    /// Lands `batch` and answers each of its changes; a change to try again is queued again.
    /// An `Err` is mvk's own (git, the ledger, the disk): the changes it leaves unanswered see
    /// their replies closed, and fail too.
    async fn land_batch(&self, batch: Vec<Request<'a>>) -> Result<(), RunError> {
        let Some(target) = batch.first().map(|r| r.target.clone()) else {
            return Ok(());
        };
        let repo_root = self.opts.repo_root.clone();
        let tip = {
            let (root, into) = (repo_root.clone(), target.clone());
            blocking("read the target branch", move || {
                land::branch_tip(&root, &into)
            })
            .await??
        };
        let Some(batch) = self.land_together(batch, &target, tip).await? else {
            return Ok(());
        };
        let mut onto = tip;
        let mut ready: Vec<Ready<'a>> = Vec::new();
        let mut left: Vec<(Request<'a>, Left)> = Vec::new();
        for request in batch {
            match self.fit(&request, &target, onto).await? {
                Fit::Commit(commit) => {
                    ready.push(Ready {
                        request,
                        parent: onto,
                        commit,
                    });
                    onto = commit;
                }
                Fit::Answer(landing) => {
                    self.answer(request, landing)?;
                }
                Fit::Leave(why) => left.push((request, why)),
            }
        }
        let landed = ready.is_empty() || self.publish(&target, tip, ready).await?;
        if !landed {
            // What they left over (a conflict with, or a gate failing after, a change before
            // them) did not land: they try again with the rest.
            self.requeue(left.into_iter().map(|(request, _)| request).collect());
            return Ok(());
        }
        // Answered after the batch moved the target, so their next attempts start from it.
        for (request, why) in left {
            let landing = self.left(&request, &target, why).await?;
            self.answer(request, landing)?;
        }
        Ok(())
    }

    /// Merges `request`'s change onto `onto` and gates the result when it is not what the
    /// change's gates saw (or they ran on a worker), or the loop has after-merge gates, in a
    /// worktree of its own: a clean
    /// checkout of that commit, so nothing an earlier change's gates left behind (edited or
    /// untracked files, a lock) reaches its gates.
    async fn fit(&self, request: &Request<'a>, target: &str, onto: Oid) -> Result<Fit, RunError> {
        let task = request.task;
        let (commit, moved) = match self.merge_one(request, target, onto).await? {
            Merged::Commit { commit, moved } => (commit, moved),
            Merged::Empty => {
                self.emit(
                    Some(&task.name),
                    Some(request.number),
                    Event::MergeEmpty {
                        into: target.to_string(),
                    },
                )?;
                return Ok(Fit::Answer(Landing::Landed(None)));
            }
            Merged::Leave(why) => return Ok(Fit::Leave(why)),
        };
        let gates = landing_gates(request, moved);
        if gates.is_empty() {
            return Ok(Fit::Commit(commit));
        }
        let lease: Lease = self
            .acquire(commit, &landing_branch(&self.run_id, task))
            .await?;
        Ok(self
            .gate_on(request, target, (onto, moved), (&gates, 0), lease)
            .await?
            .unwrap_or(Fit::Commit(commit)))
    }

    /// `request`'s change merged onto `onto`, as its commit, ungated.
    async fn merge_one(
        &self,
        request: &Request<'a>,
        target: &str,
        onto: Oid,
    ) -> Result<Merged, RunError> {
        let task = request.task;
        let strategy = task.merge.strategy;
        let prepared = {
            let (root, into) = (self.opts.repo_root.clone(), target.to_string());
            let (base, head) = (request.base, request.head);
            let message = landing_message(task, &self.run_id, request.number);
            blocking("prepare a landing", move || {
                land::prepare(&root, &into, onto, strategy, base, head, &message)
            })
            .await?
        };
        Ok(match prepared {
            Ok(Prepared::Commit { commit, moved, .. }) => Merged::Commit { commit, moved },
            Ok(Prepared::Nothing { .. }) => Merged::Empty,
            Err(LandError::Conflict { paths, .. }) => Merged::Leave(Left::Conflict(
                paths,
                "the change conflicts with the target",
            )),
            Err(LandError::NotFastForward { .. }) => Merged::Leave(Left::Conflict(
                Vec::new(),
                "the target moved, so a fast-forward is impossible",
            )),
            Err(e) => return Err(e.into()),
        })
    }

    /// Runs GATES of `request`'s change (merged onto `onto`; `moved`: the target had moved past
    /// its base) in LEASE, a clean checkout of a commit that holds it. `None` when every gate
    /// passed; else how the change fares.
    async fn gate_on(
        &self,
        request: &Request<'a>,
        target: &str,
        (onto, moved): (Oid, bool),
        (gates, first): (&[(&Gate, bool)], usize),
        lease: Lease,
    ) -> Result<Option<Fit>, RunError> {
        let task = request.task;
        let env = attempt::landing_env(
            &self.run_id,
            &task.name,
            request.number,
            onto,
            &lease.path,
            &task.scope,
        );
        let dir = self.attempt_dir(&task.name, request.number);
        // The landing gates run the change's code: its signals to mvk are its own.
        let window = crate::run::exec::signals::Window::new();
        for (i, (g, regate)) in gates.iter().enumerate() {
            let cx = GateContext {
                cwd: &lease.path,
                env: &env,
                log: dir.join(format!("merge-gate-{}.log", crate::slug::slug(&g.name))),
                timeout: g.timeout,
                sandbox: task.sandbox.as_ref(),
                protected: &self.protected,
            };
            let run = gate::run_gate_counted(g, &cx, Some(&window))
                .await
                .map_err(RunError::Gate)?;
            // What escaped the gate must not act on the worktree or signal mvk later.
            let swept = crate::run::exec::reaper::kill_adopted(&self.run_id, &task.name);
            self.record_gate(
                request.attempt_id,
                &task.name,
                request.number,
                "after-merge",
                first + i,
                &run,
            )?;
            // A landing gate whose processes sent mvk stop signals: the change does not land,
            // whatever the gate's verdict (as an attempt's gate that does is rejected).
            let gate = run.gate.clone();
            let signals = self
                .signals_sent(&window, &task.name, request.number, |signals| {
                    Event::GateSignalledMvk {
                        gate,
                        landing: Some(true),
                        signals,
                    }
                })
                .await?;
            if signals > 0 {
                return Ok(Some(Fit::Answer(Landing::Rejected(
                    Outcome::Rejected,
                    format!(
                        "after-merge gate `{}` sent mvk {signals} stop signal(s); the change was not landed, it stays on its branch",
                        run.gate
                    ),
                ))));
            }
            if swept.survived {
                // What mvk could not end may still write the slot: never leased again.
                lease.retire()?;
                return Ok(Some(Fit::Answer(Landing::Rejected(
                    Outcome::Rejected,
                    format!(
                        "after-merge gate `{}` left processes that were still appearing when mvk's sweep gave up; the change was not landed, it stays on its branch",
                        run.gate
                    ),
                ))));
            }
            if run.verdict == GateVerdict::Pass {
                continue;
            }
            if *regate {
                // The change does not hold on the moved target, or did not pass here what a
                // worker said it passed: retry from the target's tip.
                let mut f = attempt::gate_failure(request.number, &run, &lease.path);
                f.kind = FailureKind::Merge;
                f.criterion = if moved {
                    format!(
                        "the change still passes after merging with the moved `{target}`: {}",
                        f.criterion
                    )
                } else {
                    format!(
                        "the change passes its gates when mvk runs them again before landing it (the worker said it passed): {}",
                        f.criterion
                    )
                };
                return Ok(Some(Fit::Leave(Left::Regated(f))));
            }
            self.emit(
                Some(&task.name),
                Some(request.number),
                Event::MergeFailed {
                    gate: run.gate.clone(),
                    reason: run.reason.clone(),
                    log: run.log.display().to_string(),
                },
            )?;
            let outcome = if run.verdict == GateVerdict::Unknown {
                Outcome::Unknown
            } else {
                Outcome::Rejected
            };
            return Ok(Some(Fit::Answer(Landing::Rejected(
                outcome,
                format!(
                    "after-merge gate `{}` did not pass on the merged result ({}); `{target}` was not moved, the change stays on its branch",
                    run.gate, run.reason
                ),
            ))));
        }
        Ok(None)
    }

    /// Lands BATCH with its changes' own gates run side by side: each change merged onto the one
    /// before, as change by change, then each change's task gates (which its attempts already
    /// ran side by side) run again on exactly its own commit, each in a clean checkout of its
    /// own, as many at once as the flow's `parallel`; the after-merge gates, which may share a
    /// port, a database or a deploy target, still run one change at a time, in order. What
    /// lands is what change by change would land: the changes before the first that does not
    /// pass land; that one is settled by its own verdict (a rejection stays a rejection); the
    /// changes after it, gated on commits holding it, wait for the next batch. A change that
    /// does not merge sends the batch back to be landed change by change. Out comes the batch
    /// when sent back.
    async fn land_together(
        &self,
        batch: Vec<Request<'a>>,
        target: &str,
        tip: Oid,
    ) -> Result<Option<Vec<Request<'a>>>, RunError> {
        // Fewer than two changes that may run their own gates again: nothing to run side by
        // side, so no merging here for `fit` to do again. Counted before merging, from what is
        // known: the first change moved only if its base is not the tip, the later ones may
        // have (never fewer than merging would find).
        let may_regate = batch
            .iter()
            .enumerate()
            .filter(|&(i, r)| {
                !r.task.gates.is_empty()
                    && (r.verify
                        || (r.task.merge.strategy != crate::ir::Strategy::Ff
                            && (i > 0 || r.base != tip)))
            })
            .count();
        if may_regate < 2 {
            return Ok(Some(batch));
        }
        let mut onto = tip;
        let mut chain: Vec<(Oid, Oid, bool)> = Vec::with_capacity(batch.len());
        for request in &batch {
            match self.merge_one(request, target, onto).await? {
                Merged::Commit { commit, moved } => {
                    chain.push((onto, commit, moved));
                    onto = commit;
                }
                Merged::Empty | Merged::Leave(_) => return Ok(Some(batch)),
            }
        }
        // Each change's own gates (run again) and its after-merge gates, split once.
        let (own, after): (Vec<Gates<'_>>, Vec<Gates<'_>>) = batch
            .iter()
            .zip(&chain)
            .map(|(request, &(_, _, moved))| {
                landing_gates(request, moved)
                    .into_iter()
                    .partition(|(_, regate)| *regate)
            })
            .unzip();
        if own.iter().filter(|g| !g.is_empty()).count() < 2 {
            return Ok(Some(batch));
        }
        // Each change's verdict: `None` while it passes, else how it fares.
        let mut verdicts: Vec<Option<Fit>> = (0..batch.len()).map(|_| None).collect();
        let width = self
            .program
            .flow
            .as_ref()
            .map_or(1, |f| usize::try_from(f.parallel).unwrap_or(usize::MAX))
            .max(1);
        {
            let mut running = futures_util::stream::FuturesUnordered::new();
            let mut pending = (0..batch.len()).filter(|&i| !own[i].is_empty());
            loop {
                while running.len() < width {
                    let Some(i) = pending.next() else {
                        break;
                    };
                    let request = &batch[i];
                    let (parent, commit, moved) = chain[i];
                    let gates = &own[i];
                    running.push(async move {
                        let branch = landing_branch(&self.run_id, request.task);
                        let lease: Lease = self.acquire(commit, &branch).await?;
                        let fit = self
                            .gate_on(request, target, (parent, moved), (gates, 0), lease)
                            .await?;
                        Ok::<_, RunError>((i, fit))
                    });
                }
                match futures_util::StreamExt::next(&mut running).await {
                    Some(done) => {
                        let (i, fit) = done?;
                        verdicts[i] = fit;
                    }
                    None => break,
                }
            }
        }
        // The after-merge gates, one change at a time, up to the first change that fails.
        for i in 0..batch.len() {
            if verdicts[i].is_some() {
                break;
            }
            if after[i].is_empty() {
                continue;
            }
            let request = &batch[i];
            let (parent, commit, moved) = chain[i];
            let lease: Lease = self
                .acquire(commit, &landing_branch(&self.run_id, request.task))
                .await?;
            // Their ordinals go on from the own gates' (`landing_gates` puts those first).
            verdicts[i] = self
                .gate_on(
                    request,
                    target,
                    (parent, moved),
                    (&after[i], own[i].len()),
                    lease,
                )
                .await?;
        }
        // The first change that did not pass, and its verdict.
        let mut first = verdicts
            .iter_mut()
            .enumerate()
            .find_map(|(k, v)| v.take().map(|fit| (k, fit)));
        let split = first.as_ref().map(|(k, _)| *k);
        let mut settled: Option<(Request<'a>, Fit)> = None;
        let mut later: Vec<Request<'a>> = Vec::new();
        let mut ready: Vec<Ready<'a>> = Vec::new();
        for (i, (request, (parent, commit, _))) in batch.into_iter().zip(chain).enumerate() {
            match split {
                Some(k) if i == k => {
                    settled = first.take().map(|(_, fit)| (request, fit));
                }
                // A final rejection (its gate signalled mvk, or left processes behind) stands
                // wherever it came; the others were gated on commits holding the one that
                // failed, and are gated again (review r5b).
                Some(k) if i > k => match verdicts[i].take() {
                    Some(Fit::Answer(landing)) => {
                        self.answer(request, landing)?;
                    }
                    _ => later.push(request),
                },
                _ => ready.push(Ready {
                    request,
                    parent,
                    commit,
                }),
            }
        }
        if let Some((request, _)) = &settled {
            self.emit(
                Some(&request.task.name),
                Some(request.number),
                Event::MergeBatchSplit { into: target.to_string(), kept: ready.iter().map(|r| r.request.task.name.clone()).collect(), later: later.iter().map(|r| r.task.name.clone()).collect(), reason: "its gates did not pass on its commit: the changes before it land, those after it are gated again on what lands".to_string(), },
            )?;
        }
        // Those after the one that failed were gated on commits holding it: they wait for the
        // next batch, gated again on what lands now.
        self.requeue(later);
        let landed = ready.is_empty() || self.publish(target, tip, ready).await?;
        match settled {
            Some((request, Fit::Answer(landing))) => {
                self.answer(request, landing)?;
            }
            Some((request, Fit::Leave(why))) if landed => {
                let landing = self.left(&request, target, why).await?;
                self.answer(request, landing)?;
            }
            // What it left over did not land: it tries again with the rest.
            Some((request, _)) => self.requeue(vec![request]),
            None => {}
        }
        Ok(None)
    }

    /// Records the intent to land every change in `ready`, moves `target` from `tip` past all
    /// of them, and answers them; a batch that cannot be published is queued again (alone,
    /// when the main checkout refused it) or, when the target keeps moving, retried from its
    /// new tip. Out comes whether the batch landed.
    async fn publish(
        &self,
        target: &str,
        tip: Oid,
        ready: Vec<Ready<'a>>,
    ) -> Result<bool, RunError> {
        // Named in every intent before the lock is taken: whatever instant mvk dies at, a resume
        // can tell the main checkout's `index.lock` is this landing's and finish or undo it.
        let lock = land::lock_name(&self.run_id);
        let mut intents = Vec::with_capacity(ready.len());
        for r in &ready {
            let task = r.request.task;
            intents.push(self.ledger().begin_merge(&ledger::MergeStart {
                run: &self.run_id,
                task: &task.name,
                attempt_id: r.request.attempt_id,
                into: target,
                strategy: task.merge.strategy.name(),
                old_tip: &r.parent.to_string(),
                new_commit: &r.commit.to_string(),
                index_lock: Some(&lock),
            })?);
        }
        crate::run::failpoint("merge-intent");
        let last = ready.last().map_or(tip, |r| r.commit);
        let reflog = match ready.as_slice() {
            [one] => format!("mvk: land {} of run {}", one.request.task.name, self.run_id),
            [first, rest @ ..] => format!(
                "mvk: land {} and {} more of run {}",
                first.request.task.name,
                rest.len(),
                self.run_id
            ),
            [] => format!("mvk: land nothing of run {}", self.run_id),
        };
        let mut waited = Duration::ZERO;
        let published = loop {
            let (root, into) = (self.opts.repo_root.clone(), target.to_string());
            let (reflog, lock) = (reflog.clone(), lock.clone());
            let published = blocking("land a change", move || {
                land::publish(&root, &into, tip, last, &reflog, &lock)
            })
            .await?;
            match &published {
                // Another landing of mvk's (another run's, in this checkout) holds the lock for
                // the moment it takes to land: wait for it rather than stop for a person.
                Err(LandError::IndexLocked {
                    lock,
                    owner: Some(_),
                }) if waited < LOCK_WAIT => {
                    if waited.is_zero() {
                        self.lock_wait(&ready, lock, LOCK_WAIT)?;
                    }
                    tokio::time::sleep(LOCK_POLL).await;
                    waited += LOCK_POLL;
                }
                Err(LandError::IndexLocked { lock, owner: None }) if waited < FOREIGN_LOCK_WAIT => {
                    if waited.is_zero() {
                        self.lock_wait(&ready, lock, FOREIGN_LOCK_WAIT)?;
                    }
                    tokio::time::sleep(LOCK_POLL).await;
                    waited += LOCK_POLL;
                }
                _ => break published,
            }
        };
        let refused = match published {
            Ok(()) => {
                crate::run::failpoint("merge-published");
                for (r, id) in ready.into_iter().zip(intents) {
                    let task = r.request.task;
                    self.ledger()
                        .finish_merge(id, "done", Some(&r.commit.to_string()), "")?;
                    self.emit(
                        Some(&task.name),
                        Some(r.request.number),
                        Event::MergeDone {
                            commit: r.commit.to_string(),
                            into: target.to_string(),
                            strategy: task.merge.strategy.name().to_string(),
                        },
                    )?;
                    self.answer(r.request, Landing::Landed(Some(r.commit)))?;
                }
                return Ok(true);
            }
            Err(LandError::Moved { .. }) => {
                for id in intents {
                    self.ledger().finish_merge(
                        id,
                        "aborted",
                        None,
                        "the target moved while landing",
                    )?;
                }
                let mut again = Vec::new();
                for mut r in ready {
                    r.request.moved += 1;
                    if r.request.moved >= LAND_RETRIES {
                        let landing = self.left(&r.request, target, Left::Moving).await?;
                        self.answer(r.request, landing)?;
                    } else {
                        again.push(r.request);
                    }
                }
                self.requeue(again);
                return Ok(false);
            }
            Err(LandError::Dirty { paths }) => {
                let detail = format!("local changes in the main checkout: {}", paths.join(", "));
                Refused::Dirty(paths, detail)
            }
            Err(LandError::IndexLocked { lock, owner }) => {
                let whose = match &owner {
                    Some(own) => {
                        let run = self.ledger().run_of_index_lock(own)?;
                        format!(
                            "a landing of mvk's holds it (its file `{own}`{}): if no mvk runs, `mvk resume{}` finishes or undoes that landing",
                            run.as_deref()
                                .map(|r| format!(", run {r}"))
                                .unwrap_or_default(),
                            run.as_deref().map(|r| format!(" {r}")).unwrap_or_default(),
                        )
                    }
                    None => format!(
                        "another git process is running, or one crashed; when none runs, remove it (`rm {}`)",
                        lock.display()
                    ),
                };
                Refused::Locked(format!(
                    "the main checkout's index is locked: `{}` exists, and {whose}; nothing was written to the main checkout",
                    lock.display()
                ))
            }
            // An index libgit2 cannot read stops every change alike, before any file is
            // written, until the person turns the feature off: a wait, as for a lock.
            Err(e @ LandError::UnreadableIndex { .. }) => {
                Refused::Locked(format!("{e}; nothing was written to the main checkout"))
            }
            // Half-landed and not put back: the intents stay open, for `mvk resume` to finish
            // or undo the landing from them.
            Err(e @ LandError::Knotted { .. }) => return Err(e.into()),
            Err(LandError::CheckedOutElsewhere { path, .. }) => {
                Refused::Elsewhere(format!("`{target}` is checked out in `{}`", path.display()))
            }
            Err(e) => {
                for id in intents {
                    self.ledger()
                        .finish_merge(id, "failed", None, &e.to_string())?;
                }
                return Err(e.into());
            }
        };
        for id in intents {
            self.ledger()
                .finish_merge(id, "aborted", None, refused.detail())?;
        }
        if ready.len() > 1 && !matches!(refused, Refused::Locked(_)) {
            // Which of them the main checkout refuses is for each alone to find out; the
            // others land. (A lock refuses every one of them alike.)
            self.requeue(
                ready
                    .into_iter()
                    .map(|r| Request {
                        alone: true,
                        ..r.request
                    })
                    .collect(),
            );
            return Ok(false);
        }
        for r in ready {
            let task = r.request.task;
            let branch = attempt::branch_name(&self.run_id, &task.name, r.request.number);
            let why = match &refused {
                Refused::Dirty(paths, _) => {
                    self.emit(
                        Some(&task.name),
                        Some(r.request.number),
                        Event::MergeBlocked {
                            paths: paths.to_vec(),
                        },
                    )?;
                    format!(
                        "accepted, but landing would overwrite local changes to {} in the main checkout; commit or stash them, then land branch `{branch}`",
                        paths.join(", ")
                    )
                }
                Refused::Locked(detail) => {
                    self.emit(
                        Some(&task.name),
                        Some(r.request.number),
                        Event::MergeLocked {
                            reason: detail.to_string(),
                        },
                    )?;
                    // Not the task's end: once the lock is gone, approving lands the change.
                    let question = format!(
                        "attempt {} was accepted, but {detail}; once that is put right, approve to land it on `{target}` (branch `{branch}`; `mvk resume` lands it too once nothing stops it), or reject with a reason for another attempt",
                        r.request.number
                    );
                    self.answer(r.request, Landing::Wait(question))?;
                    continue;
                }
                Refused::Elsewhere(detail) => format!(
                    "accepted, but {detail}, whose files landing would leave stale; land branch `{branch}` there"
                ),
            };
            self.answer(r.request, Landing::Human(why))?;
        }
        Ok(false)
    }

    /// Says that the landing of `ready` waits (at most `wait`) for the main checkout's index
    /// lock at `lock`: `merge.lock-wait`, once per change.
    fn lock_wait(
        &self,
        ready: &[Ready<'a>],
        lock: &std::path::Path,
        wait: Duration,
    ) -> Result<(), RunError> {
        for r in ready {
            self.emit(
                Some(&r.request.task.name),
                Some(r.request.number),
                Event::MergeLockWait {
                    lock: lock.display().to_string(),
                    wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                },
            )?;
        }
        Ok(())
    }

    /// Puts `requests` back in the queue, in the order they were accepted, for the next batch.
    fn requeue(&self, requests: Vec<Request<'a>>) {
        let mut queue = locked(&self.queue);
        queue.extend(requests);
        queue.sort_by_key(|r| r.seq);
    }

    /// How a change that left its batch ended, now that the batch has landed: another attempt
    /// from the target's new tip.
    async fn left(
        &self,
        request: &Request<'a>,
        target: &str,
        why: Left,
    ) -> Result<Landing, RunError> {
        let task = request.task;
        let new_base = {
            let (root, into) = (self.opts.repo_root.clone(), target.to_string());
            blocking("read the target branch", move || {
                land::branch_tip(&root, &into)
            })
            .await??
        };
        let (paths, why) = match why {
            Left::Regated(f) => return Ok(Landing::Retry(f, new_base)),
            Left::Conflict(paths, why) => (paths, why),
            Left::Moving => (
                Vec::new(),
                "the target kept moving while the change was landed",
            ),
        };
        self.emit(
            Some(&task.name),
            Some(request.number),
            Event::MergeConflict {
                paths: paths.clone(),
                into: target.to_string(),
                reason: why.to_string(),
                target_tip: new_base.to_string(),
            },
        )?;
        let shown = if paths.is_empty() {
            String::new()
        } else {
            format!(" at {}", paths.join(", "))
        };
        let mut f = Failure::new(
            request.number,
            FailureKind::Merge,
            format!(
                "the change lands on `{target}`, but {why}{shown}; the next attempt starts from the new tip"
            ),
            &[why, &paths.join("\n")],
        );
        f.tail = paths.iter().map(|p| format!("conflict: {p}\n")).collect();
        Ok(Landing::Retry(f, new_base))
    }
}

/// What merging one change of a batch came to.
enum Fit {
    /// Its commit, gated where it had to be: it lands with the batch.
    Commit(Oid),
    /// It is settled without landing anything (empty, or refused by an after-merge gate).
    Answer(Landing),
    /// It leaves the batch, to be answered once the batch has landed.
    Leave(Left),
}

/// Gates to run on a landing, each with whether it is one of the task's own, run again.
type Gates<'t> = Vec<(&'t Gate, bool)>;

/// What merging one change onto a commit came to, before any gate.
enum Merged {
    Commit {
        commit: Oid,
        moved: bool,
    },
    /// The change adds nothing to the target.
    Empty,
    Leave(Left),
}

/// The gates a change runs before it lands (each with whether it is one of the task's own,
/// run again): the task's gates when the target moved past its base or its verdict came from
/// elsewhere, then the after-merge gates.
fn landing_gates<'t>(request: &Request<'t>, moved: bool) -> Vec<(&'t Gate, bool)> {
    let task = request.task;
    let mut gates: Vec<(&Gate, bool)> = Vec::new();
    if moved || request.verify {
        gates.extend(task.gates.iter().map(|g| (g, true)));
    }
    gates.extend(task.merge.gates.iter().map(|g| (g, false)));
    gates
}

/// The branch a task's landing gates run on.
fn landing_branch(run: &str, task: &Task) -> String {
    format!("mvk/{run}/{}/landing", crate::slug::slug(&task.name))
}

/// Why the main checkout refused a batch.
enum Refused {
    Dirty(Vec<String>, String),
    Locked(String),
    Elsewhere(String),
}

impl Refused {
    fn detail(&self) -> &str {
        match self {
            Refused::Dirty(_, d) | Refused::Locked(d) | Refused::Elsewhere(d) => d,
        }
    }
}

/// The landing commit's message: the goal, and trailers naming the run, task, attempt and digest.
pub(super) fn landing_message(task: &Task, run: &str, attempt: u32) -> String {
    let first = task.goal.lines().next().unwrap_or("").trim();
    let mut subject: String = first.chars().take(60).collect();
    if subject.len() < first.len() {
        subject.push('…');
    }
    format!(
        "mvk: {}: {subject}\n\n{}\n\nMvk-Run: {run}\nMvk-Task: {}\nMvk-Attempt: {attempt}\nMvk-Digest: {}\n",
        task.name,
        task.goal.trim(),
        task.name,
        task.meta.digest
    )
}
