//! How a task or a run ended, in: what the policy or a landing decided; out: the contract's
//! outcome names and exit codes, and the reports `apply` prints (text or JSON).

use std::path::PathBuf;

use serde::Serialize;

/// How a task, or a whole run, ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Outcome {
    Accepted,
    Rejected,
    Stuck,
    Unknown,
    Budget,
    Human,
    Skipped,
    /// Paused at a checkpoint: the run waits for `mvk approve` or `mvk reject`.
    Waiting,
}

impl Outcome {
    /// The outcome a ledger row names (`error` and `drift` are run outcomes only).
    pub(crate) fn from_name(name: &str) -> Option<Outcome> {
        Some(match name {
            "accepted" => Outcome::Accepted,
            "rejected" => Outcome::Rejected,
            "stuck" => Outcome::Stuck,
            "unknown" => Outcome::Unknown,
            "budget" => Outcome::Budget,
            "human" => Outcome::Human,
            "skipped" => Outcome::Skipped,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Rejected => "rejected",
            Outcome::Stuck => "stuck",
            Outcome::Unknown => "unknown",
            Outcome::Budget => "budget",
            Outcome::Human => "human",
            Outcome::Skipped => "skipped",
            Outcome::Waiting => "waiting",
        }
    }

    /// The contract's exit code for `apply`.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Outcome::Accepted | Outcome::Skipped => 0,
            Outcome::Rejected => 1,
            Outcome::Stuck | Outcome::Unknown => 2,
            Outcome::Budget => 3,
            Outcome::Human | Outcome::Waiting => 4,
        }
    }

    /// Rank in the contract's order for a flow's code: 1 > 2 > 3 > 4 > 0.
    pub(crate) fn severity(self) -> u8 {
        match self {
            Outcome::Rejected => 5,
            Outcome::Stuck | Outcome::Unknown => 4,
            Outcome::Budget => 3,
            Outcome::Human | Outcome::Waiting => 2,
            Outcome::Accepted | Outcome::Skipped => 0,
        }
    }
}

/// What one task did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskReport {
    pub(crate) name: String,
    pub(crate) outcome: Outcome,
    pub(crate) attempts: u32,
    pub(crate) merged: Option<String>,
    pub(crate) branch: Option<String>,
    pub(crate) usd: f64,
    pub(crate) tokens: u64,
    /// One line: why it ended so.
    pub(crate) reason: String,
}

/// What a run did.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunReport {
    pub(crate) schema: &'static str,
    pub(crate) run: String,
    pub(crate) outcome: Outcome,
    pub(crate) exit_code: u8,
    pub(crate) tasks: Vec<TaskReport>,
    pub(crate) handoff: Option<PathBuf>,
}
