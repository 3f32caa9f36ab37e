//! `mvk lock [PATH…] [--update]`: compile every loop file of each directory named (a file names
//! its own) and write that directory's `mvk.lock` with every import they reach.
//!
//! Without `--update` the lock only grows: imports it lacks are added, imports that no longer
//! resolve to what it holds (a local file edited, a tag moved) are drift, reported as
//! `mvk::lock-drift`, and nothing is written (exit 5). With `--update` every rev is fetched again
//! and the lock is rewritten with what was found. Entries no loop file reaches are dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::resolve::lock::{self, LockFile, Mode};
use crate::source::display_path;

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// Loop files or directories; each directory's `*.kdl` files are locked together (default:
    /// the current directory).
    #[arg(value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
    /// Fetch every git import's rev again and accept whatever changed.
    #[arg(long)]
    pub(crate) update: bool,
}

pub(crate) fn lock(cli: &Cli, printer: &Printer, args: &LockArgs) -> Result<Exit, CliError> {
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for path in &paths {
        let dir = if path.is_dir() {
            path.clone()
        } else if path.is_file() {
            path.parent()
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
        } else {
            return Err(CliError::Usage {
                message: format!("`{}` is neither a file nor a directory", path.display()),
                hint: Some("name loop files or the directory that holds them".into()),
            });
        };
        let dir = crate::resolve::normalize(&dir);
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let mode = if args.update {
        Mode::Update
    } else {
        Mode::Refresh
    };
    let mut worst = Exit::Ok;
    for dir in &dirs {
        worst = worst.max(lock_dir(cli, printer, dir, mode)?);
    }
    Ok(worst)
}

/// Locks one directory; returns its exit code.
fn lock_dir(cli: &Cli, printer: &Printer, dir: &Path, mode: Mode) -> Result<Exit, CliError> {
    let files = loop_files(dir)?;
    let lock_path = dir.join(lock::FILE_NAME);
    let shown = display_path(&lock_path);
    if files.is_empty() {
        return Err(CliError::Usage {
            message: format!("`{}` holds no `.kdl` files to lock", display_path(dir)),
            hint: Some("run `mvk lock` in the directory of the loop files".into()),
        });
    }
    let mut pins = BTreeMap::new();
    let mut worst = Exit::Ok;
    for file in &files {
        let compiled = super::compile_with(cli, file, mode);
        printer.diagnostics(&compiled.diags, &compiled.sources);
        if compiled.program.is_none() {
            let failure = super::failure(file, &compiled.diags);
            worst = worst.max(failure.exit());
            printer.error(&failure.to_string());
            continue;
        }
        pins.extend(compiled.pins);
    }
    if worst != Exit::Ok {
        printer.error(&format!("`{shown}` was not written"));
        if worst == Exit::Drift {
            printer.hint("run `mvk lock --update` to accept the new versions");
        }
        return Ok(worst);
    }
    let old = lock::read(&lock_path).map_err(|e| CliError::Internal {
        message: e.to_string(),
    })?;
    let new = LockFile::new(pins);
    let old_imports = old.map(|l| l.imports).unwrap_or_default();
    if old_imports == new.imports && lock_path.is_file() {
        printer.status(&format!(
            "{shown} is up to date ({} imports)",
            new.imports.len()
        ));
        return Ok(Exit::Ok);
    }
    let added = new
        .imports
        .keys()
        .filter(|k| !old_imports.contains_key(*k))
        .count();
    let changed = new
        .imports
        .iter()
        .filter(|(k, e)| old_imports.get(*k).is_some_and(|o| o != *e))
        .count();
    let removed = old_imports
        .keys()
        .filter(|k| !new.imports.contains_key(*k))
        .count();
    lock::write(&lock_path, &new).map_err(|e| CliError::Internal {
        message: e.to_string(),
    })?;
    printer.status(&format!(
        "wrote {shown}: {} imports ({added} added, {changed} updated, {removed} removed)",
        new.imports.len()
    ));
    Ok(Exit::Ok)
}

/// The `*.kdl` files directly in `dir`, sorted.
fn loop_files(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let entries = std::fs::read_dir(dir).map_err(|e| CliError::Usage {
        message: format!("cannot list `{}`: {e}", display_path(dir)),
        hint: None,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "kdl"))
        .collect();
    files.sort();
    Ok(files)
}
