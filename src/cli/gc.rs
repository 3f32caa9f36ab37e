//! `mvk gc [--all] [--dry-run]`: the repository's pool and attempt branches in; out go the worktree
//! slots no process holds, the `mvk/<run>/…` branches of runs that are no longer live, the
//! `mvk-scratch/…` branches a slot build of an earlier mvk left when it died in it (never one
//! a build is using: see `Pool::gc_scratch`), and the output `mvk mcp` kept of them.
//!
//! A run's branches go once the ledger records it as finished, unless it finished waiting for a
//! person (the accepted work may be on such a branch only) or it was one attempt that passed
//! (`mvk attempt`, never landed). The output files of commands `mvk mcp` started for runs that
//! are over go too, and those of a command that named no run once they are older than the time
//! `mvk mcp` gives a command to name one. A run still marked running — alive,
//! or dead and resumable — keeps its branches. Branches of runs the ledger does not know are left alone: mvk did not
//! make them, or their record is gone, and deleting work on a guess is worse than keeping it.
//!
//! With `--all`, the pools of every repository are looked at too (`run::worktree::orphans`): a
//! pool whose repository is gone goes whole, unless a live process holds one of its slots.

use std::path::Path;

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};
use crate::ledger::Ledger;
use crate::run::worktree::Pool;
use crate::run::worktree::orphans::{self, Owner, Removal};

#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Also remove the worktree pools of repositories that no longer exist (under
    /// `$MVK_WORKTREE_ROOT` or `~/.cache/mvk/worktrees`); run anywhere, in a repository or not.
    #[arg(long)]
    pub(crate) all: bool,
}

pub(crate) fn gc(cli: &Cli, printer: &Printer, args: &GcArgs) -> Result<Exit, CliError> {
    let start = cli
        .repo
        .clone()
        .unwrap_or_else(|| Path::new(".").to_path_buf());
    // Outside a repository, `--all` has the other pools to see to.
    if args.all && cli.repo.is_none() && git2::Repository::discover(&start).is_err() {
        return orphan_pools(printer, args.dry_run);
    }
    gc_repository(printer, args, &start)?;
    if args.all {
        return orphan_pools(printer, args.dry_run);
    }
    Ok(Exit::Ok)
}

/// The pools whose repository is gone, removed (or with `dry_run` named), with their sizes.
fn orphan_pools(printer: &Printer, dry_run: bool) -> Result<Exit, CliError> {
    let home = Pool::home();
    let pools = orphans::survey(&home).map_err(|e| CliError::Internal {
        message: format!("cannot list the worktree pools: {e}"),
    })?;
    let (mut removed, mut bytes, mut unknown) = (0usize, 0u64, 0usize);
    for pool in &pools {
        let repo = match &pool.owner {
            Owner::Gone(repo) => repo,
            Owner::Present(_) => continue,
            Owner::Unknown => {
                unknown += 1;
                continue;
            }
        };
        let what = format!(
            "pool {} of {} ({})",
            pool.path.display(),
            repo.display(),
            crate::report::human_bytes(pool.bytes)
        );
        if dry_run {
            printer.out(&format!("would remove {what}"));
            removed += 1;
            bytes += pool.bytes;
            continue;
        }
        match orphans::remove(pool) {
            Ok(Removal::Removed) => {
                printer.status(&format!("removed {what}"));
                removed += 1;
                bytes += pool.bytes;
            }
            Ok(Removal::InUse) => printer.status(&format!("kept {what}: a live process holds it")),
            Ok(Removal::Returned) => {
                printer.status(&format!("kept {what}: its repository is back"));
            }
            Err(e) => printer.status(&format!("kept {what}: {e}")),
        }
    }
    if unknown > 0 {
        printer.status(&format!(
            "kept {unknown} pool(s) under {} that name no repository mvk can find (made by an earlier mvk and emptied)",
            home.display()
        ));
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    printer.out(&format!(
        "{verb} {removed} worktree pool(s) of repositories that are gone ({})",
        crate::report::human_bytes(bytes)
    ));
    Ok(Exit::Ok)
}

/// The repository's own part: its idle slots, its runs' branches and `mvk mcp`'s output.
fn gc_repository(printer: &Printer, args: &GcArgs, start: &Path) -> Result<(), CliError> {
    let internal = |what: &str, e: &dyn std::fmt::Display| CliError::Internal {
        message: format!("cannot {what}: {e}"),
    };
    let repo = git2::Repository::discover(start).map_err(|e| CliError::Usage {
        message: format!(
            "`{}` is not inside a git repository: {}",
            start.display(),
            e.message()
        ),
        hint: Some("run `mvk gc` in the repository, or name it with `--repo DIR`; `mvk gc --all` runs anywhere".into()),
    })?;
    let main = git2::Repository::open(repo.commondir())
        .map_err(|e| internal("open the repository", &e))?;
    let Some(root) = main.workdir().map(Path::to_path_buf) else {
        return Err(CliError::Usage {
            message: "a bare repository has no mvk runs".into(),
            hint: None,
        });
    };
    let ledger_path = root.join(".mvk").join("ledger.db");
    let ledger = if ledger_path.exists() {
        Some(Ledger::open(&ledger_path).map_err(|e| internal("open the ledger", &e))?)
    } else {
        None
    };

    // Whether a run is over: the ledger has it finished, and not waiting for a person (the
    // accepted work may be on its branch only), nor a single attempt that passed (`mvk attempt`:
    // its change is on its branch only, never landed). A run that is running (alive, or dead and
    // resumable) or paused is not over; nor is one the ledger does not know.
    let over = |run: &str| -> Result<bool, CliError> {
        let Some(ledger) = &ledger else {
            return Ok(false);
        };
        let status = ledger
            .run_status(run)
            .map_err(|e| internal("read the ledger", &e))?;
        Ok(status.is_some_and(|s| {
            s.state == "finished" && !matches!(s.outcome.as_deref(), Some("human" | "skipped"))
        }))
    };

    // Branches first: a slot that holds a branch must be released before the branch can go.
    let mut doomed = Vec::new();
    let branches = main
        .branches(Some(git2::BranchType::Local))
        .map_err(|e| internal("list branches", &e))?;
    for branch in branches.flatten() {
        let Ok(Some(name)) = branch.0.name().map(|n| n.map(str::to_string)) else {
            continue;
        };
        let Some(rest) = name.strip_prefix("mvk/") else {
            continue;
        };
        let Some(run) = rest.split('/').next() else {
            continue;
        };
        if over(run)? {
            doomed.push(name);
        }
    }
    // The output of commands `mvk mcp` started.
    let mut outputs = Vec::new();
    for (path, run) in mcp_outputs(&root.join(".mvk").join("mcp")) {
        let gone = match run {
            Some(run) => over(&run)?,
            // It named no run: it failed (the caller got what it printed) or was stopped.
            None => path
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > crate::session::START_TIMEOUT),
        };
        if gone {
            outputs.push(path);
        }
    }

    let pool_root = Pool::default_root(&root);
    let mut removed_slots = Vec::new();
    let mut scratch = Vec::new();
    if pool_root.exists() {
        let pool =
            Pool::open(&root, &pool_root).map_err(|e| internal("open the worktree pool", &e))?;
        if !args.dry_run {
            removed_slots = pool
                .gc()
                .map_err(|e| internal("remove idle worktrees", &e))?;
        }
        scratch = pool
            .gc_scratch(args.dry_run)
            .map_err(|e| internal("remove leftover scratch branches", &e))?;
    }
    let mut removed_branches = scratch.len();
    for name in &scratch {
        if args.dry_run {
            printer.out(&format!("would delete branch {name}"));
        }
    }
    for name in &doomed {
        if args.dry_run {
            printer.out(&format!("would delete branch {name}"));
            continue;
        }
        match main.find_branch(name, git2::BranchType::Local) {
            Ok(mut b) => match b.delete() {
                Ok(()) => removed_branches += 1,
                // Checked out somewhere (a slot a live process holds): keep it.
                Err(e) => printer.status(&format!("kept branch {name}: {}", e.message())),
            },
            Err(_) => continue,
        }
    }
    for path in &outputs {
        if args.dry_run {
            printer.out(&format!("would delete {}", path.display()));
        } else if let Err(e) = std::fs::remove_file(path) {
            printer.status(&format!("kept {}: {e}", path.display()));
        }
    }
    for slot in &removed_slots {
        printer.status(&format!("removed worktree {}", slot.display()));
    }
    if args.dry_run {
        printer.out(&format!(
            "{} branch(es) would be deleted; idle worktrees under {} would be removed",
            doomed.len() + scratch.len(),
            pool_root.display()
        ));
    } else {
        printer.out(&format!(
            "removed {} worktree(s) and {removed_branches} branch(es)",
            removed_slots.len()
        ));
    }
    Ok(())
}

/// The files in DIR (`.mvk/mcp/`) with the run each belongs to: `<run>.<stamp>-<command>.out`
/// and `.err` once the command named its run; `<stamp>-<command>.out` and `.err` while it has
/// not, or when renaming them failed, whose run is the first line of the `.out` (under either
/// name), `None` when it names none.
fn mcp_outputs(dir: &Path) -> Vec<(std::path::PathBuf, Option<String>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .collect();
    let first_line = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|t| t.lines().next().map(|l| l.trim().to_string()))
            .filter(|l| !l.is_empty())
    };
    let mut out = Vec::new();
    for name in &names {
        let Some(stem) = name
            .strip_suffix(".out")
            .or_else(|| name.strip_suffix(".err"))
        else {
            continue;
        };
        let run = match stem.split_once('.') {
            Some((run, _)) => Some(run.to_string()),
            None => first_line(&format!("{stem}.out")).or_else(|| {
                // Its `.out` was renamed by the run and this one was not.
                let renamed = format!(".{stem}.out");
                names
                    .iter()
                    .find_map(|n| n.strip_suffix(&renamed).map(str::to_string))
            }),
        };
        out.push((dir.join(name), run));
    }
    out
}
