//! One attempt's judged result as it crosses a process boundary: what `mvk attempt --json`
//! prints, what the MCP server's `run_attempt` tool returns, and what a Temporal worker sends its
//! coordinator. Plain data (serde, a JSON schema); `cli::attempt` fills it from a run's ledger.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How one attempt ended.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct AttemptResult {
    /// `mvk.attempt.v1`.
    pub(crate) schema: String,
    /// The run the attempt is recorded as (`mvk status RUN`, `mvk log RUN`).
    pub(crate) run: String,
    pub(crate) task: String,
    pub(crate) attempt: u32,
    /// `passed` (seal, gates with evidence and review), `failed`, or `unknown` (a gate gave no
    /// evidence that tests ran: never a pass).
    pub(crate) verdict: String,
    /// How the run ended: `skipped` (passed, not landed), `rejected`, `unknown` or `budget`.
    pub(crate) outcome: String,
    pub(crate) exit_code: u8,
    /// The commit the attempt started from.
    pub(crate) base: String,
    /// The commit holding the attempt's change, on `branch`.
    pub(crate) head: Option<String>,
    pub(crate) branch: String,
    /// The tests the gates' evidence counted, summed over the attempt's gates.
    pub(crate) counts: Counts,
    pub(crate) gates: Vec<GateResult>,
    /// What failed; `None` when the attempt passed.
    pub(crate) failure: Option<FailureResult>,
    /// What the attempt's agent (and reviewer) spent, as their output said.
    #[serde(default)]
    pub(crate) usage: UsageResult,
    /// The run's events in the ledger, in order.
    pub(crate) events: Vec<EventRef>,
}

/// Tokens and dollars an attempt spent.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
pub struct UsageResult {
    /// Every input token, cache writes and reads included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// US dollars in millionths; `None` when the agent reported no cost.
    pub usd_micros: Option<u64>,
}

impl From<&crate::run::judge::adapter::Usage> for UsageResult {
    fn from(u: &crate::run::judge::adapter::Usage) -> Self {
        UsageResult {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            usd_micros: u.usd_micros,
        }
    }
}

impl From<UsageResult> for crate::run::judge::adapter::Usage {
    fn from(u: UsageResult) -> Self {
        crate::run::judge::adapter::Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cached_tokens: 0,
            usd_micros: u.usd_micros,
            session: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
pub struct Counts {
    pub executed: u64,
    pub passed: u64,
    pub failed: u64,
    pub skipped: u64,
}

/// One gate's run in the attempt.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GateResult {
    pub name: String,
    /// `pass`, `fail` or `unknown`.
    pub verdict: String,
    pub exit_code: Option<i32>,
    pub counts: Option<Counts>,
    /// Where the evidence came from (the nonce line, a runner's summary, or none).
    pub evidence: String,
    pub reason: String,
}

/// The attempt's failure, as the next attempt's prompt would be told it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct FailureResult {
    /// `agent`, `seal`, `gate`, `unknown` or `review`.
    pub(crate) kind: String,
    /// The criterion the attempt missed.
    pub(crate) criterion: String,
    /// Two failures with the same signature are the same failure (the same-failure brake).
    pub(crate) signature: String,
    pub(crate) gate: Option<String>,
    pub(crate) exit_code: Option<i32>,
    /// The sealed paths the change touched (a `seal` failure).
    pub(crate) breaches: Vec<crate::run::git::seal::Breach>,
    /// The reviewer's blockers (a `review` failure), one line each.
    pub(crate) blockers: Vec<String>,
    /// The end of the failing step's output.
    pub(crate) tail: String,
}

/// One event of the run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct EventRef {
    /// The event's id in the ledger's `events` table.
    pub(crate) id: i64,
    pub(crate) event: String,
    pub(crate) attempt: Option<u32>,
}
