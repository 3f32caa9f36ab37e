//! The resolved model every later stage reads: a [`Program`] of [`Task`]s with no names left to
//! look up, every default written in, and each task's digest and per-field components.
//!
//! Types here derive `Serialize`; the digest is computed over that serialization (spans, docs and
//! other non-semantic data are skipped), so adding a field to a type changes what is hashed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::source::{Sources, Span};

/// Names mvk itself provides to templates and commands; a `param` may not take them.
pub(crate) const RESERVED_PARAMS: &[&str] = &[
    "item",
    "prompt",
    "prompt_file",
    "worktree",
    "attempt",
    "rung",
    "task",
    "run",
    "verdict_schema",
    "verdict_schema_json",
    "usd_left",
    "tokens_left",
    "wall_left",
    "attempts_left",
];

/// What is left of the budgets as an attempt starts, as placeholders of an agent's command: an
/// argument holding one whose budget is unlimited is left out, with the option it is the value
/// of.
pub(crate) const BUDGET_PLACEHOLDERS: &[&str] =
    &["usd_left", "tokens_left", "wall_left", "attempts_left"];

/// Placeholders in an agent command that are filled in when the attempt starts.
pub(crate) const RUNTIME_PLACEHOLDERS: &[&str] = &[
    "prompt",
    "prompt_file",
    "worktree",
    "attempt",
    "rung",
    "task",
    "run",
    "verdict_schema",
    "verdict_schema_json",
    "usd_left",
    "tokens_left",
    "wall_left",
    "attempts_left",
];

pub(crate) const DEFAULT_ITERATIONS: u32 = 5;
pub(crate) const DEFAULT_SAME_FAILURE: u32 = 2;
pub(crate) const DEFAULT_CONTEXT_TOKENS: u32 = 16_000;
pub(crate) const DEFAULT_REVIEW_ROUNDS: u32 = 2;
pub(crate) const DEFAULT_GATE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
pub(crate) const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
pub(crate) const DEFAULT_PARALLEL: u32 = 1;
/// The branch a merge lands on when the loop does not say: the one checked out when the run starts.
pub(crate) const CURRENT_BRANCH: &str = "HEAD";

/// What a compilation produced: one loop (a single task) or a flow of tasks.
#[derive(Debug, Clone)]
pub struct Program {
    pub kind: ProgramKind,
    pub name: String,
    /// Tasks in declaration order (fan-outs expanded in item order).
    pub tasks: Vec<Task>,
    pub flow: Option<FlowSettings>,
    /// The digest of the whole program: its settings and every task's digest.
    pub digest: Digest,
    pub sources: Sources,
    /// The entry file's span of the `loop` or `flow` node.
    pub span: Span,
    /// The notifications of the whole run: the entry file's top-level `notify` nodes, then the
    /// loop's or the flow's (one of the same name replaces the other). Not part of the digest:
    /// who hears of a run does not change what it does (see `digest`).
    pub notify: Vec<Arc<Notify>>,
}

impl Program {
    pub fn task(&self, name: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.name == name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgramKind {
    Loop,
    Flow,
    /// A file of definitions only (a gate library): checked, never run.
    Library,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FlowSettings {
    pub parallel: u32,
    pub continue_on_failure: bool,
    pub budget: FlowBudget,
}

/// Limits shared by all tasks of a flow.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct FlowBudget {
    pub tokens: Option<u64>,
    pub usd_micros: Option<u64>,
    #[serde(with = "opt_millis")]
    pub wall: Option<Duration>,
    /// As a task's [`Budget::warn_at`], for the flow's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_at: Option<u32>,
}

/// One unit of work: a loop, standing alone or as a flow's task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Task {
    pub name: String,
    /// The fan-out item this task was expanded for.
    pub item: Option<String>,
    /// Names of the tasks this one starts after.
    pub after: Vec<String>,
    pub goal: String,
    pub prompt: Template,
    pub scope: Vec<String>,
    pub seal: Vec<String>,
    pub gates: Vec<Gate>,
    pub review: Option<Review>,
    pub budget: Budget,
    pub ladder: Vec<Rung>,
    pub merge: Merge,
    pub uncertified: bool,
    /// Left out of the encoding when absent, so loops without one keep their digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// The file of lessons a person pinned (repository-relative), shown in every prompt; the
    /// file is sealed. Left out of the encoding when absent, as `sandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lessons: Option<String>,
    /// A flow's task's own notifications (its `loop=` file's and its block's), which hear of
    /// this task only. Never encoded, so never part of the digest: who hears of a task does not
    /// change what it does.
    #[serde(skip)]
    pub notify: Vec<Arc<Notify>>,
    #[serde(skip)]
    pub meta: TaskMeta,
}

impl Task {
    /// Every agent the task may run: its rungs' (the makers), then its reviewer's, marked `true`.
    pub(crate) fn agents(&self) -> impl Iterator<Item = (&Agent, bool)> + '_ {
        let makers = self.ladder.iter().filter_map(|r| match r {
            Rung::Agent { agent, .. } => Some((agent, false)),
            Rung::Human => None,
        });
        makers.chain(self.review.iter().map(|r| (&r.agent, true)))
    }
}

/// What the digest leaves out: where things were written, and the digests themselves.
#[derive(Debug, Clone, Default)]
pub struct TaskMeta {
    pub span: Option<Span>,
    /// Where each digest field was written, when it was written rather than defaulted.
    pub field_spans: BTreeMap<String, Span>,
    pub digest: Digest,
    /// One component digest per field (see [`crate::digest::task_fields`]).
    pub fields: BTreeMap<String, Digest>,
}

/// A prompt template: where it came from (for messages) and its text (what is hashed).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Template {
    #[serde(skip)]
    pub name: String,
    /// Shared: the thousands of tasks of a fan-out hold one template's text, not a copy each.
    pub text: Arc<str>,
}

/// A deterministic check, fully resolved: the argv to run and how to judge it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Gate {
    pub name: String,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub evidence: EvidenceMode,
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// The definition it was made from (`std.cargo-test`), for display; the argv is what counts.
    #[serde(skip)]
    pub from: Option<String>,
    #[serde(skip)]
    pub doc: Option<String>,
}

/// How a gate proves that tests ran (see the contract's "Evidence that checks ran").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EvidenceMode {
    Auto,
    None,
    Nonce,
    CargoTest,
    Nextest,
    Pytest,
    GoTest,
    NodeTest,
    Vitest,
    Jest,
}

impl EvidenceMode {
    pub const NAMES: [&'static str; 10] = [
        "auto",
        "none",
        "nonce",
        "cargo-test",
        "nextest",
        "pytest",
        "go-test",
        "node-test",
        "vitest",
        "jest",
    ];
    const ALL: [EvidenceMode; 10] = [
        EvidenceMode::Auto,
        EvidenceMode::None,
        EvidenceMode::Nonce,
        EvidenceMode::CargoTest,
        EvidenceMode::Nextest,
        EvidenceMode::Pytest,
        EvidenceMode::GoTest,
        EvidenceMode::NodeTest,
        EvidenceMode::Vitest,
        EvidenceMode::Jest,
    ];

    pub fn parse(s: &str) -> Option<EvidenceMode> {
        Self::NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| Self::ALL[i])
    }

    pub(crate) fn name(self) -> &'static str {
        let i = Self::ALL.iter().position(|m| *m == self).unwrap_or(0);
        Self::NAMES[i]
    }
}

/// How mvk reads an agent's output: tokens, cost, and its rate-limit messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Adapter {
    /// Any command: nothing is read from its output.
    Command,
    Claude,
    Codex,
    Aider,
    Goose,
    Gemini,
}

impl Adapter {
    pub const NAMES: [&'static str; 6] = ["command", "claude", "codex", "aider", "goose", "gemini"];
    const ALL: [Adapter; 6] = [
        Adapter::Command,
        Adapter::Claude,
        Adapter::Codex,
        Adapter::Aider,
        Adapter::Goose,
        Adapter::Gemini,
    ];

    pub fn parse(s: &str) -> Option<Adapter> {
        Self::NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| Self::ALL[i])
    }

    pub fn name(self) -> &'static str {
        let i = Self::ALL.iter().position(|m| *m == self).unwrap_or(0);
        Self::NAMES[i]
    }
}

/// An agent with its parameters bound. `argv` may still hold runtime placeholders such as
/// `{{prompt_file}}` (see [`RUNTIME_PLACEHOLDERS`]), filled in when an attempt starts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Agent {
    /// The definition's name as the loop wrote it (`claude`, `team.fast`).
    pub name: String,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub adapter: Adapter,
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Extra patterns (regular expressions) that mark a rate-limit or usage-limit failure.
    pub rate_limits: Vec<String>,
    /// The parameters as bound, for display and for the reviewer-independence check.
    pub params: BTreeMap<String, String>,
    /// The agent's own confinement, which replaces the loop's for it; left out of the encoding
    /// when absent, so agents without one keep their digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Sandbox>,
    /// What its model's tokens cost, for an agent that reports tokens but no dollars; left out
    /// of the encoding when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
}

/// A model's price in micro-dollars per million tokens (so `1.25` dollars is `1_250_000`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Price {
    /// The model the price is for, as the `price` node names it.
    pub model: String,
    pub input: u64,
    pub output: u64,
    /// Cached input tokens (a part of the input tokens).
    pub cached: u64,
    /// Where the price was written (`std/prices.kdl`, `loops/fix.kdl`), for `plan`; not part of
    /// the meaning, so not of the digest.
    #[serde(skip)]
    pub from: String,
}

impl Price {
    /// What `input` tokens (of which `cached` were cache reads) and `output` tokens cost, in
    /// micro-dollars, rounded to the nearest.
    pub(crate) fn cost(&self, input: u64, cached: u64, output: u64) -> u64 {
        let cached = cached.min(input);
        let millionths = u128::from(input - cached) * u128::from(self.input)
            + u128::from(cached) * u128::from(self.cached)
            + u128::from(output) * u128::from(self.output);
        u64::try_from((millionths + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }
}

impl Agent {
    /// Whether the agent's program reports what it cost in dollars itself (Claude Code, aider);
    /// the others report tokens, which mvk prices from [`Agent::price`].
    pub(crate) fn reports_dollars(&self) -> bool {
        matches!(self.adapter, Adapter::Claude | Adapter::Aider)
    }

    /// Whether its usage is known as it goes, so that mvk can stop it when a budget runs out
    /// while it works: Claude Code's `stream-json`, aider's lines after each message, any
    /// command's own `MVK_USAGE` lines, `codex exec --json`'s session log (its output reports
    /// once, at the end of its one turn) and the Gemini CLI's chat log (with `stream-json`,
    /// which names the session first). goose reports only at its end.
    pub(crate) fn streams_usage(&self) -> bool {
        let has = |s: &str| self.argv.iter().any(|a| a.contains(s));
        match self.adapter {
            Adapter::Claude => has("stream-json"),
            // Its session log, followed once `--json` names the thread (`--ephemeral` keeps none).
            Adapter::Codex => has("exec") && has("--json") && !has("--ephemeral"),
            // Its chat log, followed once stream-json's `init` names the session.
            Adapter::Gemini => has("stream-json"),
            Adapter::Aider | Adapter::Command => true,
            Adapter::Goose => false,
        }
    }

    /// The name its price is looked up by: its `model` parameter, else the value of a
    /// `--model` (or `-m`) option in its command (`mvk init`'s `coder` runs `--model sonnet`),
    /// else the agent's own name.
    pub(crate) fn price_key(&self) -> &str {
        if let Some(model) = self.params.get("model") {
            return model;
        }
        let mut words = self.argv.iter();
        while let Some(w) = words.next() {
            if let Some(v) = w.strip_prefix("--model=") {
                return v;
            }
            if (w == "--model" || w == "-m")
                && let Some(v) = words.next().filter(|v| !v.contains("{{"))
            {
                return v;
            }
        }
        &self.name
    }

    /// `claude (model=sonnet)`: how a person recognises this agent.
    pub fn label(&self) -> String {
        if self.params.is_empty() {
            return self.name.clone();
        }
        let params = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        format!("{} ({params})", self.name)
    }
}

/// Where an agent or a gate may write and what reaches it (see `run::sandbox`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Sandbox {
    /// `false`: a fresh network namespace with no interface up.
    pub network: bool,
    /// `true`: refuse to run where the kernel cannot confine; `false`: warn and run.
    pub required: bool,
    /// Paths granted for writing besides the worktree and a temporary directory: absolute, or
    /// `~/…` (the home directory when the process starts); sorted, each once.
    pub write: Vec<String>,
    /// Variables passed through from mvk's environment besides the base ones; sorted, each once.
    pub env: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[expect(
    clippy::large_enum_variant,
    reason = "a ladder holds a few rungs; boxing the agent would only add noise"
)]
pub enum Rung {
    Agent {
        agent: Agent,
        /// `None`: as many as the budget allows.
        attempts: Option<u32>,
    },
    Human,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Review {
    pub agent: Agent,
    pub rounds: u32,
    pub prompt: Template,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Budget {
    pub iterations: u32,
    pub tokens: Option<u64>,
    pub usd_micros: Option<u64>,
    #[serde(with = "opt_millis")]
    pub wall: Option<Duration>,
    pub same_failure: u32,
    pub context_tokens: u32,
    /// The fraction (thousandths) of `tokens`, `usd` or `wall` at which a warning is written
    /// and heard (`budget.threshold`). Who is told of spending does not change what a run does:
    /// the digest leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn_at: Option<u32>,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            iterations: DEFAULT_ITERATIONS,
            tokens: None,
            usd_micros: None,
            wall: None,
            same_failure: DEFAULT_SAME_FAILURE,
            context_tokens: DEFAULT_CONTEXT_TOKENS,
            warn_at: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    Ff,
    Merge,
    Squash,
    /// Pushed as a branch of its own to a remote, with a pull request opened for it
    /// ([`Merge::pr`]); the target branch is the pull request's base, and does not move.
    Pr,
}

impl Strategy {
    pub(crate) const NAMES: [&'static str; 4] = ["ff", "merge", "squash", "pr"];

    pub(crate) fn parse(s: &str) -> Option<Strategy> {
        match s {
            "ff" => Some(Strategy::Ff),
            "merge" => Some(Strategy::Merge),
            "squash" => Some(Strategy::Squash),
            "pr" => Some(Strategy::Pr),
            _ => None,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Strategy::Ff => "ff",
            Strategy::Merge => "merge",
            Strategy::Squash => "squash",
            Strategy::Pr => "pr",
        }
    }
}

/// How a task that waits for a task landed as a pull request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dependents {
    /// From the pushed branch of what it waits for, its own pull request based on that branch
    /// (stacked): the flow goes on without waiting for anyone.
    Stack,
    /// From the target branch on the remote once the pull requests of what it waits for have
    /// merged (checked every [`PullRequest::poll`]).
    Merged,
}

impl Dependents {
    pub(crate) const NAMES: [&'static str; 2] = ["stack", "merged"];

    pub(crate) fn parse(s: &str) -> Option<Dependents> {
        match s {
            "stack" => Some(Dependents::Stack),
            "merged" => Some(Dependents::Merged),
            _ => None,
        }
    }
}

/// How an accepted change becomes a pull request (`merge strategy="pr"`). The commands are
/// argv templates (handlebars: `{{branch}}`, `{{base}}`, `{{title}}`, `{{body_file}}`,
/// `{{remote}}`, `{{url}}`); the defaults are the GitHub CLI's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PullRequest {
    /// The git remote pushed to.
    pub remote: String,
    /// The title's template (`{{task}}`, `{{goal}}`, `{{subject}}`, `{{run}}`, `{{attempt}}`).
    pub title: String,
    /// The body's template, given the same variables and `{{handoff}}`: what a reviewer needs.
    pub body: String,
    pub dependents: Dependents,
    /// Opens the pull request; prints its URL.
    pub open: Vec<String>,
    /// Prints the URL of the pull request of `{{branch}}`, if there is one, open or not (nothing
    /// when there is none; a failure stops the landing): asked before opening one, so that none
    /// is opened twice.
    pub find: Vec<String>,
    /// Prints the state of the pull request at `{{url}}` (`MERGED`, `OPEN`, `CLOSED`).
    pub state: Vec<String>,
    /// How often [`Dependents::Merged`] asks.
    #[serde(with = "millis")]
    pub poll: Duration,
}

/// The handoff a pull request's body holds unless the loop gives its own.
pub(crate) const DEFAULT_PR_BODY: &str = "{{handoff}}";
pub(crate) const DEFAULT_PR_TITLE: &str = "{{subject}}";

impl Default for PullRequest {
    fn default() -> PullRequest {
        let argv = |a: &[&str]| a.iter().map(|s| (*s).to_string()).collect();
        PullRequest {
            remote: "origin".into(),
            title: DEFAULT_PR_TITLE.into(),
            body: DEFAULT_PR_BODY.into(),
            dependents: Dependents::Stack,
            open: argv(&[
                "gh",
                "pr",
                "create",
                "--base",
                "{{base}}",
                "--head",
                "{{branch}}",
                "--title",
                "{{title}}",
                "--body-file",
                "{{body_file}}",
            ]),
            // Any state: one merged before a resume asked is still the one opened.
            find: argv(&[
                "gh",
                "pr",
                "list",
                "--head",
                "{{branch}}",
                "--state",
                "all",
                "--json",
                "url",
                "--jq",
                ".[0].url",
            ]),
            state: argv(&[
                "gh", "pr", "view", "{{url}}", "--json", "state", "--jq", ".state",
            ]),
            poll: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Merge {
    /// A branch name, or [`CURRENT_BRANCH`].
    pub into: String,
    pub strategy: Strategy,
    /// Gates run on the merged result.
    pub gates: Vec<Gate>,
    /// With [`Strategy::Pr`]: how the pull request is opened. Absent otherwise, so that other
    /// loops keep their digests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pr: Option<PullRequest>,
}

impl Default for Merge {
    fn default() -> Merge {
        Merge {
            into: CURRENT_BRANCH.to_string(),
            strategy: Strategy::Squash,
            gates: Vec::new(),
            pr: None,
        }
    }
}

pub(crate) const DEFAULT_NOTIFY_TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const DEFAULT_NOTIFY_RETRIES: u32 = 3;
/// The fraction of a budget at which it warns (and `on="budget"` fires) when its `warn-at` is
/// not written, in thousandths.
pub(crate) const DEFAULT_WARN_AT: u32 = 800;
/// At most this many tries after the first: a notification must not outlive the run by much.
pub(crate) const MAX_NOTIFY_RETRIES: u64 = 10;

/// What a person hears of a run, and how (`notify`, see the book's notifications chapter).
/// Nothing here is a secret: a secret is named by its environment variable and read when the
/// notification is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notify {
    pub name: String,
    /// The events it fires on; sorted, each once.
    pub on: Vec<NotifyEvent>,
    /// The fraction of a budget (thousandths) at which `budget` fires; `None` for the budget's
    /// own warning (its `warn-at`, or [`DEFAULT_WARN_AT`]).
    pub at: Option<u32>,
    /// The outcomes `finished` fires on; empty for all.
    pub outcomes: Vec<String>,
    pub timeout: Duration,
    /// Tries after the first, on a connection error, a timeout, a 5xx, 408 or 429 (or a command
    /// that fails).
    pub retries: u32,
    pub channel: Channel,
    /// The definition it uses (`team.chat`), for display.
    pub from: Option<String>,
}

impl Notify {
    pub(crate) fn hears(&self, event: NotifyEvent) -> bool {
        self.on.contains(&event)
    }
}

/// The events a person hears of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotifyEvent {
    /// A checkpoint waits for a person (`mvk approve` or `mvk reject`).
    Waiting,
    /// The run (or, for a task's own notification, the task) ended, with its outcome.
    Finished,
    /// A budget reached the fraction `at` of its limit.
    Budget,
    /// A stop signal (Ctrl-C, SIGTERM, SIGHUP) ended mvk's process; the run waits for `mvk resume`.
    Interrupted,
}

impl NotifyEvent {
    pub const NAMES: [&'static str; 4] = ["waiting", "finished", "budget", "interrupted"];
    pub(crate) const ALL: [NotifyEvent; 4] = [
        NotifyEvent::Waiting,
        NotifyEvent::Finished,
        NotifyEvent::Budget,
        NotifyEvent::Interrupted,
    ];

    pub fn parse(s: &str) -> Option<NotifyEvent> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            NotifyEvent::Waiting => "waiting",
            NotifyEvent::Finished => "finished",
            NotifyEvent::Budget => "budget",
            NotifyEvent::Interrupted => "interrupted",
        }
    }
}

/// The outcomes a `finished` notification may be limited to (`outcome="rejected stuck"`):
/// a task's or a run's, and `error` (mvk's own error stopped the run).
pub(crate) const NOTIFY_OUTCOMES: [&str; 8] = [
    "accepted", "rejected", "stuck", "unknown", "budget", "human", "skipped", "error",
];

/// How a notification is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// A program and its arguments, placeholders (`{{task}}`) filled with the event's fields;
    /// the JSON body on its standard input.
    Command { argv: Vec<String> },
    /// A script run by `sh -c`; the event's fields in its environment (`$MVK_TASK`), never
    /// pasted into its code.
    Shell { script: String },
    /// An HTTP POST of the JSON body (or a Slack message) to a URL.
    Webhook {
        url: Secret,
        format: WebhookFormat,
        /// Extra headers, in the order written.
        headers: Vec<(String, Secret)>,
    },
}

/// A value written in the loop file, or read from mvk's environment when it is used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    Literal(String),
    /// `$var`, after `prefix` (`Bearer `).
    Env {
        var: String,
        prefix: String,
    },
}

/// The body a webhook is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookFormat {
    /// The documented `mvk.notify.v1` JSON object.
    Json,
    /// `{"text": …}` for Slack-compatible incoming webhooks (Slack, Mattermost, Rocket.Chat,
    /// Discord's `/slack` endpoint).
    Slack,
}

impl WebhookFormat {
    pub const NAMES: [&'static str; 2] = ["json", "slack"];

    pub fn parse(s: &str) -> Option<WebhookFormat> {
        match s {
            "json" => Some(WebhookFormat::Json),
            "slack" => Some(WebhookFormat::Slack),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            WebhookFormat::Json => "json",
            WebhookFormat::Slack => "slack",
        }
    }
}

/// Durations are encoded as whole milliseconds, so `"90s"` and `"1m30s"` hash the same.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|o| o.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::{NotifyEvent, Price};

    #[test]
    fn each_notify_event_reads_back_from_its_name() {
        for (name, event) in NotifyEvent::NAMES.iter().zip(NotifyEvent::ALL) {
            assert_eq!(event.name(), *name);
            assert_eq!(NotifyEvent::parse(name), Some(event));
        }
        assert_eq!(NotifyEvent::parse("finish"), None);
    }

    #[test]
    fn a_price_counts_cached_input_apart_and_rounds_to_the_micro_dollar() {
        let p = Price {
            model: "gpt-6.1-sol".into(),
            input: 2_000_000,
            output: 10_000_000,
            cached: 100_000,
            from: String::new(),
        };
        // 800k fresh input at $2, 200k cached at $0.10, 100k output at $10 per million.
        assert_eq!(p.cost(1_000_000, 200_000, 100_000), 2_620_000);
        // More cached than input (a tool's miscount) is all cached, never negative.
        assert_eq!(p.cost(10, 50, 0), 1);
        assert_eq!(p.cost(1, 0, 0), 2);
        assert_eq!(p.cost(u64::MAX, 0, u64::MAX), u64::MAX);
    }
}
