//! What an attempt needs of the run that makes it, and all it sees of it: the run's identity
//! and places, a worktree from its pool, and its records (ledger rows, events, the phase) in
//! one trait, [`Host`]; and the limits that apply to the attempt ([`Budgets`]). The local
//! driver's `Runner` is the host; an attempt and its review never reach past this.

use std::path::{Path, PathBuf};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use git2::Oid;

use crate::ledger::Ledger;
use crate::run::error::RunError;
use crate::run::event::Event;
use crate::run::judge::adapter::Usage;
use crate::run::judge::gate::GateRun;
use crate::run::sandbox::Protected;
use crate::run::worktree::Lease;

/// The run an attempt is made in.
pub(crate) trait Host: Sync {
    fn run_id(&self) -> &str;
    fn repo_root(&self) -> &Path;
    /// Where the run's worktrees are kept.
    fn pool_root(&self) -> &Path;
    /// The paths no agent may reach (the ledger, the run's files, the worktree pool's admin).
    fn protected(&self) -> &[Protected];
    /// Where attempt `attempt` of `task` keeps its prompt, logs and outputs.
    fn attempt_dir(&self, task: &str, attempt: u32) -> PathBuf;
    /// When `task` started (its wall budget counts from there).
    fn started(&self, task: &str) -> Instant;
    /// The run's ledger, locked for one write or read.
    fn ledger(&self) -> MutexGuard<'_, Ledger>;
    /// A clean worktree at `base` on a new branch `branch`.
    fn acquire(
        &self,
        base: Oid,
        branch: &str,
    ) -> impl Future<Output = Result<Lease, RunError>> + Send;
    /// Records `event` (with `detail`) in the ledger and the trail, and shows it.
    fn emit(&self, task: Option<&str>, attempt: Option<u32>, event: Event) -> Result<(), RunError>;
    /// Says in the status files what the run is doing now.
    fn set_phase(&self, phase: &str, task: Option<&str>, attempt: u32) -> Result<(), RunError>;
    /// Records an attempt's start, before its agent runs; its ledger id.
    #[expect(clippy::too_many_arguments, reason = "one ledger row's columns")]
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
    ) -> Result<i64, RunError>;
    /// Records how attempt `id`'s agent ended and what it spent.
    #[expect(clippy::too_many_arguments, reason = "one ledger row's columns")]
    fn ledger_agent_done(
        &self,
        id: i64,
        exit_code: Option<i32>,
        timed_out: bool,
        duration: Duration,
        head: Option<Oid>,
        usage: &Usage,
        retries: u32,
    ) -> Result<(), RunError>;
    /// Records a gate's run (its verdict and evidence) on attempt `attempt_id`.
    fn record_gate(
        &self,
        attempt_id: i64,
        task: &str,
        attempt: u32,
        phase: &str,
        ordinal: usize,
        run: &GateRun,
    ) -> Result<(), RunError>;

    /// The run's live spending, which holds the flow's `usd` and `tokens` while agents run.
    fn purse(&self) -> std::sync::Arc<crate::run::meter::Purse>;
    /// What attempt `attempt` of `task` has spent in all so far, once an agent of it (maker
    /// or reviewer) has ended: kept where a Temporal worker reads it (`--spending-out`).
    fn spent_so_far(&self, _task: &str, _attempt: u32, _spent: crate::run::meter::Spend) {}

    /// What attempt `attempt` of `task` has spent so far, while its agent runs.
    fn spending(
        &self,
        task: &str,
        attempt: u32,
        spent: crate::run::meter::Spend,
    ) -> Result<(), RunError>;

    /// How many stop signals the processes counted in `window` sent mvk, once every signal
    /// delivered so far is decided; recorded as the event `event` makes of that count, when there
    /// were any.
    fn signals_sent(
        &self,
        window: &crate::run::exec::signals::Window,
        task: &str,
        attempt: u32,
        event: impl FnOnce(u64) -> Event + Send,
    ) -> impl Future<Output = Result<u64, RunError>> + Send {
        async move {
            crate::run::exec::signals::settle().await;
            let signals = window.signals();
            if signals > 0 {
                self.emit(Some(task), Some(attempt), event(signals))?;
            }
            Ok(signals)
        }
    }
}

/// The limits that apply to an attempt: the task's budget and, in a flow, the flow's.
#[derive(Debug, Clone)]
pub(crate) struct Budgets {
    pub(crate) wall: Option<Duration>,
    pub(crate) context_tokens: u32,
    /// When the flow's wall budget runs out, if it has one: attempts in flight stop there too.
    pub(crate) deadline: Option<Instant>,
}

impl Budgets {
    /// Time left before the wall budget runs out from `started` (or the flow's, if sooner);
    /// `None` when it has run out.
    pub(crate) fn time_left(&self, started: Instant) -> Option<Duration> {
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
