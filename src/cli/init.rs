//! `mvk init [DIR]`: a project directory in; a starter loop for the project it holds, an agent
//! definition and the maker's prompt template written under `DIR/loops/` out. Existing files
//! are never overwritten.

use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::scaffold::{self, ProjectKind};

#[derive(Debug, Args)]
pub struct InitArgs {
    /// The project's directory (default: the current directory); made when it does not exist.
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
}

pub fn init(_cli: &Cli, printer: &Printer, args: &InitArgs) -> Result<Exit, CliError> {
    if args.dir.exists() && !args.dir.is_dir() {
        return Err(CliError::Usage {
            message: format!("`{}` is not a directory", args.dir.display()),
            hint: Some("name the project's directory: `mvk init DIR`".into()),
        });
    }
    let kind = ProjectKind::detect(&args.dir);
    let files = scaffold::files(kind);
    let existing: Vec<String> = files
        .iter()
        .filter(|(path, _)| args.dir.join(path).symlink_metadata().is_ok())
        .map(|(path, _)| format!("`{path}`"))
        .collect();
    if !existing.is_empty() {
        return Err(CliError::Usage {
            message: format!(
                "{} already exist{} in `{}`; nothing was written",
                existing.join(", "),
                if existing.len() == 1 { "s" } else { "" },
                args.dir.display()
            ),
            hint: Some("`mvk init` only writes new files: move those away, or edit them".into()),
        });
    }
    printer.status(&format!("project: {}", kind.describe()));
    for (path, text) in &files {
        let full = args.dir.join(path);
        let io = |doing: &str, e: std::io::Error| CliError::Internal {
            message: format!("cannot {doing} `{}`: {e}", full.display()),
        };
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io("create the directory of", e))?;
        }
        // `create_new`: a file that appeared since the check above is still not overwritten.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&full)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| io("write", e))?;
        printer.out(&format!("wrote {path}"));
    }
    printer.status(&format!(
        "next: edit `{}` (the agent's command), then `mvk check {}` and `mvk apply {}`",
        scaffold::AGENTS_FILE,
        scaffold::LOOP_FILE,
        scaffold::LOOP_FILE
    ));
    Ok(Exit::Ok)
}
