//! `mvk man [--out DIR]`: the clap definition in; manual pages in roff, rendered by
//! `clap_mangen`, out: one page with a section per command on standard output, or one page per
//! command and subcommand (`mvk.1`, `mvk-apply.1`, `mvk-lessons-pin.1`, …) written into DIR.

use std::path::PathBuf;

use clap::Args;
use clap_mangen::Man;

use super::printer::Printer;
use super::reference::{built, visible};
use super::{Cli, CliError, Exit};

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write one page per command into DIR (made when missing) instead of one page on standard
    /// output.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

pub(crate) fn man(_cli: &Cli, printer: &Printer, args: &ManArgs) -> Result<Exit, CliError> {
    let cmd = built();
    match &args.out {
        Some(dir) => {
            let io = |e: std::io::Error| CliError::Internal {
                message: format!("cannot write manual pages into `{}`: {e}", dir.display()),
            };
            std::fs::create_dir_all(dir).map_err(io)?;
            for page in pages(&cmd) {
                let path = Man::new(page).generate_to(dir).map_err(io)?;
                printer.out(&format!("wrote {}", path.display()));
            }
        }
        None => printer.out(&one_page(&cmd).map_err(|e| CliError::Internal {
            message: format!("cannot render the manual page: {e}"),
        })?),
    }
    Ok(Exit::Ok)
}

/// CMD and every command under it, for a page each (`mvk-lessons-pin.1`, which the page of
/// `mvk lessons` names).
fn pages(cmd: &clap::Command) -> Vec<clap::Command> {
    let mut all = vec![cmd.clone()];
    for sub in visible(cmd) {
        all.extend(pages(sub));
    }
    all
}

/// `mvk.1`, followed by a section per command (`MVK APPLY`) with its synopsis, description,
/// options and subcommands as subsections.
fn one_page(cmd: &clap::Command) -> Result<String, std::io::Error> {
    let mut out = Vec::new();
    Man::new(cmd.clone()).render(&mut out)?;
    for sub in visible(cmd) {
        let title = format!("MVK {}", sub.get_name().to_uppercase());
        out.extend_from_slice(format!(".SH \"{title}\"\n").as_bytes());
        let man = Man::new(sub.clone());
        let mut section = Vec::new();
        man.render_synopsis_section(&mut section)?;
        man.render_description_section(&mut section)?;
        if sub.get_arguments().any(|a| !a.is_hide_set()) {
            man.render_options_section(&mut section)?;
        }
        // `mvk lessons forget` and `pin`: named with their help under their command.
        if visible(sub).next().is_some() {
            man.render_subcommands_section(&mut section)?;
        }
        for line in String::from_utf8_lossy(&section).lines() {
            // The command's own headings become subsections of its section.
            let line = line
                .strip_prefix(".SH ")
                .map_or_else(|| line.to_string(), |heading| format!(".SS {heading}"));
            out.extend_from_slice(line.as_bytes());
            out.push(b'\n');
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}
