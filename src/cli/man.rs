//! `mvk man [--out DIR]`: the clap definition in; manual pages in roff, rendered by
//! `clap_mangen`, out: one page with a section per command on standard output, or one page per
//! command (`mvk.1`, `mvk-apply.1`, …) written into DIR.

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
            let mut pages = vec![cmd.clone()];
            pages.extend(visible(&cmd).cloned());
            for page in pages {
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

/// `mvk.1`, followed by a section per command (`MVK APPLY`) with its synopsis, description and
/// options as subsections.
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
