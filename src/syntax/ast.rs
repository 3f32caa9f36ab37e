//! The syntax tree: what a KDL file says, typed and spanned, before any name is resolved.

use std::time::Duration;

use crate::source::Span;

/// A value with the place it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spanned<T> {
    pub(crate) node: T,
    pub(crate) span: Span,
}

impl<T> Spanned<T> {
    pub(crate) fn new(node: T, span: Span) -> Spanned<T> {
        Spanned { node, span }
    }
}

/// A parameter value as written in KDL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    /// The text a parameter contributes when it is interpolated into a string.
    pub(crate) fn render(&self) -> String {
        match self {
            Scalar::Str(s) => s.clone(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }
    }
}

/// One file, its top-level items in source order.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileAst {
    pub(crate) items: Vec<Item>,
}

#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "items are few per file; boxing would only add noise"
)]
pub(crate) enum Item {
    Import(Import),
    Gate(GateDecl),
    Agent(AgentDecl),
    Loop(LoopDecl),
    Flow(FlowDecl),
    Price(PriceDecl),
    Notify(NotifyDecl),
}

/// `price "MODEL" input=USD output=USD [cached=USD]`: what a model's tokens cost, in US dollars
/// per million tokens (kept as micro-dollars per million).
#[derive(Debug, Clone)]
pub(crate) struct PriceDecl {
    pub(crate) model: Spanned<String>,
    pub(crate) input: Spanned<u64>,
    pub(crate) output: Spanned<u64>,
    /// Cached input tokens; `None`: priced as input.
    pub(crate) cached: Option<Spanned<u64>>,
    #[allow(dead_code)]
    pub(crate) span: Span,
}

/// `import "path" [git="URL" [rev="REV"]] [as=ns]`
#[derive(Debug, Clone)]
pub(crate) struct Import {
    /// A file: `std/…`, relative to the importing file, or (with `git`) inside that repository.
    pub(crate) path: Spanned<String>,
    pub(crate) alias: Option<Spanned<String>>,
    pub(crate) git: Option<GitSource>,
    pub(crate) span: Span,
}

/// Where a git import comes from: the repository's URL and the rev written (`None`: its HEAD).
#[derive(Debug, Clone)]
pub(crate) struct GitSource {
    pub(crate) url: Spanned<String>,
    pub(crate) rev: Option<Spanned<String>>,
}

/// A command: `run "prog" "arg"…` (an argv) or `sh "script"` (run by `sh -c`).
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Run(Vec<Spanned<String>>),
    Sh(Spanned<String>),
}

/// `param NAME default=VALUE doc="…"`
#[derive(Debug, Clone)]
pub(crate) struct ParamDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) default: Option<Spanned<Scalar>>,
    #[allow(dead_code)]
    pub(crate) doc: Option<String>,
    pub(crate) span: Span,
}

/// A parameter given a value as a property: `target="--lib"`.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) key: Spanned<String>,
    pub(crate) value: Spanned<Scalar>,
}

/// An environment variable: `env KEY="value"`.
#[derive(Debug, Clone)]
pub(crate) struct EnvVar {
    pub(crate) key: Spanned<String>,
    pub(crate) value: Spanned<String>,
}

/// A gate, either a definition (top level) or a loop's check; `uses` names another definition.
#[derive(Debug, Clone)]
pub(crate) struct GateDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) uses: Option<Spanned<String>>,
    pub(crate) evidence: Option<Spanned<String>>,
    pub(crate) timeout: Option<Spanned<Duration>>,
    pub(crate) bindings: Vec<Binding>,
    pub(crate) command: Option<Spanned<Command>>,
    pub(crate) env: Vec<EnvVar>,
    pub(crate) params: Vec<ParamDecl>,
    pub(crate) doc: Option<String>,
    #[allow(dead_code)]
    pub(crate) span: Span,
}

/// A top-level agent definition: how to run a coding agent.
#[derive(Debug, Clone)]
pub(crate) struct AgentDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) adapter: Option<Spanned<String>>,
    pub(crate) timeout: Option<Spanned<Duration>>,
    pub(crate) command: Option<Spanned<Command>>,
    pub(crate) env: Vec<EnvVar>,
    pub(crate) params: Vec<ParamDecl>,
    pub(crate) rate_limits: Vec<Spanned<String>>,
    pub(crate) sandbox: Option<SandboxDecl>,
    #[allow(dead_code)]
    pub(crate) doc: Option<String>,
    #[allow(dead_code)]
    pub(crate) span: Span,
}

/// `sandbox network=#false required=#true { write "/path"…; env "NAME"… }`
#[derive(Debug, Clone)]
pub(crate) struct SandboxDecl {
    pub(crate) network: Option<Spanned<bool>>,
    pub(crate) required: Option<Spanned<bool>>,
    pub(crate) write: Vec<Spanned<String>>,
    pub(crate) env: Vec<Spanned<String>>,
    pub(crate) span: Span,
}

/// A use of an agent definition with parameters: `agent claude model=sonnet`.
#[derive(Debug, Clone)]
pub(crate) struct AgentUse {
    pub(crate) name: Spanned<String>,
    pub(crate) bindings: Vec<Binding>,
    pub(crate) span: Span,
}

/// `review agent=codex rounds=2 prompt="review.hbs"`
#[derive(Debug, Clone)]
pub(crate) struct ReviewDecl {
    pub(crate) agent: AgentUse,
    pub(crate) rounds: Option<Spanned<u32>>,
    pub(crate) prompt: Option<Spanned<String>>,
    pub(crate) span: Span,
}

/// `budget iterations=… tokens=… usd=… wall=… same-failure=… context-tokens=… warn-at=…`
#[derive(Debug, Clone, Default)]
pub(crate) struct BudgetDecl {
    pub(crate) iterations: Option<Spanned<u32>>,
    pub(crate) tokens: Option<Spanned<u64>>,
    pub(crate) usd_micros: Option<Spanned<u64>>,
    pub(crate) wall: Option<Spanned<Duration>>,
    pub(crate) same_failure: Option<Spanned<u32>>,
    pub(crate) context_tokens: Option<Spanned<u32>>,
    /// Thousandths of the limits at which the budget warns.
    pub(crate) warn_at: Option<Spanned<u32>>,
    pub(crate) span: Option<Span>,
}

#[derive(Debug, Clone)]
pub(crate) enum RungDecl {
    Agent {
        agent: AgentUse,
        attempts: Option<Spanned<u32>>,
    },
    Human,
}

#[derive(Debug, Clone)]
pub(crate) struct LadderDecl {
    pub(crate) rungs: Vec<Spanned<RungDecl>>,
    pub(crate) span: Span,
}

/// `merge into=main strategy=squash { gate … }`
#[derive(Debug, Clone)]
pub(crate) struct MergeDecl {
    pub(crate) into: Option<Spanned<String>>,
    pub(crate) strategy: Option<Spanned<String>>,
    pub(crate) gates: Vec<GateDecl>,
    /// The settings of `strategy="pr"`.
    pub(crate) pr: PrDecl,
    pub(crate) span: Span,
}

/// `merge strategy="pr" remote=… title=… dependents=… poll=… { body …; open …; find …; state … }`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PrDecl {
    pub(crate) remote: Option<Spanned<String>>,
    pub(crate) title: Option<Spanned<String>>,
    pub(crate) dependents: Option<Spanned<String>>,
    pub(crate) poll: Option<Spanned<std::time::Duration>>,
    pub(crate) body: Option<Spanned<String>>,
    pub(crate) open: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) find: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) state: Option<Spanned<Vec<Spanned<String>>>>,
}

impl PrDecl {
    /// The first setting given, by its name and span: settings only `strategy="pr"` reads.
    pub(crate) fn first_given(&self) -> Option<(&'static str, Span)> {
        [
            ("remote", self.remote.as_ref().map(|s| s.span)),
            ("title", self.title.as_ref().map(|s| s.span)),
            ("dependents", self.dependents.as_ref().map(|s| s.span)),
            ("poll", self.poll.as_ref().map(|s| s.span)),
            ("body", self.body.as_ref().map(|s| s.span)),
            ("open", self.open.as_ref().map(|s| s.span)),
            ("find", self.find.as_ref().map(|s| s.span)),
            ("state", self.state.as_ref().map(|s| s.span)),
        ]
        .into_iter()
        .find_map(|(name, span)| span.map(|s| (name, s)))
    }
}

/// `notify NAME [use=DEF] [on="…"] [at=0.8] [outcome="…"] [timeout="10s"] [retries=3] { run … | sh … | webhook … }`
#[derive(Debug, Clone)]
pub(crate) struct NotifyDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) uses: Option<Spanned<String>>,
    pub(crate) on: Option<Spanned<Vec<crate::ir::NotifyEvent>>>,
    /// Thousandths of a budget.
    pub(crate) at: Option<Spanned<u32>>,
    pub(crate) outcomes: Option<Spanned<Vec<String>>>,
    pub(crate) timeout: Option<Spanned<Duration>>,
    pub(crate) retries: Option<Spanned<u32>>,
    pub(crate) channel: Option<Spanned<ChannelDecl>>,
    #[allow(dead_code)]
    pub(crate) span: Span,
}

/// How a notification is sent, as written.
#[derive(Debug, Clone)]
pub(crate) enum ChannelDecl {
    Command(Command),
    Webhook {
        url: Spanned<SecretDecl>,
        format: Option<Spanned<crate::ir::WebhookFormat>>,
        headers: Vec<(Spanned<String>, Spanned<SecretDecl>)>,
    },
}

/// A value written in the file, or the name of the variable that holds it.
#[derive(Debug, Clone)]
pub(crate) enum SecretDecl {
    Literal(String),
    Env { var: String, prefix: String },
}

/// The settings of a loop; also a task's inline body or its overrides of a loop file.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoopBody {
    pub(crate) goal: Option<Spanned<String>>,
    pub(crate) prompt: Option<Spanned<String>>,
    pub(crate) scope: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) seal: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) gates: Vec<GateDecl>,
    pub(crate) review: Option<ReviewDecl>,
    pub(crate) budget: Option<BudgetDecl>,
    pub(crate) ladder: Option<LadderDecl>,
    pub(crate) merge: Option<MergeDecl>,
    pub(crate) agent: Option<AgentUse>,
    pub(crate) uncertified: Option<Spanned<bool>>,
    pub(crate) sandbox: Option<SandboxDecl>,
    /// `lessons "FILE"`: the lessons a person pinned, kept in the repository.
    pub(crate) lessons: Option<Spanned<String>>,
    /// `notify` nodes, in order.
    pub(crate) notify: Vec<NotifyDecl>,
    /// `scope … new=#true`, `seal … new=#true`: the paths need not match a tracked file yet
    /// (the task creates them); a lint's opt-out, not part of the definition's meaning.
    pub(crate) scope_new: bool,
    pub(crate) seal_new: bool,
    /// The settings written, whether or not they were valid (and the setting a misspelt node
    /// most likely meant), so that a broken `goal` is not also reported as a missing one.
    pub(crate) written: Vec<&'static str>,
}

impl LoopBody {
    /// Whether this body sets anything at all (a task with `loop=` may only override).
    pub(crate) fn is_empty(&self) -> bool {
        self.goal.is_none()
            && self.prompt.is_none()
            && self.scope.is_none()
            && self.seal.is_none()
            && self.gates.is_empty()
            && self.review.is_none()
            && self.budget.is_none()
            && self.ladder.is_none()
            && self.merge.is_none()
            && self.agent.is_none()
            && self.uncertified.is_none()
            && self.sandbox.is_none()
            && self.lessons.is_none()
            && self.notify.is_empty()
            && self.written.is_empty()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LoopDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) body: LoopBody,
    pub(crate) span: Span,
}

/// What a fan-out task iterates over.
#[derive(Debug, Clone)]
pub(crate) enum Each {
    /// A glob over the repository's files.
    Glob(Spanned<String>),
    /// A literal list of items.
    List(Vec<Spanned<String>>),
}

#[derive(Debug, Clone)]
pub(crate) struct TaskDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) loop_file: Option<Spanned<String>>,
    pub(crate) each: Option<Spanned<Each>>,
    pub(crate) after: Vec<Spanned<String>>,
    pub(crate) body: LoopBody,
    #[allow(dead_code)]
    pub(crate) span: Span,
}

#[derive(Debug, Clone)]
pub(crate) struct FlowDecl {
    pub(crate) name: Spanned<String>,
    pub(crate) parallel: Option<Spanned<u32>>,
    pub(crate) continue_on_failure: Option<Spanned<bool>>,
    pub(crate) budget: Option<BudgetDecl>,
    pub(crate) notify: Vec<NotifyDecl>,
    pub(crate) tasks: Vec<TaskDecl>,
    pub(crate) span: Span,
}
