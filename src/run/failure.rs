//! Why an attempt failed, in: the criterion it missed (the agent, the seal, a gate, the evidence,
//! the landing, the reviewer or a person) and what showed it; out: the [`Failure`] the next
//! attempt's prompt quotes, the reports show, and whose signature the same-failure brake compares.

use serde::{Deserialize, Serialize};

use crate::prompt;
use crate::run::git::seal::Breach;

/// What kind of criterion an attempt missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    Agent,
    Seal,
    Gate,
    Unknown,
    Merge,
    /// The reviewer rejected the change.
    Review,
    /// A person rejected the attempt at a checkpoint, with a reason.
    Human,
}

impl FailureKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            FailureKind::Agent => "agent",
            FailureKind::Seal => "seal",
            FailureKind::Gate => "gate",
            FailureKind::Unknown => "unknown",
            FailureKind::Merge => "merge",
            FailureKind::Review => "review",
            FailureKind::Human => "human",
        }
    }
}

/// The exact failure of one attempt, as the next attempt's prompt and the reports show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub attempt: u32,
    pub kind: FailureKind,
    pub gate: Option<String>,
    pub exit_code: Option<i32>,
    pub counts: Option<crate::run::judge::evidence::Counts>,
    pub tail: String,
    pub criterion: String,
    pub breaches: Vec<Breach>,
    /// A reviewer's blockers, when it rejected the change.
    #[serde(default)]
    pub blockers: Vec<prompt::Blocker>,
    /// Two failures with the same signature are the same failure (the stuck brake).
    pub signature: String,
}

impl Failure {
    pub(crate) fn to_prompt(&self) -> prompt::Failure {
        prompt::Failure {
            attempt: self.attempt,
            kind: self.kind.name().to_string(),
            gate: self.gate.clone(),
            exit_code: self.exit_code,
            counts: self.counts.map(|c| prompt::Counts {
                executed: c.executed,
                passed: c.passed,
                failed: c.failed,
                skipped: c.skipped,
            }),
            output_tail: self.tail.clone(),
            criterion: self.criterion.clone(),
            blockers: self.blockers.clone(),
        }
    }

    pub(crate) fn new(
        attempt: u32,
        kind: FailureKind,
        criterion: String,
        signature_parts: &[&str],
    ) -> Failure {
        let mut hasher = blake3::Hasher::new();
        hasher.update(kind.name().as_bytes());
        for part in signature_parts {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        Failure {
            attempt,
            kind,
            gate: None,
            exit_code: None,
            counts: None,
            tail: String::new(),
            criterion,
            breaches: Vec::new(),
            blockers: Vec::new(),
            signature: hasher.finalize().to_hex()[..16].to_string(),
        }
    }
}
