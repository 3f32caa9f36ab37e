//! A repository in; its ledger opened for reading and the run a `RUN` argument names out, for
//! `mvk runs`, `status`, `log` and `stats`, with their shared text formats (money, durations,
//! clock times) and JSON printing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::printer::Printer;
use super::{Cli, CliError};
use crate::ledger::read::{ReadError, Reader, RunRow};

/// A repository's ledger, open for reading.
pub(crate) struct Ledgered {
    /// The repository's `.mvk/` directory.
    pub(crate) mvk_dir: PathBuf,
    pub(crate) reader: Reader,
}

/// Opens the ledger of the repository `--repo` names (or the current directory's).
pub(crate) fn open(cli: &Cli) -> Result<Ledgered, CliError> {
    let mvk_dir = mvk_dir(cli)?;
    let reader = Reader::open(&mvk_dir.join("ledger.db")).map_err(read_error)?;
    Ok(Ledgered { mvk_dir, reader })
}

/// The `.mvk/` directory of the repository `--repo` names (or the current directory's),
/// which may not exist yet.
pub(crate) fn mvk_dir(cli: &Cli) -> Result<PathBuf, CliError> {
    let start = cli.repo.clone().unwrap_or_else(|| PathBuf::from("."));
    let repo = git2::Repository::discover(&start).map_err(|e| CliError::Usage {
        message: format!(
            "`{}` is not inside a git repository: {}",
            start.display(),
            e.message()
        ),
        hint: Some("run mvk in the repository, or name it with `--repo DIR`".into()),
    })?;
    // `.mvk/` belongs to the main checkout, also when run from a linked worktree.
    let root = git2::Repository::open(repo.commondir())
        .ok()
        .and_then(|m| m.workdir().map(Path::to_path_buf))
        .or_else(|| repo.workdir().map(Path::to_path_buf))
        .ok_or_else(|| CliError::Usage {
            message: "a bare repository has no mvk runs".into(),
            hint: None,
        })?;
    Ok(root.join(".mvk"))
}

/// The run `given` names (a unique prefix of its id), or the latest run.
pub(crate) fn find_run(ledger: &Ledgered, given: Option<&str>) -> Result<RunRow, CliError> {
    ledger.reader.find_run(given).map_err(read_error)
}

/// The run `given` names (a unique prefix of its id), or the latest run, in the ledger of the
/// repository `cli` points at.
pub(crate) fn run_named(cli: &Cli, given: Option<&str>) -> Result<RunRow, CliError> {
    find_run(&open(cli)?, given)
}

/// A reading error as the CLI reports it: a missing ledger or run is a usage error (64).
pub(crate) fn read_error(e: ReadError) -> CliError {
    let usage = |message: String, hint: String| CliError::Usage {
        message,
        hint: Some(hint),
    };
    match &e {
        ReadError::NoLedger { .. } | ReadError::NoRuns => usage(
            "no runs in this repository yet".into(),
            "run a loop first: `mvk apply FILE`".into(),
        ),
        ReadError::NoSuchRun { candidates, .. } => usage(
            e.to_string(),
            if candidates.is_empty() {
                "the ledger has no runs".into()
            } else {
                format!("recent runs: {}", candidates.join(", "))
            },
        ),
        ReadError::Ambiguous { candidates, .. } => usage(
            e.to_string(),
            format!("say more of the id: {}", candidates.join(", ")),
        ),
        ReadError::Ledger(inner) => internal(inner),
    }
}

/// An error reading the ledger (or encoding what was read): mvk's own failure (70).
pub(crate) fn internal(e: &dyn std::error::Error) -> CliError {
    CliError::Internal {
        message: crate::run::error_chain(e),
    }
}

/// Prints `value` as one pretty JSON document.
pub(crate) fn print_json(printer: &Printer, value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| internal(&e))?;
    printer.out(&text);
    Ok(())
}

/// `$1.20`.
pub(crate) fn usd(micros: u64) -> String {
    crate::plan::format_usd(micros)
}

/// A duration in milliseconds to the second: `1m5s`, `0s`.
pub(crate) fn duration(ms: i64) -> String {
    let secs = u64::try_from(ms / 1000).unwrap_or(0);
    crate::plan::format_duration(Duration::from_secs(secs))
}

/// `HH:MM:SS` (UTC) of a time in ms since the epoch.
pub(crate) fn clock(ms: i64) -> String {
    let t = crate::ledger::read::rfc3339(ms);
    t.get(11..19).unwrap_or(&t).to_string()
}

/// `s` when `n` is not 1.
pub(crate) fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The repository's ledger, which must exist.
pub(crate) fn open_ledger(repo_root: &Path) -> Result<crate::ledger::Ledger, CliError> {
    let path = repo_root.join(".mvk").join("ledger.db");
    if !path.exists() {
        return Err(CliError::Usage {
            message: format!(
                "there are no runs in `{}` yet (no `.mvk/ledger.db`)",
                repo_root.display()
            ),
            hint: Some("start one with `mvk apply FILE`".into()),
        });
    }
    crate::ledger::Ledger::open(&path).map_err(|e| CliError::Internal {
        message: super::running::chain(&e),
    })
}

/// The checkpoints no one has answered yet.
pub(crate) fn undecided(
    rows: &[crate::ledger::CheckpointRow],
) -> Vec<&crate::ledger::CheckpointRow> {
    rows.iter().filter(|c| c.decision.is_none()).collect()
}
