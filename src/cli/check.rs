//! `mvk check FILE…`: compile each file, print every diagnostic, change nothing.

use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::ir::ProgramKind;
use crate::source::display_path;

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Loop, flow or library files to check.
    #[arg(required = true, value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
}

pub(crate) fn check(cli: &Cli, printer: &Printer, args: &CheckArgs) -> Result<Exit, CliError> {
    let mut worst = Exit::Ok;
    for (i, file) in args.files.iter().enumerate() {
        let compiled = super::compile_quiet(cli, file);
        printer.diagnostics(&compiled.diags, &compiled.sources);
        let name = display_path(file);
        match &compiled.program {
            Some(p) => {
                let what = match p.kind {
                    ProgramKind::Loop => format!("loop `{}`", p.name),
                    ProgramKind::Flow => format!(
                        "flow `{}`, {} task{}",
                        p.name,
                        p.tasks.len(),
                        if p.tasks.len() == 1 { "" } else { "s" }
                    ),
                    ProgramKind::Library => "definitions only".to_string(),
                };
                let warnings = compiled.diags.warning_count();
                let w = if warnings > 0 {
                    format!(
                        ", {warnings} warning{}",
                        if warnings == 1 { "" } else { "s" }
                    )
                } else {
                    String::new()
                };
                printer.status(&format!("ok: {name} ({what}{w})"));
            }
            None => {
                let failure = super::failure(file, &compiled.diags);
                worst = worst.max(failure.exit());
                let n = compiled.diags.error_count();
                printer.error(&format!(
                    "{name}: {n} error{}",
                    if n == 1 { "" } else { "s" }
                ));
                if let Some(hint) = failure.hint() {
                    printer.hint(hint);
                }
            }
        }
        // The last file's program is left to the process's exit, which frees it at once,
        // where freeing a large flow's task by task costs a twentieth of the command's time.
        // Earlier ones are freed, so that checking many files holds one program at a time.
        if i + 1 == args.files.len() {
            std::mem::forget(compiled);
        }
    }
    Ok(worst)
}
