//! `mvk report [RUN] --html [--out FILE]`: a run of the repository's ledger in (the latest by
//! default); one self-contained HTML page of it out (`report::html`), on standard output or in
//! FILE.

use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::reading;
use super::{Cli, CliError, Exit};

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// The run: its id or a unique prefix of it (default: the latest run).
    #[arg(value_name = "RUN")]
    pub(crate) run: Option<String>,
    /// Write the report as one self-contained HTML page (inline CSS, no script, no network);
    /// the only format so far.
    #[arg(long, required = true)]
    pub(crate) html: bool,
    /// Write the page to FILE instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

pub(crate) fn report(cli: &Cli, printer: &Printer, args: &ReportArgs) -> Result<Exit, CliError> {
    let ledger = reading::open(cli)?;
    let run = reading::find_run(&ledger, args.run.as_deref())?;
    let page = crate::report::html::html(&ledger.reader, &ledger.mvk_dir, &run)
        .map_err(|e| reading::internal(&e))?;
    match &args.out {
        Some(file) => {
            std::fs::write(file, page).map_err(|e| CliError::Internal {
                message: format!("cannot write the report to `{}`: {e}", file.display()),
            })?;
            printer.status(&format!(
                "wrote the report of run `{}` to `{}`",
                run.id,
                file.display()
            ));
        }
        None => printer.out(&page),
    }
    Ok(Exit::Ok)
}
