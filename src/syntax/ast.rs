//! The syntax tree: what a KDL file says, typed and spanned, before any name is resolved.

use std::time::Duration;

use crate::source::Span;

/// A value with the place it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Spanned<T> {
    pub node: T,
    pub span: Span,
}

impl<T> Spanned<T> {
    pub fn new(node: T, span: Span) -> Spanned<T> {
        Spanned { node, span }
    }
}

/// A parameter value as written in KDL.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Scalar {
    /// The text a parameter contributes when it is interpolated into a string.
    pub fn render(&self) -> String {
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
pub struct FileAst {
    pub items: Vec<Item>,
}

#[derive(Debug, Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "items are few per file; boxing would only add noise"
)]
pub enum Item {
    Import(Import),
    Gate(GateDecl),
    Agent(AgentDecl),
    Loop(LoopDecl),
    Flow(FlowDecl),
    Price(PriceDecl),
}

/// `price "MODEL" input=USD output=USD [cached=USD]`: what a model's tokens cost, in US dollars
/// per million tokens (kept as micro-dollars per million).
#[derive(Debug, Clone)]
pub struct PriceDecl {
    pub model: Spanned<String>,
    pub input: Spanned<u64>,
    pub output: Spanned<u64>,
    /// Cached input tokens; `None`: priced as input.
    pub cached: Option<Spanned<u64>>,
    pub span: Span,
}

/// `import "path" [git="URL" [rev="REV"]] [as=ns]`
#[derive(Debug, Clone)]
pub struct Import {
    /// A file: `std/…`, relative to the importing file, or (with `git`) inside that repository.
    pub path: Spanned<String>,
    pub alias: Option<Spanned<String>>,
    pub git: Option<GitSource>,
    pub span: Span,
}

/// Where a git import comes from: the repository's URL and the rev written (`None`: its HEAD).
#[derive(Debug, Clone)]
pub struct GitSource {
    pub url: Spanned<String>,
    pub rev: Option<Spanned<String>>,
}

/// A command: `run "prog" "arg"…` (an argv) or `sh "script"` (run by `sh -c`).
#[derive(Debug, Clone)]
pub enum Command {
    Run(Vec<Spanned<String>>),
    Sh(Spanned<String>),
}

/// `param NAME default=VALUE doc="…"`
#[derive(Debug, Clone)]
pub struct ParamDecl {
    pub name: Spanned<String>,
    pub default: Option<Spanned<Scalar>>,
    pub doc: Option<String>,
    pub span: Span,
}

/// A parameter given a value as a property: `target="--lib"`.
#[derive(Debug, Clone)]
pub struct Binding {
    pub key: Spanned<String>,
    pub value: Spanned<Scalar>,
}

/// An environment variable: `env KEY="value"`.
#[derive(Debug, Clone)]
pub struct EnvVar {
    pub key: Spanned<String>,
    pub value: Spanned<String>,
}

/// A gate, either a definition (top level) or a loop's check; `uses` names another definition.
#[derive(Debug, Clone)]
pub struct GateDecl {
    pub name: Spanned<String>,
    pub uses: Option<Spanned<String>>,
    pub evidence: Option<Spanned<String>>,
    pub timeout: Option<Spanned<Duration>>,
    pub bindings: Vec<Binding>,
    pub command: Option<Spanned<Command>>,
    pub env: Vec<EnvVar>,
    pub params: Vec<ParamDecl>,
    pub doc: Option<String>,
    pub span: Span,
}

/// A top-level agent definition: how to run a coding agent.
#[derive(Debug, Clone)]
pub struct AgentDecl {
    pub name: Spanned<String>,
    pub adapter: Option<Spanned<String>>,
    pub timeout: Option<Spanned<Duration>>,
    pub command: Option<Spanned<Command>>,
    pub env: Vec<EnvVar>,
    pub params: Vec<ParamDecl>,
    pub rate_limits: Vec<Spanned<String>>,
    pub sandbox: Option<SandboxDecl>,
    pub doc: Option<String>,
    pub span: Span,
}

/// `sandbox network=#false required=#true { write "/path"…; env "NAME"… }`
#[derive(Debug, Clone)]
pub struct SandboxDecl {
    pub network: Option<Spanned<bool>>,
    pub required: Option<Spanned<bool>>,
    pub write: Vec<Spanned<String>>,
    pub env: Vec<Spanned<String>>,
    pub span: Span,
}

/// A use of an agent definition with parameters: `agent claude model=sonnet`.
#[derive(Debug, Clone)]
pub struct AgentUse {
    pub name: Spanned<String>,
    pub bindings: Vec<Binding>,
    pub span: Span,
}

/// `review agent=codex rounds=2 prompt="review.hbs"`
#[derive(Debug, Clone)]
pub struct ReviewDecl {
    pub agent: AgentUse,
    pub rounds: Option<Spanned<u32>>,
    pub prompt: Option<Spanned<String>>,
    pub span: Span,
}

/// `budget iterations=… tokens=… usd=… wall=… same-failure=… context-tokens=…`
#[derive(Debug, Clone, Default)]
pub struct BudgetDecl {
    pub iterations: Option<Spanned<u32>>,
    pub tokens: Option<Spanned<u64>>,
    pub usd_micros: Option<Spanned<u64>>,
    pub wall: Option<Spanned<Duration>>,
    pub same_failure: Option<Spanned<u32>>,
    pub context_tokens: Option<Spanned<u32>>,
    pub span: Option<Span>,
}

#[derive(Debug, Clone)]
pub enum RungDecl {
    Agent {
        agent: AgentUse,
        attempts: Option<Spanned<u32>>,
    },
    Human,
}

#[derive(Debug, Clone)]
pub struct LadderDecl {
    pub rungs: Vec<Spanned<RungDecl>>,
    pub span: Span,
}

/// `merge into=main strategy=squash { gate … }`
#[derive(Debug, Clone)]
pub struct MergeDecl {
    pub into: Option<Spanned<String>>,
    pub strategy: Option<Spanned<String>>,
    pub gates: Vec<GateDecl>,
    pub span: Span,
}

/// The settings of a loop; also a task's inline body or its overrides of a loop file.
#[derive(Debug, Clone, Default)]
pub struct LoopBody {
    pub goal: Option<Spanned<String>>,
    pub prompt: Option<Spanned<String>>,
    pub scope: Option<Spanned<Vec<Spanned<String>>>>,
    pub seal: Option<Spanned<Vec<Spanned<String>>>>,
    pub gates: Vec<GateDecl>,
    pub review: Option<ReviewDecl>,
    pub budget: Option<BudgetDecl>,
    pub ladder: Option<LadderDecl>,
    pub merge: Option<MergeDecl>,
    pub agent: Option<AgentUse>,
    pub uncertified: Option<Spanned<bool>>,
    pub sandbox: Option<SandboxDecl>,
    /// The settings written, whether or not they were valid (and the setting a misspelt node
    /// most likely meant), so that a broken `goal` is not also reported as a missing one.
    pub written: Vec<&'static str>,
}

impl LoopBody {
    /// Whether `setting` (`"goal"`, `"agent"`, …) was written in this body, valid or not.
    pub fn wrote(&self, setting: &str) -> bool {
        self.written.contains(&setting)
    }

    /// Whether this body sets anything at all (a task with `loop=` may only override).
    pub fn is_empty(&self) -> bool {
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
            && self.written.is_empty()
    }
}

#[derive(Debug, Clone)]
pub struct LoopDecl {
    pub name: Spanned<String>,
    pub body: LoopBody,
    pub span: Span,
}

/// What a fan-out task iterates over.
#[derive(Debug, Clone)]
pub enum Each {
    /// A glob over the repository's files.
    Glob(Spanned<String>),
    /// A literal list of items.
    List(Vec<Spanned<String>>),
}

#[derive(Debug, Clone)]
pub struct TaskDecl {
    pub name: Spanned<String>,
    pub loop_file: Option<Spanned<String>>,
    pub each: Option<Spanned<Each>>,
    pub after: Vec<Spanned<String>>,
    pub body: LoopBody,
    pub span: Span,
}

#[derive(Debug, Clone)]
pub struct FlowDecl {
    pub name: Spanned<String>,
    pub parallel: Option<Spanned<u32>>,
    pub continue_on_failure: Option<Spanned<bool>>,
    pub budget: Option<BudgetDecl>,
    pub tasks: Vec<TaskDecl>,
    pub span: Span,
}
