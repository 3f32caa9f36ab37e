//! `mvk plan FILE [--json]`: compile only and print the DAG: tasks, dependencies, batches, gates,
//! budgets, ladder, seal, each node's digest, and the worst case the budgets allow.

use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use super::printer::Printer;
use super::{Cli, CliError, Exit};
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
        let doc = to_json(&program, &plan);
        let text = serde_json::to_string_pretty(&doc).map_err(|e| CliError::Internal {
            message: format!("cannot encode the plan as JSON: {e}"),
        })?;
        printer.out(&text);
    } else {
        printer.out(&to_text(&program, &plan));
    }
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

pub(crate) fn to_json(p: &Program, plan: &Plan) -> Value {
    let tasks: Vec<Value> = plan
        .order
        .iter()
        .map(|&i| {
            let t = &p.tasks[i];
            let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut v {
                map.insert("digest".into(), json!(t.meta.digest.hex()));
                map.insert(
                    "field_digests".into(),
                    Value::Object(t.meta.fields.iter().map(|(k, d)| (k.clone(), json!(d.hex()))).collect()),
                );
                map.insert("prompt".into(), json!({"name": t.prompt.name, "digest": crate::digest::hash("template", &json!(t.prompt.text)).hex()}));
                map.insert("worst_case".into(), cost_json(&plan.costs[i]));
                map.insert(
                    "dollars".into(),
                    Value::Array(agents_of(t).into_iter().map(dollar_source).collect()),
                );
            }
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
