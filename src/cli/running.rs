//! What the commands that run a loop share (`apply`, `resume`, `attempt`, `approve`/`reject`):
//! a compiled program and a repository in; the run lock taken, the run executed on the async
//! runtime until it ends or a signal stops it, its progress shown, its report printed and its
//! errors mapped to the contract's exit codes out.

use std::path::Path;

use super::printer::Printer;
use super::progress::Progress;
use super::{CliError, Exit};
use crate::run::driver::{self, RunError, RunReport};
use crate::run::exec::process::ProcessError;
use crate::run::git::land::LandError;
use crate::run::notify::Notifier;
use crate::run::worktree::WorktreeError;
use crate::run_lock::{Holder, LockError, RunLock};

/// The refusal of `--executor temporal` and `mvk worker` by a build without the feature.
#[cfg(not(feature = "temporal"))]
pub(crate) fn without_temporal() -> CliError {
    CliError::Usage {
        message: "this mvk was built without the `temporal` feature, so it cannot run flows on Temporal".into(),
        hint: Some("build mvk with `cargo build --features temporal` (or `cargo install --features temporal`)".into()),
    }
}

/// Checks the program's sandboxes against the kernel before anything runs: a warning for each
/// that will run less confined than it says, the refusal (exit 70) of one that is required.
pub(crate) fn sandbox_preflight(
    printer: &Printer,
    program: &crate::ir::Program,
) -> Result<(), CliError> {
    let warnings = crate::run::sandbox::preflight(program)
        .map_err(|e| CliError::Internal { message: chain(&e) })?;
    for w in warnings {
        printer.warn(&w);
    }
    Ok(())
}

/// Refuses a file of gate and agent definitions only: it has no task to run.
pub(crate) fn refuse_library(program: &crate::ir::Program, file: &Path) -> Result<(), CliError> {
    if program.kind == crate::ir::ProgramKind::Library {
        return Err(CliError::Usage {
            message: format!(
                "`{}` defines gates and agents only; there is no loop or flow to run",
                file.display()
            ),
            hint: Some("name a file with a `loop` or a `flow` that imports this one".into()),
        });
    }
    // A flow whose fan-outs matched no file has nothing to run (`check` warned of each).
    if program.tasks.is_empty() {
        return Err(CliError::Usage {
            message: format!(
                "`{}` has no task to run: its fan-outs (`each=`) match no file",
                file.display()
            ),
            hint: Some(
                "fix the `each` glob (see the warning above), or add the files it is meant to find"
                    .into(),
            ),
        });
    }
    Ok(())
}

/// Takes the run lock of `program` in `repo_root/.mvk` for `run`, or says who holds it.
pub(crate) fn lock(
    printer: &Printer,
    repo_root: &Path,
    program: &str,
    run: &str,
    command: &str,
    wait: bool,
) -> Result<RunLock, CliError> {
    let me = Holder {
        run: run.to_string(),
        pid: std::process::id(),
        host: driver::host_name(),
        since: crate::clock::now().0,
        command: command.to_string(),
    };
    RunLock::acquire(&repo_root.join(".mvk"), program, &me, wait, |holder| {
        printer.status(&format!("waiting for {holder} to finish"));
    })
    .map_err(|e| match e {
        LockError::Held { .. } => CliError::Usage {
            message: e.to_string(),
            hint: Some(format!(
                "wait for it (`mvk status`), or add `--wait` to start when it ends; two runs of `{program}` at once would fight over its target"
            )),
        },
        LockError::Io { .. } => CliError::Internal {
            message: chain(&e),
        },
    })
}

/// The notifier of run `opts.run_id` of `program`: none when the program asks for none, or
/// when `MVK_NOTIFY=off` (said once on standard error).
pub(crate) fn notifier(
    printer: &Printer,
    program: &crate::ir::Program,
    opts: &driver::RunOptions,
) -> Notifier {
    let off = std::env::var(crate::env::MVK_NOTIFY).is_ok_and(|v| v == "off");
    let asked = !program.notify.is_empty() || program.tasks.iter().any(|t| !t.notify.is_empty());
    if off {
        if asked {
            printer.status(&format!(
                "notifications are off (`{}=off`): no one hears of this run",
                crate::env::MVK_NOTIFY
            ));
        }
        return Notifier::none();
    }
    let quiet = printer.quiet();
    Notifier::new(
        program,
        (&opts.repo_root, &opts.file, &opts.run_id),
        Box::new(move |text| Printer::new(quiet, false).warn(text)),
    )
}

/// Runs a driver future to its end on a runtime of its own, stopping every process it started
/// on Ctrl-C, SIGTERM or SIGHUP; prints the report and returns the contract's exit code. The
/// notifications the run's events sent (through `notifier`, which the future's observer tells)
/// are given their time to go out before it returns.
pub(crate) fn execute(
    printer: &Printer,
    json: bool,
    (progress, notifier): (&Progress, &Notifier),
    (repo_root, run_id): (&Path, &str),
    run: impl std::future::Future<Output = Result<RunReport, RunError>>,
) -> Result<Exit, CliError> {
    let result = until_signal(run, |signal| {
        record_stop(repo_root, run_id, signal);
    })?;
    progress.finish();
    if let Err(signal) = &result {
        notifier.interrupted(crate::run::exec::signals::stop_name(*signal).1);
    }
    notifier.finish(|n| {
        printer.status(&format!(
            "sending {n} notification{}",
            if n == 1 { "" } else { "s" }
        ));
    });
    let report = match result {
        // Dropping the run killed every process group it had started.
        Err(signal) => {
            let by = crate::run::exec::signals::stop_name(signal).1;
            printer.error(&format!(
                "stopped by {by}; every agent and gate this run started was stopped (continue the run with `mvk resume {run_id}`)"
            ));
            return Ok(Exit::Interrupted);
        }
        Ok(Err(e)) => return Err(run_error(e)),
        Ok(Ok(report)) => report,
    };
    if json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| CliError::Internal {
            message: format!("cannot encode the report as JSON: {e}"),
        })?;
        printer.out(&text);
    } else {
        // The summary quotes what agents and reviewers wrote: plain text only.
        printer.out(&super::progress::plain(&summary(&report)));
    }
    Ok(Exit::from_code(report.exit_code))
}

/// Runs `run` to its end on a runtime of its own; `Err(signal)` when Ctrl-C, SIGTERM, SIGHUP or
/// SIGQUIT came first (dropping the run stops every process it started).
pub(crate) fn until_signal<T>(
    run: impl std::future::Future<Output = T>,
    on_stop: impl FnOnce(i32),
) -> Result<Result<T, i32>, CliError> {
    Ok(runtime()?.block_on(async {
        // Ctrl-C, `kill`, a CI cancel or a closed terminal: stop every process the run started.
        // The same signals from the run's own agents and gates are counted, not obeyed.
        let warn = |text: String| Printer::new(false, false).warn(&text);
        let Ok(mut stop) = crate::run::exec::signals::watch(warn) else {
            return Ok(run.await);
        };
        tokio::select! {
            r = run => Ok(r),
            // Recorded at once: a second Ctrl-C, or CI's SIGKILL after its grace period, may
            // end the process while the run's processes are being stopped.
            signal = stop.stopped() => {
                on_stop(signal);
                Err(signal)
            }
        }
    }))
}

/// Records in the ledger of `repo_root` and in the run's trail that `signal` from outside
/// stopped run `run`, so that it reads as a person's stop, not a death; the words for it.
/// Best effort: the run stays resumable whether or not this is written.
pub(crate) fn record_stop(repo_root: &Path, run: &str, signal: i32) -> String {
    let (name, by) = crate::run::exec::signals::stop_name(signal);
    let event = crate::run::event::Event::RunInterrupted {
        signal: name.to_string(),
        by: by.to_string(),
    };
    let mvk_dir = repo_root.join(".mvk");
    if let Ok((event_name, detail)) = event.into_parts()
        && let Ok(mut ledger) = crate::ledger::Ledger::open(&mvk_dir.join("ledger.db"))
        && ledger
            .record_stop(run, by, &detail.to_string())
            .unwrap_or(false)
        && let Ok(trail) = crate::run::trail::Trail::create(&mvk_dir, run)
    {
        let _ = trail.event(None, None, event_name, detail);
    }
    by.to_string()
}

/// The async runtime a command runs on: two workers, timers and I/O.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Internal {
            message: format!("cannot start the async runtime: {e}"),
        })
}

pub(crate) use crate::run::error_chain as chain;

pub(crate) fn run_error(e: RunError) -> CliError {
    match e {
        RunError::Config { message } => CliError::Usage {
            message,
            hint: None,
        },
        RunError::Land(LandError::Detached) => CliError::Usage {
            message: "HEAD is detached, so there is no current branch to land on".into(),
            hint: Some("check out a branch, or say `merge into=BRANCH` in the loop".into()),
        },
        RunError::Land(LandError::NoSuchBranch { branch }) => CliError::Usage {
            message: format!("the target branch `{branch}` does not exist"),
            hint: Some(format!(
                "create it (`git branch {branch}`) or change `merge into=`"
            )),
        },
        RunError::Worktree(WorktreeError::NoCommits { repo }) => CliError::Usage {
            message: format!("repository `{}` has no commits yet", repo.display()),
            hint: Some("make a first commit: attempts start from one".into()),
        },
        RunError::Agent {
            agent,
            source: source @ ProcessError::ProgramNotFound { .. },
        } => CliError::Usage {
            message: format!("cannot run agent `{agent}`: {source}"),
            hint: Some("install it, or fix the `run` line of its definition".into()),
        },
        RunError::Agent {
            source: source @ ProcessError::GrantExposes { .. },
            ..
        }
        | RunError::Gate(crate::run::judge::gate::GateError::Process {
            source: source @ ProcessError::GrantExposes { .. },
            ..
        }) => CliError::Usage {
            message: source.to_string(),
            hint: Some(
                "mvk stopped here (what landed stays landed): remove the link, then continue the run with `mvk resume`, or start the flow again with `mvk apply`"
                    .into(),
            ),
        },
        other => {
            let mut message = chain(&other);
            // SQLite says "disk I/O error" for a full disk and for a file-size limit alike.
            if other.is_out_of_space() {
                message.push_str(
                    " (is the disk full, or a file-size limit (`ulimit -f`) reached? the ledger keeps every transition written before this one, and the run stands where it stopped: free some space, then continue it with `mvk resume`)",
                );
            }
            CliError::Internal { message }
        }
    }
}

fn summary(report: &RunReport) -> String {
    let mut out = String::new();
    for t in &report.tasks {
        out.push_str(&format!(
            "{} {}: {} ({} attempt{}{})\n",
            mark(t.outcome),
            t.name,
            t.reason,
            t.attempts,
            if t.attempts == 1 { "" } else { "s" },
            if t.usd > 0.0 || t.tokens > 0 {
                format!(
                    ", {} tokens, {}",
                    t.tokens,
                    crate::plan::format_usd((t.usd * 1e6).round() as u64)
                )
            } else {
                String::new()
            }
        ));
    }
    out.push_str(&format!(
        "run {}: {} (exit {})",
        report.run,
        report.outcome.name(),
        report.exit_code
    ));
    out
}

fn mark(o: driver::Outcome) -> &'static str {
    match o {
        driver::Outcome::Accepted => "✓",
        driver::Outcome::Skipped => "-",
        driver::Outcome::Human | driver::Outcome::Waiting => "?",
        _ => "✗",
    }
}
