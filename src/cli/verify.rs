//! `mvk verify --base REV [--head REV] [--task NAME] [--json] FILE`: a loop file and two
//! revisions in; the oracle check alone out: did the change touch a sealed path? Exit 0
//! untouched, 1 changed, 2 unknown (the seal cannot certify it; never a pass).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::run::git::verify::{self, Verdict, Verification, VerifyError};

#[derive(Debug, Args)]
pub(crate) struct VerifyArgs {
    /// The loop or flow file whose seal is the oracle.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// The revision the change starts from (a commit, branch or tag).
    #[arg(long, value_name = "REV")]
    pub(crate) base: String,
    /// The revision the change ends at (default: the checkout, uncommitted work included).
    #[arg(long, value_name = "REV")]
    pub(crate) head: Option<String>,
    /// Check only this task's seal (default: every task's).
    #[arg(long, value_name = "NAME")]
    pub(crate) task: Option<String>,
    /// Print one JSON document (schema `mvk.verify.v1`) instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn verify(cli: &Cli, printer: &Printer, args: &VerifyArgs) -> Result<Exit, CliError> {
    let program = super::compile(cli, printer, &args.file)?;
    let v = check(
        cli,
        &program,
        &args.file,
        (&args.base, args.head.as_deref()),
        args.task.as_deref(),
    )?;
    if args.json {
        super::reading::print_json(printer, &v)?;
    } else {
        printer.out(&text(&v));
    }
    Ok(Exit::from_code(v.verdict.exit_code()))
}

/// The oracle check of a compiled program in the checkout of `file` (or `--repo`): a linked
/// worktree's own (where an agent's change is), not the main checkout's.
pub(crate) fn check(
    cli: &Cli,
    program: &crate::ir::Program,
    file: &std::path::Path,
    (base, head): (&str, Option<&str>),
    task: Option<&str>,
) -> Result<Verification, CliError> {
    let repo_root = super::repo::checkout(cli, file)?;
    let shown = super::repo::shown_file(file, &repo_root);
    verify::verify(&repo_root, program, &shown, task, base, head).map_err(|e| match e {
        VerifyError::Revision { .. } => CliError::Usage {
            message: e.to_string(),
            hint: Some("name a commit, branch or tag, e.g. `--base main`".into()),
        },
        VerifyError::NoSuchTask { .. } => CliError::Usage {
            message: e.to_string(),
            hint: None,
        },
        other => CliError::Internal {
            message: super::running::chain(&other),
        },
    })
}

fn text(v: &Verification) -> String {
    let mut out = String::new();
    let head = if v.working_tree {
        format!("{} and the checkout's uncommitted work", short(&v.head))
    } else {
        short(&v.head).to_string()
    };
    for t in &v.tasks {
        let _ = writeln!(
            out,
            "{} {}: {}: {}",
            match t.verdict {
                Verdict::Untouched => "✓",
                Verdict::Changed => "✗",
                Verdict::Unknown => "?",
            },
            t.task,
            name(t.verdict),
            t.reason
        );
        if t.verdict == Verdict::Changed {
            for b in &t.breaches {
                let _ = writeln!(out, "  {b}");
            }
        }
    }
    let _ = write!(
        out,
        "seal {} from {} to {head}",
        name(v.verdict),
        short(&v.base)
    );
    out
}

fn name(v: Verdict) -> &'static str {
    match v {
        Verdict::Untouched => "untouched",
        Verdict::Changed => "changed",
        Verdict::Unknown => "unknown",
    }
}

fn short(id: &str) -> &str {
    id.get(..10).unwrap_or(id)
}
