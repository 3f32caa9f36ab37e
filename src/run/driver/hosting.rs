//! The runner as an attempt's [`Host`], in: what an attempt asks of its run (a worktree, a
//! ledger row, an event, a gate's record); out: the pool's lease, the ledger written before the
//! trail, the observer told.

use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use git2::Oid;

use super::{Runner, STATE_EVERY, WORKTREE_WAITS, locked, verdict_name};
use crate::ledger::{self, Ledger};
use crate::run::attempt;
use crate::run::error::{RunError, blocking};
use crate::run::event::Event;
use crate::run::host::Host;
use crate::run::judge::gate::GateRun;
use crate::run::meter::{Purse, Spend};
use crate::run::sandbox::Protected;
use crate::run::worktree::{self, Lease};

/// How often, at most, a running agent's spending is written (`agent.spending`, the status
/// files); a threshold it reaches is written at once.
const SPENDING_EVERY: Duration = Duration::from_secs(1);

/// Writes `spent` to `path` whole (a reader never sees half of it); a failure costs only the
/// worker's figure for a retry, and is logged.
fn keep_spending(path: &Path, spent: Spend) {
    let text =
        serde_json::json!({"tokens": spent.tokens, "usd_micros": spent.usd_micros}).to_string();
    let partial = path.with_extension("partial");
    if let Err(e) = std::fs::write(&partial, text).and_then(|()| std::fs::rename(&partial, path)) {
        tracing::warn!(path = %path.display(), error = %e, "cannot keep what the attempt has spent");
    }
}

impl Host for Runner<'_> {
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn purse(&self) -> std::sync::Arc<Purse> {
        self.purse.clone()
    }

    fn spent_so_far(&self, _task: &str, _attempt: u32, spent: Spend) {
        if let Some(path) = &self.spending_out {
            keep_spending(path, spent);
        }
    }

    /// Shows what a running attempt has spent: in the status files at once (the task's figures
    /// then count it), as `agent.spending` at most every [`SPENDING_EVERY`], and in the
    /// thresholds it reaches (`budget.threshold`).
    fn spending(&self, task: &str, attempt: u32, spent: Spend) -> Result<(), RunError> {
        let key = (task.to_string(), attempt);
        let (before, write) = {
            let mut written = locked(&self.spending_written);
            let entry = written.entry(key).or_insert_with(|| {
                let before = self
                    .state()
                    .tasks
                    .iter()
                    .find(|t| t.name == task)
                    .map(|t| Spend {
                        tokens: t.spent.tokens,
                        usd_micros: t.spent.usd_micros,
                    })
                    .unwrap_or_default();
                (None, before)
            });
            let write = entry
                .0
                .is_none_or(|at: Instant| at.elapsed() >= SPENDING_EVERY);
            if write {
                entry.0 = Some(Instant::now());
            }
            (entry.1, write)
        };
        let total = before.plus(spent);
        if let Some(path) = &self.spending_out {
            keep_spending(path, spent);
        }
        self.task_state(task, |s| {
            s.spent.tokens = total.tokens;
            s.spent.usd_micros = total.usd_micros;
        });
        if let Some(t) = self.program.tasks.iter().find(|t| t.name == task)
            && self.watches_budgets(t)
        {
            let flow = self.purse.total();
            let wall_ms = attempt::ms(self.started(task).elapsed());
            let tally = |s: Spend, wall_ms| crate::run::policy::Tally {
                tokens: s.tokens,
                usd_micros: s.usd_micros,
                wall_ms,
            };
            let run_wall = attempt::ms(self.run_started().elapsed());
            self.budget_thresholds(t, &tally(total, wall_ms), Some(&tally(flow, run_wall)))?;
        }
        if write {
            self.emit(
                Some(task),
                Some(attempt),
                Event::AgentSpending {
                    tokens: spent.tokens,
                    usd_micros: spent.usd_micros,
                },
            )?;
            self.write_state()?;
        }
        Ok(())
    }

    /// Where no sandbox grant may lead (see [`Protected`]).
    fn protected(&self) -> &[Protected] {
        &self.protected
    }

    /// The ledger, for one statement's use (see the note on [`Runner`]'s fields).
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        locked(&self.ledger)
    }

    fn repo_root(&self) -> &Path {
        &self.opts.repo_root
    }

    /// When `task` started: its wall budget counts from here.
    fn started(&self, task: &str) -> Instant {
        locked(&self.task_started)
            .get(task)
            .copied()
            .unwrap_or_else(Instant::now)
    }

    fn attempt_dir(&self, task: &str, attempt: u32) -> PathBuf {
        attempt::attempt_dir(self.trail.run_dir(), task, attempt)
    }

    /// The worktree pool's root directory (outside the repository).
    fn pool_root(&self) -> &Path {
        self.pool.root()
    }

    /// A lease on a clean checkout of `base` on `branch`. A worktree error that may pass (a
    /// neighbour's lease holding the branch, a slot's lock held by another process, the disk)
    /// is tried again after each of [`WORKTREE_WAITS`], each wait an event: a moment's trouble
    /// of the pool must not end the run; one that outlasts them is mvk's own error.
    async fn acquire(&self, base: Oid, branch: &str) -> Result<Lease, RunError> {
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
                Event::WorktreeRetry {
                    branch: branch.to_string(),
                    error: crate::run::error_chain(&e),
                    wait_ms: attempt::ms(*wait),
                },
            )?;
            tokio::time::sleep(*wait).await;
        }
    }

    /// Writes an event to the ledger and the trail (in that order), then shows it.
    fn emit(&self, task: Option<&str>, attempt: Option<u32>, event: Event) -> Result<(), RunError> {
        let (event, detail) =
            event
                .into_parts()
                .map_err(|source| crate::run::trail::TrailError::Json {
                    what: "an event",
                    source,
                })?;
        let (_, time_ms) = crate::clock::now();
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

    fn set_phase(&self, phase: &str, task: Option<&str>, attempt: u32) -> Result<(), RunError> {
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
        // An agent starting is what a person looks for (and what a run killed a moment later
        // must show): written at once, where other phase changes are coalesced.
        if recent
            && phase != "agent"
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

    fn ledger_begin_attempt(
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

    fn ledger_agent_done(
        &self,
        id: i64,
        exit_code: Option<i32>,
        timed_out: bool,
        duration: Duration,
        head: Option<Oid>,
        usage: &crate::run::judge::adapter::Usage,
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

    fn record_gate(
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
            Event::GateFinished {
                gate: run.gate.clone(),
                phase: phase.to_string(),
                verdict: verdict.to_string(),
                exit_code: run.exit_code,
                counts: run.counts(),
                reason: run.reason.clone(),
                log,
            },
        )
    }
}
