//! `mvk init [DIR]`: a project directory in; a starter loop for the project it holds, an agent
//! definition and the maker's prompt template written under `DIR/loops/` out. Existing files
//! are never overwritten.

use std::path::PathBuf;

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::scaffold::{self, ProjectKind};

#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// The project's directory (default: `--repo`, else the current directory); made when it
    /// does not exist.
    #[arg(value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
}

pub(crate) fn init(cli: &Cli, printer: &Printer, args: &InitArgs) -> Result<Exit, CliError> {
    let dir = args
        .dir
        .clone()
        .or_else(|| cli.repo.clone())
        .unwrap_or_else(|| PathBuf::from("."));
    init_in(printer, &dir)
}

/// The project's files under `dir`, relative, `/`-separated: what its starter seal may cover.
/// Build output, dependencies and version control are left out, and the walk is bounded (a
/// huge tree gets the seal of what was seen).
fn project_files(dir: &std::path::Path) -> Vec<String> {
    // In a repository, what git tracks: what an attempt's worktree holds, and what the seal's
    // check (`mvk::matches-nothing`) is made against; an ignored `.tox/…/conftest.py` is neither.
    if git2::Repository::open(dir).is_ok_and(|r| !r.is_bare())
        && let Ok(files) = crate::resolve::repo::list_files(dir)
    {
        return files;
    }
    const SKIP: &[&str] = &[
        ".git",
        ".mvk",
        "target",
        "node_modules",
        ".venv",
        "venv",
        "dist",
    ];
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_entry(|e| {
            e.depth() == 0
                || !(e.file_type().is_dir()
                    && e.file_name().to_str().is_some_and(|n| SKIP.contains(&n)))
        })
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .take(100_000)
        .filter_map(|e| {
            let rel = e.path().strip_prefix(dir).ok()?;
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            Some(parts.join("/"))
        })
        .collect()
}

fn init_in(printer: &Printer, dir: &std::path::Path) -> Result<Exit, CliError> {
    if dir.exists() && !dir.is_dir() {
        return Err(CliError::Usage {
            message: format!("`{}` is not a directory", dir.display()),
            hint: Some("name the project's directory: `mvk init DIR`".into()),
        });
    }
    let kind = ProjectKind::detect(dir);
    let present = project_files(dir);
    let covers = |pattern: &str| {
        crate::glob::PathSet::new(&[pattern.to_string()])
            .is_ok_and(|set| present.iter().any(|f| set.covers(f)))
    };
    let files = scaffold::files_for(kind, &covers);
    let existing: Vec<String> = files
        .iter()
        .filter(|(path, _)| dir.join(path).symlink_metadata().is_ok())
        .map(|(path, _)| format!("`{path}`"))
        .collect();
    if !existing.is_empty() {
        return Err(CliError::Usage {
            message: format!(
                "{} already exist{} in `{}`; nothing was written",
                existing.join(", "),
                if existing.len() == 1 { "s" } else { "" },
                dir.display()
            ),
            hint: Some("`mvk init` only writes new files: move those away, or edit them".into()),
        });
    }
    printer.status(&format!("project: {}", kind.describe()));
    let mut written: Vec<PathBuf> = Vec::new();
    for (path, text) in &files {
        let full = dir.join(path);
        let result = (|| -> std::io::Result<()> {
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // `create_new`: a file that appeared since the check above is still not overwritten.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&full)?;
            written.push(full.clone());
            std::io::Write::write_all(&mut f, text.as_bytes())
        })();
        if let Err(e) = result {
            // All or nothing: take back what this run wrote, so a second `mvk init` can succeed.
            for w in &written {
                let _ = std::fs::remove_file(w);
            }
            return Err(CliError::Internal {
                message: format!("cannot write `{}`: {e}; nothing was kept", full.display()),
            });
        }
        printer.out(&format!("wrote {}", full.display()));
    }
    let shown = |p: &str| dir.join(p).display().to_string();
    printer.status(&format!(
        "next: edit `{}` (the agent's command), commit the loop files (`git add loops && git commit`: attempts run from committed state), then `mvk check {}` and `mvk apply {}`",
        shown(scaffold::AGENTS_FILE),
        shown(scaffold::LOOP_FILE),
        shown(scaffold::LOOP_FILE)
    ));
    Ok(Exit::Ok)
}
