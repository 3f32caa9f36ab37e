//! One attempt of a task in (a base commit, a rung's agent, the previous failure); out comes its
//! result: passed with the commit that holds the change, or failed with the exact failure the
//! next attempt is told about. In between: a pooled worktree, the prompt, the agent (retried on
//! rate limits), the capture commit, the seal check and the gates.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use git2::{Oid, Repository};

use crate::ir::{Agent, Task};
use crate::run::error::{RunError, blocking};
use crate::run::event::Event;
use crate::run::exec::process::{self, Termination};
use crate::run::git::seal::{self, Seal, SealVerdict};
use crate::run::host::{Budgets, Host};
use crate::run::judge::adapter::Usage;
use crate::run::judge::evidence::GateVerdict;
use crate::run::judge::gate::{self, GateContext};
use crate::run::meter::{Meter, Spend, TaskCaps, Trip};
use crate::run::worktree::{self, Lease};
use crate::slug::slug;
use review::Verdict;

mod agent;
mod context;
mod failures;
pub(crate) mod lessons;
mod lookback;
pub(crate) mod review;

use agent::{absorb_agent_objects, agent_failure, agent_tail};
pub(crate) use agent::{
    agent_process, keep_limited_logs, rate_limit_matcher, rate_limited, review_only, usage_of,
};
pub use context::landing_env;
use context::{build_prompt, gate_env};
pub(crate) use failures::{ESCAPEES_SURVIVED, escaped_gate, gate_failure};
use failures::{review_failure, signalled_by_gate};

/// Rate-limit waits when the message gives no time: doubling from this, up to [`MAX_BACKOFF`].
pub(crate) const FIRST_BACKOFF: Duration = Duration::from_secs(5);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Without a wall budget, rate-limit retries of one attempt stop here and the attempt fails.
pub(crate) const MAX_RATE_LIMIT_RETRIES: u32 = 20;
pub use crate::run::failure::{Failure, FailureKind};

/// How an attempt ended.
#[derive(Debug)]
pub(crate) enum AttemptEnd {
    Passed {
        head: Oid,
    },
    Failed(Failure),
    /// The wall budget ran out while the agent waited on a rate limit or ran.
    WallSpent,
    /// The task's or the flow's `usd` or `tokens` budget ran out while the agent ran: mvk
    /// stopped it; its change is kept on the branch, never judged.
    Stopped(Trip),
}

/// What an attempt cost and left behind, whatever its end.
#[derive(Debug)]
pub(crate) struct AttemptRecord {
    pub(crate) ledger_id: i64,
    pub(crate) branch: String,
    pub(crate) head: Option<Oid>,
    pub(crate) usage: Usage,
    pub(crate) end: AttemptEnd,
}

/// The fixed facts of one attempt.
pub(crate) struct AttemptSpec<'a> {
    pub(crate) task: &'a Task,
    pub(crate) number: u32,
    pub(crate) rung: u32,
    pub(crate) agent: &'a Agent,
    pub(crate) base: Oid,
    pub(crate) previous: Option<&'a Failure>,
    /// The task's epoch, recorded with the attempt.
    pub(crate) epoch: u32,
    /// What the budgets have left as it starts, for its prompt and its command line.
    pub(crate) left: crate::run::policy::Left,
    /// The task's own `usd` and `tokens` budgets, which the agent is stopped at.
    pub(crate) caps: TaskCaps,
}

/// Runs one attempt to its end. Errors are mvk's own (the ledger, git, the disk); whatever the
/// agent or a gate did is an [`AttemptEnd`].
pub(crate) async fn run_attempt(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    budgets: &Budgets,
) -> Result<AttemptRecord, RunError> {
    let task = spec.task;
    let branch = branch_name(host.run_id(), &task.name, spec.number);
    let dir = host.attempt_dir(&task.name, spec.number);
    std::fs::create_dir_all(&dir).map_err(|source| RunError::Io {
        action: "create attempt directory",
        path: dir.clone(),
        source,
    })?;
    let acquiring = std::time::Instant::now();
    let mut lease = host.acquire(spec.base, &branch).await?;
    // How long the worktree took, for `benches/flow.sh` and anyone tuning a pool.
    let worktree_ms = u64::try_from(acquiring.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut worktree_path = lease.path.clone();
    let ledger_id = host.ledger_begin_attempt(
        &task.name,
        spec.number,
        spec.rung,
        &spec.agent.label(),
        &branch,
        &worktree_path,
        spec.base,
        spec.epoch,
    )?;
    host.emit(
        Some(&task.name),
        Some(spec.number),
        Event::AttemptStarted {
            rung: spec.rung,
            agent: spec.agent.label(),
            branch: branch.clone(),
            worktree: Some(worktree_path.display().to_string()),
            worktree_ms: Some(worktree_ms),
            base: spec.base.to_string(),
            worker: None,
            from: None,
        },
    )?;
    host.set_phase("agent", Some(&task.name), spec.number)?;

    // The prompt.
    let lessons_file = lessons::prepare(&dir)?;
    let fitted = build_prompt(host, spec, budgets, &worktree_path, Some(&lessons_file))?;
    host.emit(
        Some(&task.name),
        Some(spec.number),
        Event::PromptBuilt {
            tokens: fitted.tokens,
            budget: budgets.context_tokens,
            parts: fitted.shares,
            over: fitted.over,
        },
    )?;
    let prompt_text = fitted.text;
    let prompt_file = dir.join("prompt.md");
    std::fs::write(&prompt_file, &prompt_text).map_err(|source| RunError::Io {
        action: "write the prompt",
        path: prompt_file.clone(),
        source,
    })?;

    // The agent, retried on rate limits.
    // The stop signals the agent's processes send mvk are counted here.
    let window = crate::run::exec::signals::Window::new();
    let matcher = rate_limit_matcher(spec.agent)?;
    let mut usage = Usage::default();
    let mut retries = 0u32;
    let mut escaped = 0usize;
    // Escapees were still appearing when a sweep's time limit passed: the attempt fails.
    let mut survived = false;
    let mut backoff = FIRST_BACKOFF;
    // Why the agent's objects were refused (too large), which fails the attempt.
    let mut refused: Option<String>;
    // The budget mvk stopped the agent for.
    let mut stopped: Option<Trip>;
    let (outcome, started) = loop {
        let Some(limit) = budgets.time_left(host.started(&task.name)) else {
            lessons::collect(host, spec, "maker", &lessons_file)?;
            return finish_wall(host, ledger_id, branch, None, usage, retries).await;
        };
        let timeout = spec.agent.timeout.min(limit);
        let mut ps = agent_process(
            host,
            spec,
            (&worktree_path, &prompt_file, &prompt_text),
            &dir,
            "agent",
            &lessons_file,
        )?;
        ps.timeout = Some(timeout);
        ps.signals = Some(window.clone());
        let started = Instant::now();
        let (outcome, logged, trip) =
            run_agent_metered(host, spec, &mut ps, Spend::of(&usage)).await?;
        stopped = trip;
        // Whatever escaped the agent's process group must not edit the worktree later.
        let swept = crate::run::exec::reaper::kill_adopted(host.run_id(), &task.name);
        escaped += swept.killed;
        survived |= swept.survived;
        refused = absorb_agent_objects(host, &dir).await?;
        if let Some(u) = with_logged(spec.agent, usage_of(spec.agent, &ps.stdout_log)?, logged) {
            usage.absorb(&u);
        }
        host.spent_so_far(&task.name, spec.number, Spend::of(&usage));
        let limited = rate_limited(&matcher, &outcome);
        let Some(limit_hit) =
            limited.filter(|_| refused.is_none() && !survived && stopped.is_none())
        else {
            break (outcome, started);
        };
        retries += 1;
        let wait = limit_hit.retry_after.unwrap_or(backoff);
        backoff = (backoff * 2).min(MAX_BACKOFF);
        let left = budgets.time_left(host.started(&task.name));
        if budgets.wall.is_none() && retries > MAX_RATE_LIMIT_RETRIES {
            break (outcome, started);
        }
        if left.is_some_and(|l| l <= wait) {
            host.emit(
                Some(&task.name),
                Some(spec.number),
                Event::AgentRateLimited {
                    wait_ms: ms(wait),
                    message: limit_hit.message,
                    gave_up: Some(true),
                },
            )?;
            lessons::collect(host, spec, "maker", &lessons_file)?;
            return finish_wall(host, ledger_id, branch, None, usage, retries).await;
        }
        host.emit(
            Some(&task.name),
            Some(spec.number),
            Event::AgentRateLimited {
                wait_ms: ms(wait),
                message: limit_hit.message,
                gave_up: None,
            },
        )?;
        host.set_phase("rate-limited", Some(&task.name), spec.number)?;
        keep_limited_logs(&ps, retries)?;
        tokio::time::sleep(wait).await;
        // The same attempt again, from a clean checkout of the same base; what the limited try
        // left is kept on the branch's history first.
        let (_, kept) = capture(lease, "mvk: work of a rate-limited try".into()).await?;
        kept?;
        lease = host.acquire(spec.base, &branch).await?;
        worktree_path = lease.path.clone();
        host.set_phase("agent", Some(&task.name), spec.number)?;
    };
    let (exit_code, timed_out) = match outcome.termination {
        Termination::Exited(code) => (Some(code), false),
        Termination::Signaled(_) | Termination::Stopped => (None, false),
        Termination::TimedOut => (None, true),
    };
    let duration = started.elapsed();
    // What it learnt outlives the attempt, whatever the attempt's verdict; not when processes it
    // left may still be writing the file.
    if !survived {
        lessons::collect(host, spec, "maker", &lessons_file)?;
    }

    // Whatever the agent left is kept on the attempt's branch (unless its objects were
    // refused: its commits cannot be read then; or a process it left may still be changing
    // the worktree).
    let (lease, captured) = match &refused {
        _ if survived => (lease, None),
        Some(_) => (lease, None),
        None => {
            let message = format!(
                "mvk: attempt {} of task {}\n\nMvk-Run: {}\nMvk-Task: {}\nMvk-Attempt: {}\n",
                spec.number,
                task.name,
                host.run_id(),
                task.name,
                spec.number
            );
            let (lease, captured) = capture(lease, message).await?;
            (lease, Some(captured))
        }
    };
    // The agent committed more than mvk reads, destroyed its own worktree, or pointed its git
    // links elsewhere: its attempt fails; mvk and the pool go on (the next lease rebuilds the
    // slot).
    let wrecked = match (&refused, &captured) {
        _ if survived => Some((
            "the agent leaves no process running once it exits (processes it left were still appearing when mvk's sweep gave up; nothing of the attempt was captured or judged)".to_string(),
            ESCAPEES_SURVIVED,
        )),
        (Some(why), _) => Some((
            format!("the agent commits objects within mvk's limits ({why})"),
            "objects-too-large",
        )),
        (_, Some(Err(_))) if !lease.path.join(".git").exists() => Some((
            "the agent leaves its worktree in place (it deleted it)".to_string(),
            "worktree-deleted",
        )),
        (_, Some(Err(worktree::WorktreeError::MissingObject { file, what, id, .. }))) => Some((
            format!(
                "the agent's work names only objects the repository has (its index names {what} `{id}` at `{file}`, which does not exist)"
            ),
            "objects-missing",
        )),
        (_, Some(Err(worktree::WorktreeError::Relinked { found, .. }))) => Some((
            format!(
                "the agent leaves its worktree's git links alone (they now lead to `{}`)",
                found.display()
            ),
            "worktree-relinked",
        )),
        _ => None,
    };
    let head = match captured {
        Some(Ok(head)) => head,
        Some(Err(e)) if wrecked.is_none() => return Err(e.into()),
        _ => {
            host.ledger_agent_done(
                ledger_id, exit_code, timed_out, duration, None, &usage, retries,
            )?;
            if survived {
                // What mvk could not end may still write the slot: never leased again.
                lease.retire()?;
            } else {
                drop(lease);
            }
            let (criterion, part) = wrecked.unwrap_or_default();
            let f = agent_failure(spec.number, criterion, part, exit_code, &dir);
            return Ok(AttemptRecord {
                ledger_id,
                branch,
                head: None,
                usage,
                end: AttemptEnd::Failed(f),
            });
        }
    };
    crate::run::failpoint("agent-captured");
    // A stopped agent's work is recorded without its head: a resume after a crash from here
    // on finds an attempt that produced nothing to judge, never one to judge and land (its
    // change stays on its branch all the same).
    host.ledger_agent_done(
        ledger_id,
        exit_code,
        timed_out,
        duration,
        stopped.is_none().then_some(head),
        &usage,
        retries,
    )?;
    crate::run::failpoint("agent-recorded");
    host.emit(
        Some(&task.name),
        Some(spec.number),
        Event::AgentFinished {
            exit_code,
            timed_out,
            duration_ms: ms(duration),
            tokens: usage.tokens(),
            usd: usage.usd_micros.map(|u| u as f64 / 1e6),
            rate_limited: retries,
            stragglers_killed: outcome.stragglers_killed,
            escaped_killed: escaped,
        },
    )?;
    if let Some(trip) = stopped {
        host.emit(
            Some(&task.name),
            Some(spec.number),
            Event::AgentStopped {
                budget: trip.budget.name().to_string(),
                spent: trip.spent,
                limit: trip.limit,
            },
        )?;
        return Ok(AttemptRecord {
            ledger_id,
            branch,
            head: Some(head),
            usage,
            end: AttemptEnd::Stopped(trip),
        });
    }
    // An agent that signals mvk attacks the loop that judges it: rejected before the seal.
    // Every signal delivered while the agent ran is decided before its count is read.
    let signalled = host
        .signals_sent(&window, &task.name, spec.number, |signals| {
            Event::AgentSignalledMvk { signals }
        })
        .await?;
    drop(window);
    if signalled > 0 {
        let f = agent_failure(
            spec.number,
            format!(
                "the agent leaves mvk alone, but it sent mvk {signalled} stop signal(s); the attempt was rejected before the seal and the gates"
            ),
            "signalled-mvk",
            exit_code,
            &dir,
        );
        return Ok(AttemptRecord {
            ledger_id,
            branch,
            head: Some(head),
            usage,
            end: AttemptEnd::Failed(f),
        });
    }
    judge(
        host,
        spec,
        budgets,
        Judged {
            ledger_id,
            branch,
            head,
            exit_code,
            timed_out,
            retries,
            usage,
            lease: Some(lease),
        },
    )
    .await
}

/// What an agent spent: what its output reported (`printed`) and what its session log recorded
/// (`logged`, priced), whichever is more, field by field — a Codex stopped mid-turn printed
/// nothing of it; a wrapper may have printed the dollars of a model without a price.
pub(crate) fn with_logged(
    agent: &Agent,
    printed: Option<Usage>,
    logged: Option<Usage>,
) -> Option<Usage> {
    let Some(logged) = logged.map(|l| crate::run::meter::priced(agent.price.as_ref(), l)) else {
        return printed;
    };
    let p = printed.unwrap_or_default();
    let tokens_of = if logged.tokens() > p.tokens() {
        &logged
    } else {
        &p
    };
    Some(Usage {
        input_tokens: tokens_of.input_tokens,
        output_tokens: tokens_of.output_tokens,
        cached_tokens: tokens_of.cached_tokens,
        usd_micros: p.usd_micros.max(logged.usd_micros),
        session: p.session.clone().or(logged.session.clone()),
    })
}

/// Runs `spec.agent`'s process `ps` under a meter of what attempt `spec` may still spend,
/// counted from `earlier` (what it spent before: earlier tries, or the maker before the
/// reviewer): how it ended, what its session log recorded (where it keeps one), and the budget
/// mvk stopped it for.
pub(crate) async fn run_agent_metered(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    ps: &mut process::ProcessSpec,
    earlier: Spend,
) -> Result<(process::ProcessOutcome, Option<Usage>, Option<Trip>), RunError> {
    let agent = spec.agent;
    let (mut meter, seen) = Meter::new(
        agent,
        (&spec.task.name, spec.number),
        earlier,
        spec.caps,
        host.purse(),
    )
    .map_err(|e| RunError::Config {
        message: format!("cannot read agent `{}`'s usage: {e}", agent.name),
    })?;
    meter.follow_session_log(agent, ps);
    let brake = meter.brake();
    let meter = std::sync::Arc::new(std::sync::Mutex::new(meter));
    // Only an agent whose usage is known as it goes is stopped by it: one that reports once, as
    // it exits (goose), would be cut off on its finished work; its budget is held between
    // attempts.
    if agent.streams_usage() {
        ps.stop = Some(brake.stop.clone());
        ps.tap = Some(process::Tap(meter.clone()));
    }
    let outcome = run_metered(host, spec, ps, seen).await?;
    // The meter leaves the run's purse with the process.
    ps.tap = None;
    let logged = meter
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .finish();
    drop(meter);
    let stopped = brake
        .tripped()
        .filter(|_| outcome.termination == Termination::Stopped);
    Ok((outcome, logged, stopped))
}

/// Runs the agent's process `ps`, telling the host what it has spent each time its meter
/// (`seen`) reads more.
pub(crate) async fn run_metered(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    ps: &process::ProcessSpec,
    mut seen: tokio::sync::watch::Receiver<Spend>,
) -> Result<process::ProcessOutcome, RunError> {
    let run = process::run(ps);
    tokio::pin!(run);
    let mut watching = true;
    let ran = loop {
        tokio::select! {
            ran = &mut run => break ran,
            changed = seen.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                let spent = *seen.borrow_and_update();
                // Showing the spending must not end the wait for the agent (which a failed
                // write would, leaving it running unwatched); the next report tries again.
                if let Err(e) = host.spending(&spec.task.name, spec.number, spent) {
                    tracing::warn!(task = %spec.task.name, error = %e, "cannot show what the agent has spent so far");
                }
            }
        }
    };
    ran.map_err(|source| RunError::Agent {
        agent: spec.agent.name.clone(),
        source,
    })
}

/// An attempt whose agent has finished and whose change is captured: what [`judge`] decides on.
#[derive(Debug)]
pub(crate) struct Judged {
    pub(crate) ledger_id: i64,
    pub(crate) branch: String,
    pub(crate) head: Oid,
    pub(crate) exit_code: Option<i32>,
    pub(crate) timed_out: bool,
    pub(crate) retries: u32,
    /// What the agent spent (counted by the caller's budgets).
    pub(crate) usage: Usage,
    /// The agent's worktree, still leased (none on a resume): the gates run in it when it can
    /// be made a clean checkout of HEAD in place.
    pub(crate) lease: Option<Lease>,
}

/// Decides an attempt whose agent has finished: its exit, then the seal, then the gates on a
/// clean checkout of the captured commit. A resume calls it for an attempt whose agent finished
/// before mvk was interrupted, so the agent is never run twice.
pub(crate) async fn judge(
    host: &impl Host,
    spec: &AttemptSpec<'_>,
    budgets: &Budgets,
    j: Judged,
) -> Result<AttemptRecord, RunError> {
    let task = spec.task;
    let Judged {
        ledger_id,
        branch,
        head,
        exit_code,
        timed_out,
        retries,
        usage,
        lease: kept,
    } = j;
    let dir = host.attempt_dir(&task.name, spec.number);
    let record = |end| AttemptRecord {
        ledger_id,
        branch: branch.clone(),
        head: Some(head),
        usage: usage.clone(),
        end,
    };

    if timed_out || exit_code != Some(0) {
        // Killed because the wall budget ran out: a budget stop, not the agent's failure.
        if timed_out && budgets.time_left(host.started(&task.name)).is_none() {
            return Ok(record(AttemptEnd::WallSpent));
        }
        let criterion = if timed_out {
            format!(
                "the agent finishes within {}",
                crate::plan::format_duration(spec.agent.timeout)
            )
        } else if retries > MAX_RATE_LIMIT_RETRIES {
            format!("the agent stays rate-limited after {retries} retries")
        } else {
            match exit_code {
                Some(code) => format!("the agent exits with code 0 (it exited with {code})"),
                None => "the agent exits on its own (it was killed by a signal)".to_string(),
            }
        };
        let sig = exit_code.map_or_else(|| format!("timed-out={timed_out}"), |c| c.to_string());
        let mut f = Failure::new(spec.number, FailureKind::Agent, criterion, &[&sig]);
        f.exit_code = exit_code;
        f.tail = agent_tail(&dir);
        return Ok(record(AttemptEnd::Failed(f)));
    }

    // The seal.
    host.set_phase("seal", Some(&task.name), spec.number)?;
    if let Some(f) = check_seal(host, task, spec, head).await? {
        return Ok(record(AttemptEnd::Failed(f)));
    }

    // The gates, in order; the first that does not pass ends the attempt. They run on a clean
    // checkout of the captured commit: ignored or untracked files the agent left (a conftest.py
    // it excluded from git, a forged build cache) are not what lands, and were not sealed.
    host.set_phase("gates", Some(&task.name), spec.number)?;
    let lease = match kept {
        Some(lease) => match clean_in_place(lease, head).await? {
            (lease, true) => lease,
            (lease, false) => {
                drop(lease);
                host.acquire(head, &branch).await?
            }
        },
        None => host.acquire(head, &branch).await?,
    };
    let worktree_path = lease.path.clone();
    let gate_env = gate_env(
        host.run_id(),
        &task.name,
        spec.number,
        spec.base,
        &worktree_path,
        &task.scope,
    );
    let mut runs = Vec::new();
    // Gates run the agent's code: one that signals mvk rejects the attempt, as an agent would.
    let window = crate::run::exec::signals::Window::new();
    for (i, g) in task.gates.iter().enumerate() {
        let Some(left) = budgets.time_left(host.started(&task.name)) else {
            return Ok(record(AttemptEnd::WallSpent));
        };
        let cx = GateContext {
            cwd: &worktree_path,
            env: &gate_env,
            log: dir.join(format!("gate-{}.log", slug(&g.name))),
            timeout: g.timeout.min(left),
            sandbox: task.sandbox.as_ref(),
            protected: host.protected(),
        };
        let run = gate::run_gate_counted(g, &cx, Some(&window))
            .await
            .map_err(RunError::Gate)?;
        let swept = crate::run::exec::reaper::kill_adopted(host.run_id(), &task.name);
        host.record_gate(ledger_id, &task.name, spec.number, "gate", i, &run)?;
        crate::run::exec::signals::settle().await;
        if let Some(f) = signalled_by_gate(host, spec, &run, window.signals())? {
            return Ok(record(AttemptEnd::Failed(f)));
        }
        if swept.survived {
            // What mvk could not end may still write the slot: never leased again.
            lease.retire()?;
            return Ok(record(AttemptEnd::Failed(escaped_gate(spec.number, &run))));
        }
        if run.timed_out && budgets.time_left(host.started(&task.name)).is_none() {
            return Ok(record(AttemptEnd::WallSpent));
        }
        if run.verdict != GateVerdict::Pass {
            return Ok(record(AttemptEnd::Failed(gate_failure(
                spec.number,
                &run,
                &worktree_path,
            ))));
        }
        runs.push(run);
    }
    drop(lease);
    let Some(review) = &task.review else {
        return Ok(record(AttemptEnd::Passed { head }));
    };
    if budgets.time_left(host.started(&task.name)).is_none() {
        return Ok(record(AttemptEnd::WallSpent));
    }
    // What the maker reported at its end may have spent the budget: no reviewer then.
    let made = Spend::of(&usage);
    if let Some(trip) = spec
        .caps
        .trip(made)
        .or_else(|| host.purse().spent_by(&task.name, spec.number, made))
    {
        return Ok(record(AttemptEnd::Stopped(trip)));
    }
    let reviewed = crate::run::attempt::review::review(
        host,
        spec,
        budgets,
        review,
        (ledger_id, head, &runs),
        Spend::of(&usage),
    )
    .await?;
    let end = match (reviewed.stopped, reviewed.verdict) {
        // Spent while it reviewed: the change is kept on its branch, not landed.
        (Some(trip), _) => AttemptEnd::Stopped(trip),
        (None, Verdict::Approve { .. }) => AttemptEnd::Passed { head },
        (None, Verdict::Reject { blockers, .. }) => {
            AttemptEnd::Failed(review_failure(spec.number, blockers))
        }
        (None, Verdict::Unknown { reason }) => {
            let mut f = Failure::new(
                spec.number,
                FailureKind::Unknown,
                format!("the reviewer answers with a verdict in the contract's form: {reason}"),
                &["review", &reason],
            );
            f.tail = format!("reviewer: {reason}\n");
            AttemptEnd::Failed(f)
        }
    };
    let mut spent = usage.clone();
    spent.absorb(&reviewed.usage);
    Ok(AttemptRecord {
        usage: spent,
        ..record(end)
    })
}

/// The wall budget ran out before the agent produced a result: record what it spent.
async fn finish_wall(
    host: &impl Host,
    ledger_id: i64,
    branch: String,
    head: Option<Oid>,
    usage: Usage,
    retries: u32,
) -> Result<AttemptRecord, RunError> {
    host.ledger_agent_done(
        ledger_id,
        None,
        false,
        Duration::ZERO,
        head,
        &usage,
        retries,
    )?;
    Ok(AttemptRecord {
        ledger_id,
        branch,
        head,
        usage,
        end: AttemptEnd::WallSpent,
    })
}

/// Commits what is in LEASE's worktree (see [`worktree::capture`]) on the blocking pool; the
/// lease comes back for what follows.
async fn capture(
    lease: Lease,
    message: String,
) -> Result<(Lease, Result<Oid, worktree::WorktreeError>), RunError> {
    blocking("commit the worktree", move || {
        let head = worktree::capture(&lease, &message);
        (lease, head)
    })
    .await
}

/// Makes LEASE a clean checkout of HEAD in place (see [`worktree::clean_in_place`]) on the
/// blocking pool; true when it could.
async fn clean_in_place(lease: Lease, head: Oid) -> Result<(Lease, bool), RunError> {
    let (lease, done) = blocking("clean the worktree", move || {
        let done = worktree::clean_in_place(&lease, head);
        (lease, done)
    })
    .await?;
    Ok((lease, done?))
}

/// The seal check of an attempt's change; `Some` failure when it touched the oracle.
pub(crate) async fn check_seal(
    host: &impl Host,
    task: &Task,
    spec: &AttemptSpec<'_>,
    head: Oid,
) -> Result<Option<Failure>, RunError> {
    // mvk's own directory is sealed in every loop: an agent's `.mvk` would land over the ledger.
    let mut patterns = task.seal.clone();
    patterns.push(".mvk".to_string());
    let sealed = Seal::new(&patterns).map_err(RunError::Seal)?;
    let root = host.repo_root().to_path_buf();
    let base = spec.base;
    let verdict = blocking("check the seal", move || {
        let repo = Repository::open(&root).map_err(|source| RunError::Git {
            action: "open the repository".into(),
            source,
        })?;
        seal::check(&repo, base, head, &sealed).map_err(RunError::Seal)
    })
    .await??;
    match verdict {
        SealVerdict::Untouched => {
            host.emit(Some(&task.name), Some(spec.number), Event::SealPassed {})?;
            Ok(None)
        }
        SealVerdict::Breached(breaches) => {
            host.emit(
                Some(&task.name),
                Some(spec.number),
                Event::SealBreached {
                    breaches: breaches.clone(),
                },
            )?;
            let first = breaches
                .first()
                .map_or_else(String::new, ToString::to_string);
            let parts: Vec<String> = breaches
                .iter()
                .map(|b| format!("{}:{:?}", b.path, std::mem::discriminant(&b.kind)))
                .collect();
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            let mut f = Failure::new(
                spec.number,
                FailureKind::Seal,
                format!(
                    "sealed paths stay untouched, but {first}; the attempt was rejected before any gate ran"
                ),
                &parts,
            );
            f.tail = breaches
                .iter()
                .map(|b| format!("{b}\n"))
                .collect::<String>();
            f.breaches = breaches;
            Ok(Some(f))
        }
    }
}

/// A name made safe for a branch and a directory: letters, digits, `-`, `_` and `.` are kept;
/// anything else becomes `-`, and a short hash keeps two names that differ only there apart.
/// The branch attempt `number` of `task` in `run` keeps its change on.
pub(crate) fn branch_name(run: &str, task: &str, number: u32) -> String {
    format!("mvk/{run}/{}/{number}", slug(task))
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Where an attempt's files go: `.mvk/runs/<run>/<task>/<attempt>`.
pub(crate) fn attempt_dir(run_dir: &Path, task: &str, attempt: u32) -> PathBuf {
    run_dir.join(slug(task)).join(attempt.to_string())
}

#[cfg(test)]
mod tests {
    use super::failures::{last_lines, normalize};
    use super::*;

    #[test]
    fn what_the_log_recorded_and_the_dollars_a_wrapper_printed_are_both_kept() {
        let agent = crate::ir::Agent {
            name: "codex".into(),
            argv: vec!["codex".into()],
            env: std::collections::BTreeMap::new(),
            adapter: crate::ir::Adapter::Codex,
            timeout: std::time::Duration::from_secs(60),
            rate_limits: Vec::new(),
            params: std::collections::BTreeMap::new(),
            sandbox: None,
            price: None,
        };
        let printed = Usage {
            usd_micros: Some(500_000),
            session: Some("t".into()),
            ..Usage::default()
        };
        let logged = Usage {
            input_tokens: 900,
            output_tokens: 100,
            cached_tokens: 300,
            ..Usage::default()
        };
        let u = with_logged(&agent, Some(printed.clone()), Some(logged.clone())).unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cached_tokens),
            (900, 100, 300)
        );
        assert_eq!(u.usd_micros, Some(500_000));
        assert_eq!(u.session.as_deref(), Some("t"));
        // The output's own figure stands when it is the larger.
        let more = Usage {
            input_tokens: 2000,
            ..printed
        };
        assert_eq!(
            with_logged(&agent, Some(more), Some(logged))
                .unwrap()
                .input_tokens,
            2000
        );
        assert_eq!(with_logged(&agent, None, None), None);
    }

    #[test]
    fn a_makers_command_line_leaves_out_what_only_a_reviewer_gets() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let kept = |a: &[&str]| {
            let a = argv(a);
            let d = review_only(&a);
            a.into_iter()
                .zip(d)
                .filter(|(_, d)| !d)
                .map(|(a, _)| a)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kept(&[
                "codex",
                "exec",
                "--output-schema={{verdict_schema}}",
                "{{prompt}}"
            ]),
            ["codex", "exec", "{{prompt}}"]
        );
        assert_eq!(
            kept(&[
                "codex",
                "exec",
                "--output-schema",
                "{{verdict_schema}}",
                "{{prompt}}"
            ]),
            ["codex", "exec", "{{prompt}}"]
        );
        assert_eq!(
            kept(&[
                "codex",
                "exec",
                "-c",
                "output_schema={{verdict_schema}}",
                "{{prompt}}"
            ]),
            ["codex", "exec", "{{prompt}}"]
        );
        assert_eq!(
            kept(&[
                "claude",
                "-p",
                "{{prompt}}",
                "--json-schema={{verdict_schema_json}}"
            ]),
            ["claude", "-p", "{{prompt}}"]
        );
        // A value that is not a review-only placeholder keeps its option.
        assert_eq!(
            kept(&["x", "--model", "m", "{{verdict_schema}}"]),
            ["x", "--model", "m"]
        );
    }

    #[test]
    fn last_lines_counts_from_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("", 3), "");
    }

    #[test]
    fn signatures_ignore_timings_and_nonces() {
        let w = Path::new("/tmp/wt");
        let a = normalize(
            "test result: FAILED. 1 passed; finished in 0.03s nonce 0123456789abcdef0123 at /tmp/wt/src",
            w,
        );
        let b = normalize(
            "test result: FAILED. 1 passed; finished in 1.27s nonce fedcba98765432100000 at /tmp/wt/src",
            w,
        );
        assert_eq!(a, b);
        assert_ne!(a, normalize("test result: FAILED. other", w));
    }
}
