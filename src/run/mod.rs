//! The interpreter: a compiled [`Program`](crate::ir::Program) and a repository in, a run carried
//! to an end out. [`driver`] drives tasks through budgets and the ladder and lands accepted work
//! ([`land`]); [`attempt`] makes one attempt; its parts are usable on their own: [`process`]
//! runs an agent or a gate in its own process group with bounded memory; [`worktree`] keeps a
//! pool of reusable git worktrees and captures an attempt's change as a commit; [`seal`] decides
//! whether a change touched the oracle; [`gate`] runs a gate and [`evidence`] reads its output
//! for proof that tests ran; [`review`] runs the independent reviewer and reads its verdict;
//! [`adapter`] reads an agent's cost and rate limits; [`verify`] is the oracle check on its
//! own (`mvk verify`); [`executor`] says where attempts are made (here, or on Temporal
//! workers); [`trail`]
//! writes the events, the heartbeat and the status files; [`untrusted`] reads what an agent could
//! have written without following, blocking on or swallowing it.

pub mod adapter;
pub mod agent_pack;
pub(crate) mod ansi;
pub mod attempt;
pub mod attempt_result;
pub mod driver;
pub mod error;
pub mod evidence;
pub mod executor;
pub mod failure;
pub mod gate;
pub mod land;
pub mod lock;
pub mod outcome;
pub mod policy;
pub mod process;
pub mod reaper;
pub mod resume;
pub mod review;
pub mod sandbox;
pub mod schedule;
pub mod seal;
pub mod signals;
#[cfg(feature = "temporal")]
pub mod temporal;
pub mod trail;
pub mod untrusted;
pub mod verify;
pub mod worktree;

#[cfg(test)]
mod testing;

/// Dies here, at once and without cleaning up, when [`crate::env::MVK_FAILPOINT`] names `point`:
/// crash tests use it to stop mvk between a ledger write and the effect it records, where no
/// outside signal can be timed. Costs one environment lookup otherwise.
pub fn failpoint(point: &str) {
    if std::env::var_os(crate::env::MVK_FAILPOINT).is_some_and(|v| v == point) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
}

/// Whether [`crate::env::MVK_FAILPOINT`] names `point`, where crash tests make mvk fail with an
/// error of its own (as a full disk or a broken git would) at a moment no outside cause can be
/// timed for.
pub fn failing(point: &str) -> bool {
    std::env::var_os(crate::env::MVK_FAILPOINT).is_some_and(|v| v == point)
}

/// An error and every source under it, on one line (`a: b: c`): what the CLI prints for mvk's
/// own failures, and what a Temporal activity reports for one of its steps.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    message
}
