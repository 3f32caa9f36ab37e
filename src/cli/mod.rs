//! A parsed command line in, an exit code out: the clap definition ([`Cli`]), one `XxxArgs`
//! struct and one function per command, each a thin layer over the library; all output goes
//! through [`printer::Printer`]. [`crate::entry`] parses the arguments and calls the command's
//! function (`mvk mcp`'s is [`crate::mcp::command`], which builds on this module).

pub(crate) mod apply;
pub(crate) mod attempt;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod decide;
pub(crate) mod doctor;
pub(crate) mod exit;
pub(crate) mod followups;
pub(crate) mod gc;
pub(crate) mod glob_match;
pub(crate) mod graph;
pub(crate) mod init;
pub(crate) mod lessons;
pub(crate) mod lock;
pub(crate) mod log;
pub(crate) mod man;
pub(crate) mod mcp;
pub(crate) mod plan;
pub(crate) mod printer;
pub(crate) mod progress;
pub(crate) mod reading;
pub mod reference;
pub(crate) mod repo;
pub(crate) mod report;
pub(crate) mod resume;
pub(crate) mod running;
pub(crate) mod runs;
pub(crate) mod stats;
pub(crate) mod status;
pub(crate) mod verify;
pub(crate) mod watch;
pub(crate) mod why;
pub(crate) mod worker;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub(crate) use exit::{CliError, Exit};
use printer::Printer;

/// Run AI coding agents in loops declared in KDL.
#[derive(Debug, Parser)]
#[command(name = "mvk", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The repository to work on (default: the git repository that holds the loop file).
    #[arg(long, global = true, value_name = "DIR", env = crate::env::MVK_REPO)]
    pub(crate) repo: Option<PathBuf>,

    /// Print only errors and the command's result (a run: its id and summary, with no
    /// progress).
    #[arg(long, short, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,

    /// Print more detail (a run: every event, with its details as JSON).
    #[arg(long, short, global = true)]
    pub(crate) verbose: bool,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Write a starter loop, an agent definition and a prompt template for the project in DIR.
    Init(init::InitArgs),
    /// Compile a loop or flow and run it to an end: attempts, seal, gates, budgets, ladder, merge.
    Apply(apply::ApplyArgs),
    /// Validate loop files; report every problem at once.
    Check(check::CheckArgs),
    /// Can this machine run a loop's agents and gates: installed, version, flags, credentials,
    /// root, sandbox. One line each, with a fix; exit 1 when a run would fail.
    Doctor(doctor::DoctorArgs),
    /// Compile a loop file and print its DAG, digests, budgets and worst-case cost; runs nothing.
    Plan(plan::PlanArgs),
    /// Print a loop file's DAG as Graphviz dot or Mermaid.
    Graph(graph::GraphArgs),
    /// Continue an interrupted or paused run; stops with exit 5 when its definition drifted.
    Resume(resume::ResumeArgs),
    /// Answer the checkpoint where a paused run waits: land the attempt (or go on), and continue.
    Approve(decide::ApproveArgs),
    /// Answer the checkpoint where a paused run waits with a reason for the next attempt, and continue.
    Reject(decide::RejectArgs),
    /// Explain a run's drift, field by field, and why each task would or would not run again.
    Why(why::WhyArgs),
    /// Pin every import of the loop files of a directory in its `mvk.lock`.
    Lock(lock::LockArgs),
    /// Remove pooled worktrees no live run holds, the branches of finished runs' attempts, and
    /// scratch branches worktree builds of earlier versions left.
    Gc(gc::GcArgs),
    /// List the repository's runs, newest first.
    Runs(runs::RunsArgs),
    /// Show where a run stands: liveness, tasks, attempts, budgets, what it waits for.
    Status(status::StatusArgs),
    /// Print a run's events; `--follow` keeps printing until the run ends.
    Log(log::LogArgs),
    /// Watch a run live in the terminal: tasks, steps, budgets, the DAG, costs, who waits for
    /// what; open a task's agent log or last failure; approve or reject a waiting checkpoint.
    Watch(watch::WatchArgs),
    /// Acceptance rate, cost per accepted change, attempts by loop, agent and rung.
    Stats(stats::StatsArgs),
    /// Write a run as one self-contained HTML page: timeline, attempts with their failing tests,
    /// output and diff, verdicts, merges, cost.
    Report(report::ReportArgs),
    /// Print the completion script of a shell: bash, zsh, fish, elvish or powershell.
    Completions(completions::CompletionsArgs),
    /// Print mvk's manual page (roff), or write one page per command with `--out DIR`.
    Man(man::ManArgs),
    /// List the non-blocking notes reviewers left: follow-up work.
    Followups(followups::FollowupsArgs),
    /// List the lessons agents wrote for later attempts; `forget` one, or `pin` it into the loop.
    Lessons(lessons::LessonsArgs),
    /// The oracle check alone: did the change from `--base` to `--head` touch a sealed path?
    Verify(verify::VerifyArgs),
    /// Make one evidenced attempt of a task (seal, gates, review) and report it; lands nothing.
    Attempt(attempt::AttemptArgs),
    /// Serve the loop contract as tools over the Model Context Protocol on stdin and stdout.
    Mcp(mcp::McpArgs),
    /// Make the attempts of flows run with `mvk apply --executor temporal`, in this clone of the
    /// repository (needs mvk built with the `temporal` feature).
    Worker(worker::WorkerArgs),
}

/// Compiles a file for a command, printing its diagnostics; `Err` when it has errors.
pub(crate) fn compile(
    cli: &Cli,
    printer: &Printer,
    file: &std::path::Path,
) -> Result<crate::ir::Program, CliError> {
    compile_for_run(cli, printer, file).map(|(p, _)| p)
}

/// Refuses to spend money on a program with a seal that guards nothing or a scope that looks
/// misspelt (`mvk::matches-nothing` among `warnings`): found before any attempt.
pub(crate) fn refuse_paths_matching_nothing(warnings: &[&str]) -> Result<(), CliError> {
    if warnings.contains(&"mvk::matches-nothing") {
        return Err(CliError::Usage {
            message: "a `seal` path, or a `scope` path that looks misspelt, matches no file git tracks (see the warning above); no attempt was made".into(),
            hint: Some("fix the path; if the task creates those files, add new=#true to the node; loop files `mvk init` just wrote must be committed first".into()),
        });
    }
    Ok(())
}

/// [`compile`], with the codes of the warnings it printed: a command that spends money stops
/// on some of them.
pub(crate) fn compile_for_run(
    cli: &Cli,
    printer: &Printer,
    file: &std::path::Path,
) -> Result<(crate::ir::Program, Vec<&'static str>), CliError> {
    let compiled = compile_quiet(cli, file);
    printer.diagnostics(&compiled.diags, &compiled.sources);
    let codes = compiled.diags.iter().map(|d| d.code).collect();
    match compiled.program {
        Some(p) => Ok((p, codes)),
        None => Err(failure(file, &compiled.diags)),
    }
}

/// The error for a file that did not compile: drift when the lock is all that is wrong.
pub(crate) fn failure(file: &std::path::Path, diags: &crate::diag::Diagnostics) -> CliError {
    let file = crate::source::display_path(file);
    let errors = diags.error_count();
    if crate::resolve::lock::only_drift(diags) {
        CliError::Drift { file, errors }
    } else {
        CliError::Invalid { file, errors }
    }
}

pub(crate) fn compile_quiet(cli: &Cli, file: &std::path::Path) -> crate::resolve::Compiled {
    compile_with(cli, file, crate::resolve::lock::Mode::Verify)
}

/// Compiles a file, using `mvk.lock` beside it as `lock` says.
pub(crate) fn compile_with(
    cli: &Cli,
    file: &std::path::Path,
    lock: crate::resolve::lock::Mode,
) -> crate::resolve::Compiled {
    let cwd = std::env::current_dir().unwrap_or_default();
    let repo_root = match &cli.repo {
        Some(r) => r.clone(),
        None => crate::resolve::repo::discover_root(file, &cwd),
    };
    crate::resolve::compile(
        file,
        &crate::resolve::Options {
            repo_root: Some(repo_root),
            lock,
            cache_dir: None,
            confine: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    /// The `mvk …` command lines of the fenced blocks of `text` (shell and console examples), as
    /// words; notation (`[RUN]`, `FILE…`, `a|b`) and shell syntax past the command are left out.
    fn commands(text: &str) -> Vec<(usize, Vec<String>)> {
        let mut out = Vec::new();
        let mut fenced = false;
        // A command continued with `\` is one line.
        let mut joined: Vec<(usize, String)> = Vec::new();
        let mut open: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            match (open.take(), line.trim_end().strip_suffix('\\')) {
                (Some((at, mut acc)), cont) => {
                    acc.push(' ');
                    acc.push_str(cont.unwrap_or(line).trim());
                    if cont.is_some() {
                        open = Some((at, acc));
                    } else {
                        joined.push((at, acc));
                    }
                }
                (None, Some(cont)) => open = Some((i, cont.to_string())),
                (None, None) => joined.push((i, line.to_string())),
            }
        }
        joined.extend(open);
        for (i, line) in &joined {
            let (i, line) = (*i, line.as_str());
            let t = line.trim_start();
            if t.starts_with("```") {
                fenced = !fenced;
                continue;
            }
            let t = t.trim_start_matches("$ ");
            if !fenced || !t.starts_with("mvk ") {
                continue;
            }
            // Notation, not a command: the reference's synopses.
            if t.contains('…') || t.contains('[') || t.contains('|') || t.contains('<') {
                continue;
            }
            let cmd = t
                .split(['#', ';', '&', '>'])
                .next()
                .unwrap_or_default()
                .trim();
            let mut words = Vec::new();
            let mut rest = cmd;
            while !rest.is_empty() {
                rest = rest.trim_start();
                let (word, after) = if let Some(r) = rest.strip_prefix('"') {
                    let end = r.find('"').unwrap_or(r.len());
                    (&r[..end], r.get(end + 1..).unwrap_or_default())
                } else if let Some(r) = rest.strip_prefix('\'') {
                    let end = r.find('\'').unwrap_or(r.len());
                    (&r[..end], r.get(end + 1..).unwrap_or_default())
                } else {
                    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
                    (&rest[..end], &rest[end..])
                };
                if !word.is_empty() {
                    words.push(word.to_string());
                }
                rest = after;
            }
            out.push((i + 1, words));
        }
        out
    }

    /// Every command line the book and the README show is one this mvk accepts: a renamed
    /// flag or a removed command fails here, not in a reader's terminal.
    #[test]
    fn every_command_the_book_and_the_readme_show_parses() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![root.join("README.md")];
        for entry in walkdir::WalkDir::new(root.join("book/src")).sort_by_file_name() {
            let entry = entry.expect("walk the book");
            if entry.path().extension().is_some_and(|e| e == "md") {
                files.push(entry.path().to_path_buf());
            }
        }
        let mut seen = 0;
        let mut wrong = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read a chapter");
            for (line, words) in commands(&text) {
                seen += 1;
                if let Err(e) = Cli::try_parse_from(&words) {
                    // `--help` and `--version` end parsing with an "error" that is a success.
                    if !matches!(
                        e.kind(),
                        clap::error::ErrorKind::DisplayHelp
                            | clap::error::ErrorKind::DisplayVersion
                    ) {
                        wrong.push(format!(
                            "{}:{line}: `{}`: {}",
                            file.display(),
                            words.join(" "),
                            e.kind()
                        ));
                    }
                }
            }
        }
        assert!(
            seen > 25,
            "only {seen} command lines found: is the extraction broken?"
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
