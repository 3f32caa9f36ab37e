//! `mvk plan FILE [--json]`: compile only and print the DAG: tasks, dependencies, batches, gates,
//! budgets, ladder, seal, each node's digest, and the worst case the budgets allow.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Value, json};

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::digest::Digest;
use crate::ir::{self, Program, Rung, Task};
use crate::plan::{self, Bound, Cost, Plan, format_duration, format_usd};

#[derive(Debug, Args)]
pub(crate) struct PlanArgs {
    /// The loop or flow file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn plan(cli: &Cli, printer: &Printer, args: &PlanArgs) -> Result<Exit, CliError> {
    let program = super::compile(cli, printer, &args.file)?;
    let plan = plan::plan(&program);
    if args.json {
        let doc = Document {
            program: &program,
            plan: &plan,
        };
        printer.out_json(&doc).map_err(|e| CliError::Internal {
            message: format!("cannot encode the plan as JSON: {e}"),
        })?;
    } else {
        printer.out(&to_text(&program, &plan));
    }
    // The command ends here: freeing the program and plan of a large flow task by task would
    // cost a twentieth of its time, and the process's exit frees them at once.
    std::mem::forget(program);
    std::mem::forget(plan);
    Ok(Exit::Ok)
}

fn bound_usd(b: Bound) -> String {
    match b {
        Bound::Limited(m) => format_usd(m),
        Bound::Unbounded => "unbounded".into(),
    }
}

fn bound_tokens(b: Bound) -> String {
    match b {
        Bound::Limited(t) => t.to_string(),
        Bound::Unbounded => "unbounded".into(),
    }
}

fn bound_wall(b: Bound) -> String {
    match b {
        Bound::Limited(ms) => format_duration(std::time::Duration::from_millis(ms)),
        Bound::Unbounded => "unbounded".into(),
    }
}

fn cost_line(c: &Cost) -> String {
    format!(
        "{} attempt{}, usd {}, tokens {}, wall {}",
        c.attempts,
        if c.attempts == 1 { "" } else { "s" },
        bound_usd(c.usd_micros),
        bound_tokens(c.tokens),
        bound_wall(c.wall_ms)
    )
}

fn gate_line(g: &ir::Gate) -> String {
    let from = g
        .from
        .as_ref()
        .map(|f| format!(" (from {f})"))
        .unwrap_or_default();
    format!(
        "{}: {}{from} [evidence {}, timeout {}]",
        g.name,
        crate::plan::shell_words(&g.argv),
        g.evidence.name(),
        format_duration(g.timeout)
    )
}

/// Thousandths as a percentage: `80%`, `12.5%`.
fn percent(thousandths: u32) -> String {
    if thousandths.is_multiple_of(10) {
        format!("{}%", thousandths / 10)
    } else {
        format!("{}.{}%", thousandths / 10, thousandths % 10)
    }
}

fn budget_line(b: &ir::Budget) -> String {
    let mut parts = vec![format!("iterations {}", b.iterations)];
    if let Some(t) = b.tokens {
        parts.push(format!("tokens {t}"));
    }
    if let Some(u) = b.usd_micros {
        parts.push(format!("usd {}", format_usd(u)));
    }
    if let Some(w) = b.wall {
        parts.push(format!("wall {}", format_duration(w)));
    }
    if let Some(at) = b.warn_at {
        parts.push(format!("warn at {}", percent(at)));
    }
    parts.push(format!("same-failure {}", b.same_failure));
    parts.push(format!("context {} tokens", b.context_tokens));
    parts.join(", ")
}

fn rung_line(r: &Rung) -> String {
    match r {
        Rung::Human => "human".into(),
        Rung::Agent { agent, attempts } => {
            let own = agent.sandbox.as_ref().map_or_else(String::new, |s| {
                format!("; own sandbox: {}", sandbox_line(s))
            });
            match attempts {
                Some(n) => format!("{} × {n}{own}", agent.label()),
                None => format!("{} (until the budget ends){own}", agent.label()),
            }
        }
    }
}

/// `network off, required; writes ~/.cargo; passes ANTHROPIC_API_KEY`
fn sandbox_line(s: &ir::Sandbox) -> String {
    let mut out = format!(
        "network {}, {}",
        if s.network { "on" } else { "off" },
        if s.required {
            "required"
        } else {
            "warn where unsupported"
        }
    );
    if !s.write.is_empty() {
        out.push_str(&format!("; writes {}", s.write.join(" ")));
    }
    if !s.env.is_empty() {
        out.push_str(&format!("; passes {}", s.env.join(" ")));
    }
    out
}

fn into_text(m: &ir::Merge) -> String {
    if m.into == ir::CURRENT_BRANCH {
        "the branch checked out when the run starts".into()
    } else {
        format!("`{}`", m.into)
    }
}

fn task_text(t: &Task, c: &Cost, out: &mut String) {
    out.push_str(&format!("task {}  {}\n", t.name, t.meta.digest.short()));
    let mut row = |k: &str, v: String| out.push_str(&format!("  {k:<8} {v}\n"));
    let goal = t.goal.lines().next().unwrap_or("");
    row("goal", goal.to_string());
    if !t.after.is_empty() {
        row("after", t.after.join(", "));
    }
    row("prompt", t.prompt.name.clone());
    row("scope", t.scope.join(" "));
    row(
        "seal",
        if t.seal.is_empty() {
            "(none)".into()
        } else {
            t.seal.join(" ")
        },
    );
    if t.gates.is_empty() {
        row("gates", "(none: uncertified)".into());
    }
    for (i, g) in t.gates.iter().enumerate() {
        row(if i == 0 { "gates" } else { "" }, gate_line(g));
    }
    for (i, r) in t.ladder.iter().enumerate() {
        row(if i == 0 { "ladder" } else { "" }, rung_line(r));
    }
    row(
        "review",
        t.review.as_ref().map_or_else(
            || "(none)".into(),
            |r| {
                format!(
                    "{}, up to {} rework round{}",
                    r.agent.label(),
                    r.rounds,
                    if r.rounds == 1 { "" } else { "s" }
                )
            },
        ),
    );
    if let Some(sandbox) = &t.sandbox {
        row("sandbox", sandbox_line(sandbox));
    }
    row("budget", budget_line(&t.budget));
    for (i, line) in dollar_lines(t).into_iter().enumerate() {
        row(if i == 0 { "dollars" } else { "" }, line);
    }
    row(
        "merge",
        format!("{} into {}", t.merge.strategy.name(), into_text(&t.merge)),
    );
    for g in &t.merge.gates {
        row("", format!("then {}", gate_line(g)));
    }
    row("worst", cost_line(c));
}

pub(crate) fn to_text(p: &Program, plan: &Plan) -> String {
    let mut out = String::new();
    match p.kind {
        ir::ProgramKind::Library => {
            out.push_str(&format!(
                "library {}  {}\n(definitions only: nothing to run)\n",
                p.name,
                p.digest.short()
            ));
            return out;
        }
        ir::ProgramKind::Loop => {
            out.push_str(&format!("loop {}  {}\n\n", p.name, p.digest.short()))
        }
        ir::ProgramKind::Flow => {
            let f = p.flow.clone().unwrap_or(ir::FlowSettings {
                parallel: 1,
                continue_on_failure: false,
                budget: ir::FlowBudget::default(),
            });
            out.push_str(&format!(
                "flow {}  {}\n  {} task{}, parallel {}{}\n",
                p.name,
                p.digest.short(),
                p.tasks.len(),
                if p.tasks.len() == 1 { "" } else { "s" },
                f.parallel,
                if f.continue_on_failure {
                    ", continue-on-failure"
                } else {
                    ""
                }
            ));
            let mut limits = Vec::new();
            if let Some(u) = f.budget.usd_micros {
                limits.push(format!("usd {}", format_usd(u)));
            }
            if let Some(t) = f.budget.tokens {
                limits.push(format!("tokens {t}"));
            }
            if let Some(w) = f.budget.wall {
                limits.push(format!("wall {}", format_duration(w)));
            }
            if let Some(at) = f.budget.warn_at {
                limits.push(format!("warn at {}", percent(at)));
            }
            if !limits.is_empty() {
                out.push_str(&format!("  flow budget: {}\n", limits.join(", ")));
            }
            for (i, b) in plan.batches.iter().enumerate() {
                let names: Vec<&str> = b.iter().map(|&t| p.tasks[t].name.as_str()).collect();
                out.push_str(&format!("  batch {}: {}\n", i + 1, names.join(", ")));
            }
            out.push('\n');
        }
    }
    for &i in &plan.order {
        task_text(&p.tasks[i], &plan.costs[i], &mut out);
        out.push('\n');
    }
    out.push_str(&format!("worst case: {}\n", cost_line(&plan.total)));
    out
}

/// Each agent of a task (rungs, then the reviewer), once.
fn agents_of(t: &ir::Task) -> Vec<&ir::Agent> {
    let mut out: Vec<&ir::Agent> = Vec::new();
    for (a, _) in t.agents() {
        if !out.iter().any(|b| b.label() == a.label()) {
            out.push(a);
        }
    }
    out
}

/// Where each agent's dollars come from: its own report, or a price of the table.
fn dollar_source(a: &ir::Agent) -> Value {
    match (&a.price, a.reports_dollars(), a.adapter) {
        (_, true, _) => json!({"agent": a.label(), "source": "reported"}),
        (Some(p), _, _) => json!({
            "agent": a.label(),
            "source": "price",
            "model": p.model,
            "from": p.from,
            "input_per_mtok": p.input as f64 / 1e6,
            "output_per_mtok": p.output as f64 / 1e6,
            "cached_per_mtok": p.cached as f64 / 1e6,
        }),
        (None, _, ir::Adapter::Command) => json!({"agent": a.label(), "source": "mvk-usage"}),
        (None, _, _) => json!({"agent": a.label(), "source": "none"}),
    }
}

fn dollar_lines(t: &ir::Task) -> Vec<String> {
    let per = |m: u64| {
        let s = format!("{:.4}", m as f64 / 1e6);
        let s = s.trim_end_matches('0');
        format!(
            "${}",
            if s.ends_with('.') {
                format!("{s}00")
            } else {
                s.to_string()
            }
        )
    };
    agents_of(t)
        .into_iter()
        .map(|a| match (&a.price, a.reports_dollars(), a.adapter) {
            (Some(p), true, _) => format!(
                "{}: as the agent reports them, else priced as `{}` ({})",
                a.label(),
                p.model,
                p.from
            ),
            (None, true, _) => format!("{}: as the agent reports them", a.label()),
            (Some(p), _, _) => format!(
                "{}: tokens priced as `{}` ({}): {} in, {} cached, {} out per million",
                a.label(),
                p.model,
                p.from,
                per(p.input),
                per(p.cached),
                per(p.output)
            ),
            (None, _, ir::Adapter::Command) => {
                format!("{}: only what it reports on an MVK_USAGE line", a.label())
            }
            (None, _, _) => format!(
                "{}: none (tokens only; model `{}` has no price)",
                a.label(),
                a.price_key()
            ),
        })
        .collect()
}

fn cost_json(c: &Cost) -> Value {
    json!({
        "attempts": c.attempts,
        "usd": match c.usd_micros { Bound::Limited(m) => json!(m as f64 / 1_000_000.0), Bound::Unbounded => Value::Null },
        "tokens": match c.tokens { Bound::Limited(t) => json!(t), Bound::Unbounded => Value::Null },
        "wall_ms": match c.wall_ms { Bound::Limited(t) => json!(t), Bound::Unbounded => Value::Null },
    })
}

/// One task's part of the document: the task's IR (its prompt's text replaced by the
/// template's name and digest) with what the plan says of it. The fields of this and of the
/// views below are in the order of their names, the order the document has always had (a JSON
/// map's), so that they are written as they are read, with no map made first; a test holds
/// them to the IR's serialization.
#[derive(Serialize)]
struct TaskDoc<'a> {
    after: &'a [String],
    budget: BudgetDoc<'a>,
    digest: Digest,
    dollars: Vec<Value>,
    /// Written as a map of hex digits, in the map's order (sorted, as a JSON map's).
    field_digests: &'a BTreeMap<String, Digest>,
    gates: Vec<GateDoc<'a>>,
    goal: &'a str,
    item: &'a Option<String>,
    ladder: Vec<RungDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lessons: &'a Option<String>,
    merge: MergeDoc<'a>,
    name: &'a str,
    prompt: PromptDoc<'a>,
    review: Option<ReviewDoc<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxDoc<'a>>,
    scope: &'a [String],
    seal: &'a [String],
    uncertified: bool,
    worst_case: Value,
}

#[derive(Serialize)]
struct BudgetDoc<'a> {
    context_tokens: u32,
    iterations: u32,
    same_failure: u32,
    tokens: &'a Option<u64>,
    usd_micros: &'a Option<u64>,
    wall: Option<u64>,
    /// Thousandths of the limits at which the budget warns.
    #[serde(skip_serializing_if = "Option::is_none")]
    warn_at: Option<u32>,
}

#[derive(Serialize)]
struct GateDoc<'a> {
    argv: &'a [String],
    env: &'a BTreeMap<String, String>,
    evidence: ir::EvidenceMode,
    name: &'a str,
    timeout: u64,
}

/// A rung: the IR's enum is tagged by `kind`, which serde writes first, where it comes last.
#[derive(Serialize)]
struct RungDoc<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<AgentDoc<'a>>,
    /// Absent for a person; `null` for an agent bound by the budget alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<Option<u32>>,
    kind: &'static str,
}

#[derive(Serialize)]
struct AgentDoc<'a> {
    adapter: ir::Adapter,
    argv: &'a [String],
    env: &'a BTreeMap<String, String>,
    name: &'a str,
    params: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    price: Option<PriceDoc<'a>>,
    rate_limits: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    sandbox: Option<SandboxDoc<'a>>,
    timeout: u64,
}

#[derive(Serialize)]
struct PriceDoc<'a> {
    cached: u64,
    input: u64,
    model: &'a str,
    output: u64,
}

#[derive(Serialize)]
struct SandboxDoc<'a> {
    env: &'a [String],
    network: bool,
    required: bool,
    write: &'a [String],
}

#[derive(Serialize)]
struct MergeDoc<'a> {
    gates: Vec<GateDoc<'a>>,
    into: &'a str,
    strategy: ir::Strategy,
}

#[derive(Serialize)]
struct PromptDoc<'a> {
    digest: Digest,
    name: &'a str,
}

#[derive(Serialize)]
struct ReviewDoc<'a> {
    agent: AgentDoc<'a>,
    prompt: TextDoc<'a>,
    rounds: u32,
}

/// A template as the IR serializes it: its text alone.
#[derive(Serialize)]
struct TextDoc<'a> {
    text: &'a str,
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn gate_doc(g: &ir::Gate) -> GateDoc<'_> {
    GateDoc {
        argv: &g.argv,
        env: &g.env,
        evidence: g.evidence,
        name: &g.name,
        timeout: millis(g.timeout),
    }
}

fn sandbox_doc(s: &ir::Sandbox) -> SandboxDoc<'_> {
    SandboxDoc {
        env: &s.env,
        network: s.network,
        required: s.required,
        write: &s.write,
    }
}

fn agent_doc(a: &ir::Agent) -> AgentDoc<'_> {
    AgentDoc {
        adapter: a.adapter,
        argv: &a.argv,
        env: &a.env,
        name: &a.name,
        params: &a.params,
        price: a.price.as_ref().map(|p| PriceDoc {
            cached: p.cached,
            input: p.input,
            model: &p.model,
            output: p.output,
        }),
        rate_limits: &a.rate_limits,
        sandbox: a.sandbox.as_ref().map(sandbox_doc),
        timeout: millis(a.timeout),
    }
}

/// The digest `plan --json` gives a template: of its text, once per text however many tasks
/// share it (by the shared text's address; the text is held so that the address stays its own).
#[derive(Default)]
struct TemplateDigests(std::cell::RefCell<HashMap<usize, (Arc<str>, Digest)>>);

impl TemplateDigests {
    fn of(&self, text: &Arc<str>) -> Digest {
        let at = Arc::as_ptr(text).cast::<u8>() as usize;
        let mut known = self.0.borrow_mut();
        known
            .entry(at)
            .or_insert_with(|| {
                let digest = crate::digest::hash("template", &json!(text));
                (Arc::clone(text), digest)
            })
            .1
    }
}

fn task_doc<'a>(p: &'a Program, plan: &Plan, i: usize, digests: &TemplateDigests) -> TaskDoc<'a> {
    let t = &p.tasks[i];
    TaskDoc {
        after: &t.after,
        budget: BudgetDoc {
            context_tokens: t.budget.context_tokens,
            iterations: t.budget.iterations,
            same_failure: t.budget.same_failure,
            tokens: &t.budget.tokens,
            usd_micros: &t.budget.usd_micros,
            wall: t.budget.wall.map(millis),
            warn_at: t.budget.warn_at,
        },
        digest: t.meta.digest,
        dollars: agents_of(t).into_iter().map(dollar_source).collect(),
        field_digests: &t.meta.fields,
        gates: t.gates.iter().map(gate_doc).collect(),
        goal: &t.goal,
        item: &t.item,
        ladder: t
            .ladder
            .iter()
            .map(|r| match r {
                Rung::Agent { agent, attempts } => RungDoc {
                    agent: Some(agent_doc(agent)),
                    attempts: Some(*attempts),
                    kind: "agent",
                },
                Rung::Human => RungDoc {
                    agent: None,
                    attempts: None,
                    kind: "human",
                },
            })
            .collect(),
        lessons: &t.lessons,
        merge: MergeDoc {
            gates: t.merge.gates.iter().map(gate_doc).collect(),
            into: &t.merge.into,
            strategy: t.merge.strategy,
        },
        name: &t.name,
        prompt: PromptDoc {
            digest: digests.of(&t.prompt.text),
            name: &t.prompt.name,
        },
        review: t.review.as_ref().map(|r| ReviewDoc {
            agent: agent_doc(&r.agent),
            prompt: TextDoc {
                text: &r.prompt.text,
            },
            rounds: r.rounds,
        }),
        sandbox: t.sandbox.as_ref().map(sandbox_doc),
        scope: &t.scope,
        seal: &t.seal,
        uncertified: t.uncertified,
        worst_case: cost_json(&plan.costs[i]),
    }
}

/// `plan --json`'s document (schema `mvk.plan.v1`), encoded as it is written: one task's part
/// is made, written and dropped before the next, so a flow of 100,000 tasks is never held
/// twice. Its keys come in the order a JSON map keeps them (sorted), as each task's part does,
/// so the bytes are those of the document made whole as one value.
pub(crate) struct Document<'a> {
    pub(crate) program: &'a Program,
    pub(crate) plan: &'a Plan,
}

impl Serialize for Document<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (p, plan) = (self.program, self.plan);
        let batches: Vec<Vec<&str>> = plan
            .batches
            .iter()
            .map(|b| b.iter().map(|&i| p.tasks[i].name.as_str()).collect())
            .collect();
        let mut doc = s.serialize_map(Some(8))?;
        doc.serialize_entry("batches", &batches)?;
        doc.serialize_entry("digest", &p.digest)?;
        // Through a value, whose keys are sorted, where the type's fields are not.
        doc.serialize_entry("flow", &json!(p.flow))?;
        doc.serialize_entry("kind", &p.kind)?;
        doc.serialize_entry("name", &p.name)?;
        doc.serialize_entry("schema", "mvk.plan.v1")?;
        doc.serialize_entry("tasks", &Tasks(self))?;
        doc.serialize_entry("worst_case", &cost_json(&plan.total))?;
        doc.end()
    }
}

/// The tasks in plan order, each made as it is written.
struct Tasks<'a>(&'a Document<'a>);

impl Serialize for Tasks<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Document { program, plan } = *self.0;
        let digests = TemplateDigests::default();
        s.collect_seq(
            plan.order
                .iter()
                .map(|&i| task_doc(program, plan, i, &digests)),
        )
    }
}

/// The document as one value, for a caller that hands it on whole (the MCP server).
pub(crate) fn to_json(p: &Program, plan: &Plan) -> Value {
    serde_json::to_value(Document { program: p, plan }).unwrap_or(Value::Null)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The document as it was made before it was written as it is encoded: each task's IR
    /// serialized to a value, with what the plan says of it put in, all in one value.
    fn whole_value(p: &Program, plan: &Plan) -> Value {
        let tasks: Vec<Value> = plan
            .order
            .iter()
            .map(|&i| {
                let t = &p.tasks[i];
                let mut v = serde_json::to_value(t).unwrap();
                let map = v.as_object_mut().unwrap();
                map.insert("digest".into(), json!(t.meta.digest.hex()));
                map.insert(
                    "field_digests".into(),
                    Value::Object(
                        t.meta
                            .fields
                            .iter()
                            .map(|(k, d)| (k.clone(), json!(d.hex())))
                            .collect(),
                    ),
                );
                let digest = crate::digest::hash("template", &json!(t.prompt.text)).hex();
                map.insert(
                    "prompt".into(),
                    json!({"name": t.prompt.name, "digest": digest}),
                );
                map.insert("worst_case".into(), cost_json(&plan.costs[i]));
                map.insert(
                    "dollars".into(),
                    Value::Array(agents_of(t).into_iter().map(dollar_source).collect()),
                );
                v
            })
            .collect();
        let batches: Vec<Vec<&str>> = plan
            .batches
            .iter()
            .map(|b| b.iter().map(|&i| p.tasks[i].name.as_str()).collect())
            .collect();
        json!({
            "schema": "mvk.plan.v1",
            "kind": p.kind,
            "name": p.name,
            "digest": p.digest.hex(),
            "flow": p.flow,
            "tasks": tasks,
            "batches": batches,
            "worst_case": cost_json(&plan.total),
        })
    }

    /// Every part of a task the IR serializes, written at least once: a ladder ending with a
    /// person, a priced agent with a sandbox of its own, a reviewer, merge gates, a loop
    /// sandbox, lessons, budgets of each kind, a fan-out, dependencies and a flow budget.
    pub(crate) const FLOW: &str = r#"
price "tiny-1" input=1.0 output=2.0 cached=0.5
agent bot timeout="5m" {
    param model default="tiny-1"
    run "sh" "bot.sh" "{{model}}" "{{prompt_file}}"
    sandbox required=#true {
        write "~/.bot"
        env "BOT_KEY"
    }
}
agent rev adapter=claude { run "claude" "-p"; }

flow everything {
    parallel 2
    continue-on-failure #true
    budget usd=20.0 tokens=900000 wall="4h"
    task first {
        goal "The first."
        agent bot
        scope "src/**"
        seal "tests/**"
        lessons "loops/LESSONS.md"
        gate unit timeout="2m" { run "cargo" "test"; }
        review agent=rev rounds=1
        budget iterations=4 usd=2.5 tokens=100000 wall="20m" same-failure=3 context-tokens=9000
        sandbox network=#false { write "~/.cargo"; }
        merge into=main strategy=ff {
            gate all { run "make" "check"; }
        }
    }
    task each {
        each "a" "b"
        after first
        goal "Port {{item}}."
        ladder {
            rung agent=bot attempts=2
            rung agent=bot model=other
            rung human
        }
        merge into=main
        gate g evidence=none { run "check" "{{item}}"; }
    }
    task loose {
        goal "Nothing checks this."
        agent bot
        uncertified #true
        merge into=main
    }
}
"#;

    fn program(dir: &std::path::Path, file: &str) -> Program {
        let compiled = crate::resolve::compile(
            &dir.join(file),
            &crate::resolve::Options {
                repo_root: None,
                ..Default::default()
            },
        );
        compiled.program.unwrap_or_else(|| {
            panic!(
                "{}",
                crate::diag::Renderer::plain(80).render_all(&compiled.diags, &compiled.sources)
            )
        })
    }

    // Guards the document's bytes: written as it is encoded, from views of the IR, it must be
    // the whole value's pretty print, and a field the IR gains must show here as a difference.
    #[test]
    fn the_document_written_as_encoded_is_the_whole_value_printed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("flow.kdl"), FLOW).unwrap();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let programs = [
            program(dir.path(), "flow.kdl"),
            program(&root.join("loops"), "pagination.kdl"),
            program(&root.join("loops"), "fix-failing-tests.kdl"),
        ];
        for p in &programs {
            let plan = plan::plan(p);
            let want = whole_value(p, &plan);
            let written = serde_json::to_vec_pretty(&Document {
                program: p,
                plan: &plan,
            })
            .unwrap();
            assert_eq!(
                String::from_utf8(written).unwrap(),
                serde_json::to_string_pretty(&want).unwrap(),
                "{}",
                p.name
            );
            assert_eq!(to_json(p, &plan), want, "{}", p.name);
        }
        // The flow really holds what it is meant to show.
        let text =
            serde_json::to_string(&to_json(&programs[0], &plan::plan(&programs[0]))).unwrap();
        for needle in [
            r#""kind":"human""#,
            r#""price":{"#,
            r#""sandbox":{"#,
            r#""lessons":"loops/LESSONS.md""#,
            r#""review":{"agent""#,
            r#""attempts":null"#,
            r#""wall":1200000"#,
        ] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
    }
}
