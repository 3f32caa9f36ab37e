//! The interpreter: a compiled [`Program`](crate::ir::Program) and a repository in, a run carried
//! to an end out. Its rooms:
//! - [`driver`] opens a run (or resumes one) and drives its tasks; each task is a loop around
//!   the attempt [`policy`] (the one place that decides to attempt, climb, stop or brake), over
//!   [`schedule`] (which task starts when) and [`executor`] (here, or on Temporal workers,
//!   [`temporal`]);
//! - [`attempt`] makes one attempt through a narrow [`host`]: a [`worktree`] from the pool, the
//!   agent, the capture, the seal, the gates and evidence ([`judge`]), the review;
//! - [`meter`] holds the `usd` and `tokens` budgets while an agent runs: its usage read as it
//!   prints it, its process stopped when the task's or the flow's budget is spent;
//! - [`exec`] runs processes and ends what they leave behind; [`sandbox`] confines them;
//! - [`git`] lands accepted work and decides what a change touched (the seal, `mvk verify`);
//!   one run of a program at a time is [`crate::run_lock`]'s, outside `run` so that the ledger
//!   reads it too;
//! - [`notify`] tells people what they asked to hear of (a checkpoint waiting, the run's end, a
//!   budget nearly spent, a stop), by a command or a webhook, never failing the run;
//! - [`trail`] writes the events, the heartbeat and the status files; [`error`], [`failure`],
//!   [`outcome`] and [`attempt_result`] are what the rooms pass each other.

pub mod attempt;
pub mod attempt_result;
pub(crate) mod driver;
pub(crate) mod error;
pub(crate) mod event;
pub(crate) mod exec;
pub(crate) mod executor;
pub(crate) mod failure;
pub(crate) mod git;
pub(crate) mod host;
pub mod judge;
pub(crate) mod meter;
pub(crate) mod notify;
pub(crate) mod outcome;
pub(crate) mod policy;
pub(crate) mod sandbox;
pub(crate) mod schedule;
#[cfg(feature = "temporal")]
pub mod temporal;
pub(crate) mod trail;
pub(crate) mod worktree;

#[cfg(test)]
mod testing;

/// Dies here, at once and without cleaning up, when [`crate::env::MVK_FAILPOINT`] names `point`:
/// crash tests use it to stop mvk between a ledger write and the effect it records, where no
/// outside signal can be timed. Costs one environment lookup otherwise.
pub(crate) fn failpoint(point: &str) {
    if std::env::var_os(crate::env::MVK_FAILPOINT).is_some_and(|v| v == point) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// Whether [`crate::env::MVK_FAILPOINT`] names `point`, where crash tests make mvk fail with an
/// error of its own (as a full disk or a broken git would) at a moment no outside cause can be
/// timed for.
pub(crate) fn failing(point: &str) -> bool {
    std::env::var_os(crate::env::MVK_FAILPOINT).is_some_and(|v| v == point)
}

/// An error and every source under it, on one line (`a: b: c`): what the CLI prints for mvk's
/// own failures, and what a Temporal activity reports for one of its steps.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    message
}
