//! `mvk graph FILE --format dot|mermaid`: the DAG as a picture source.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::ir::Program;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Format {
    Dot,
    Mermaid,
}

#[derive(Debug, Args)]
pub(crate) struct GraphArgs {
    /// The loop or flow file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// The picture language.
    #[arg(long, value_enum, default_value = "dot")]
    pub(crate) format: Format,
}

pub(crate) fn graph(cli: &Cli, printer: &Printer, args: &GraphArgs) -> Result<Exit, CliError> {
    let program = super::compile(cli, printer, &args.file)?;
    let text = match args.format {
        Format::Dot => dot(&program),
        Format::Mermaid => mermaid(&program),
    };
    printer.out(&text);
    Ok(Exit::Ok)
}

/// A dot string literal. A line break becomes dot's `\n` escape (one backslash), which Graphviz
/// draws as a new line; a backslash itself is doubled, so it prints as itself.
fn quote(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("\"{escaped}\"")
}

fn label(p: &Program, i: usize) -> String {
    let t = &p.tasks[i];
    let gates: Vec<&str> = t.gates.iter().map(|g| g.name.as_str()).collect();
    if gates.is_empty() {
        t.name.clone()
    } else {
        format!("{}\ngates: {}", t.name, gates.join(", "))
    }
}

/// Graphviz: one node per task, an edge from each dependency to its dependent.
pub(crate) fn dot(p: &Program) -> String {
    let mut out = format!(
        "digraph {} {{\n  rankdir=LR;\n  node [shape=box];\n",
        quote(&p.name)
    );
    for (i, t) in p.tasks.iter().enumerate() {
        out.push_str(&format!(
            "  {} [label={}];\n",
            quote(&t.name),
            quote(&label(p, i))
        ));
    }
    for t in &p.tasks {
        for dep in &t.after {
            out.push_str(&format!("  {} -> {};\n", quote(dep), quote(&t.name)));
        }
    }
    out.push_str("}\n");
    out
}

/// Mermaid: node ids are positional (`t0`), since task names may hold `[` and `/`.
pub(crate) fn mermaid(p: &Program) -> String {
    let mut out = String::from("flowchart LR\n");
    let id = |name: &str| {
        p.tasks
            .iter()
            .position(|t| t.name == name)
            .map(|i| format!("t{i}"))
    };
    for (i, t) in p.tasks.iter().enumerate() {
        let text = t.name.replace('"', "#quot;");
        out.push_str(&format!("  t{i}[\"{text}\"]\n"));
    }
    for t in &p.tasks {
        for dep in &t.after {
            if let (Some(a), Some(b)) = (id(dep), id(&t.name)) {
                out.push_str(&format!("  {a} --> {b}\n"));
            }
        }
    }
    out
}
