//! Everything mvk prints goes through here: quiet and verbose levels, colour only on a terminal
//! and never with `NO_COLOR`, diagnostics rendered by miette.

use std::io::{IsTerminal, Write};

use crate::diag::{Diagnostics, Renderer};
use crate::source::Sources;

pub(crate) struct Printer {
    quiet: bool,
    verbose: bool,
    color: bool,
}

impl Printer {
    pub(crate) fn new(quiet: bool, verbose: bool) -> Printer {
        let color = std::io::stderr().is_terminal()
            && std::env::var_os(crate::env::NO_COLOR).is_none_or(|v| v.is_empty());
        Printer {
            quiet,
            verbose,
            color,
        }
    }

    pub(crate) fn quiet(&self) -> bool {
        self.quiet
    }

    pub(crate) fn verbose(&self) -> bool {
        self.verbose
    }

    /// The result of a command, on standard output (always printed, even with `--quiet`).
    pub(crate) fn out(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        // A closed pipe (`mvk plan | head`) is not an error worth reporting.
        let _ = out.write_all(text.as_bytes());
        if !text.ends_with('\n') {
            let _ = out.write_all(b"\n");
        }
    }

    /// A JSON document on standard output, pretty-printed, then a newline. It is written as it
    /// is encoded, so that a document of 100,000 tasks is never held whole as text. A failed
    /// write is dropped as in [`Printer::out`]; Err is a value that cannot be encoded, which
    /// may come after part of the document was written.
    pub(crate) fn out_json<T: serde::Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<(), serde_json::Error> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if let Err(e) = serde_json::to_writer_pretty(&mut out, value)
            && !e.is_io()
        {
            return Err(e);
        }
        let _ = out.write_all(b"\n");
        let _ = out.flush();
        Ok(())
    }

    /// A progress or status line on standard error; silent with `--quiet`.
    pub(crate) fn status(&self, text: &str) {
        if !self.quiet {
            err_line(text);
        }
    }

    /// Something the user must know even when it does not stop the command; shown with `--quiet` too.
    pub(crate) fn warn(&self, text: &str) {
        err_line(&format!("warning: {text}"));
    }

    pub(crate) fn error(&self, text: &str) {
        err_line(&format!("error: {text}"));
    }

    pub(crate) fn hint(&self, text: &str) {
        err_line(&format!("  hint: {text}"));
    }

    /// Renders diagnostics on standard error; warnings are hidden with `--quiet`.
    pub(crate) fn diagnostics(&self, diags: &Diagnostics, sources: &Sources) {
        let width = std::env::var(crate::env::COLUMNS)
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(100usize);
        let renderer = if self.color {
            Renderer::fancy(width)
        } else {
            Renderer::plain(width)
        };
        let text = renderer.render_where(diags, sources, |d| !self.quiet || d.is_error());
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// One line on standard error. `eprintln!` panics when the write fails, and standard error may
/// be a pipe whose reader is gone (the MCP server that started `mvk attempt`, a closed
/// terminal): a line nobody can read is dropped, the command goes on and records its run.
pub(crate) fn err_line(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// Prints a drift report: one diagnostic per changed field (its new and old location), then
/// what it invalidates downstream.
pub(crate) fn print_drift(printer: &Printer, drift: &crate::drift::DriftReport) {
    printer.diagnostics(&drift.diagnostics(), &drift.sources);
    for i in &drift.invalidated {
        printer.out(&format!(
            "invalidated: task `{}` starts after {}, which changed",
            i.task,
            i.because
                .iter()
                .map(|b| format!("`{b}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}
