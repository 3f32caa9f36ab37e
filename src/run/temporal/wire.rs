//! What goes between the workflow, the coordinator and the workers, in and out: the JSON payloads
//! of the activities (kept small; their shape is the wire format a running workflow replays).

use serde::{Deserialize, Serialize};

use crate::run::attempt::Failure;
use crate::run::attempt_result::GateResult;
use crate::run::policy::RungKind;

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
    /// What the task, and the whole flow, spent before this attempt: the worker's meter holds
    /// the attempt to what is left (zero from a workflow started by an older mvk).
    #[serde(default)]
    pub spent: SpentIn,
    #[serde(default)]
    pub flow_spent: SpentIn,
}

/// Tokens and micro-dollars spent.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpentIn {
    pub tokens: u64,
    pub usd_micros: u64,
}

impl SpentIn {
    pub fn plus(self, other: SpentIn) -> SpentIn {
        SpentIn {
            tokens: self.tokens.saturating_add(other.tokens),
            usd_micros: self.usd_micros.saturating_add(other.usd_micros),
        }
    }

    /// The larger of each figure.
    pub fn max_each(self, other: SpentIn) -> SpentIn {
        SpentIn {
            tokens: self.tokens.max(other.tokens),
            usd_micros: self.usd_micros.max(other.usd_micros),
        }
    }
}

/// A worker's heartbeat while it makes attempt `number`: what the tries of this activity have
/// spent so far, lost ones included. A retry (the worker died, or its heartbeat stopped) reads
/// the last one, so that what a lost try spent still counts against the budget.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Beat {
    pub(super) number: u32,
    #[serde(default)]
    pub(super) spent: SpentIn,
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
pub(crate) struct RecordIn {
    pub(crate) task: String,
    pub(crate) number: u32,
    pub(crate) rung: u32,
    pub(crate) base: String,
    pub(crate) out: AttemptOut,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct LandIn {
    pub(crate) task: String,
    pub(crate) number: u32,
    pub(crate) rung: u32,
    pub(crate) base: String,
    pub(crate) attempt_id: i64,
    pub(crate) head: String,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) enum LandOut {
    Landed { commit: Option<String> },
    Retry { failure: Failure, base: String },
    Ended { outcome: String, reason: String },
}

/// How a task ends, as the workflow knows it; the coordinator words the reason.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) enum EndIn {
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
    pub(super) fn task(&self) -> &str {
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

/// Task `task` climbed its ladder to the 0-based rung `to`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub(crate) struct ClimbIn {
    pub(crate) task: String,
    pub(crate) to: usize,
}
