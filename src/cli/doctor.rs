//! `mvk doctor [FILE]`: can this machine run FILE's agents and gates (without FILE: the
//! stdlib's agents)? One line each, a fix for each problem; exit 1 when a run would fail. A note
//! counts the worktree pools of repositories that are gone, which `mvk gc --all` removes.

use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::doctor::{self, Finding, Level};

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// A loop or flow file; without it, every agent of the standard library is checked.
    #[arg(value_name = "FILE")]
    pub(crate) file: Option<PathBuf>,
    /// Print one JSON document: a list of findings (subject, level, detail, fix).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn doctor(cli: &Cli, printer: &Printer, args: &DoctorArgs) -> Result<Exit, CliError> {
    let findings = match &args.file {
        Some(file) => {
            let program = super::compile(cli, printer, file)?;
            let root = super::repo::repository(cli, file).or_else(|_| {
                std::env::current_dir().map_err(|e| CliError::Usage {
                    message: format!("cannot read the current directory: {e}"),
                    hint: None,
                })
            })?;
            doctor::check_program(&program, &root)
        }
        None => {
            let root = std::env::current_dir().unwrap_or_default();
            crate::resolve::stdlib_agents()
                .iter()
                .map(|a| doctor::check_agent(a, a.sandbox.as_ref(), true, &root))
                .collect()
        }
    };
    let mut findings = findings;
    findings.extend(doctor::orphan_pools(&crate::run::worktree::Pool::home()));
    if args.json {
        let text = serde_json::to_string_pretty(&findings).map_err(|e| CliError::Internal {
            message: format!("cannot encode the findings: {e}"),
        })?;
        printer.out(&text);
    } else {
        print(printer, &findings);
    }
    let failed = findings.iter().any(|f| f.level == Level::Fail);
    Ok(if failed { Exit::Rejected } else { Exit::Ok })
}

/// One line per finding (`✓`, `!`, `✗`), then its fix.
pub(crate) fn print(printer: &Printer, findings: &[Finding]) {
    for f in findings {
        let mark = match f.level {
            Level::Ok => "✓",
            Level::Note => "·",
            Level::Warn => "!",
            Level::Fail => "✗",
        };
        printer.out(&format!("{mark} {}: {}", f.subject, f.detail));
        if let Some(fix) = &f.fix
            && f.level != Level::Ok
        {
            printer.out(&format!("    fix: {fix}"));
        }
    }
}
