//! Command-line arguments in, an exit code out: one `XxxArgs` struct and one function per
//! command, each a thin layer over the library; all output goes through [`printer::Printer`].

pub mod apply;
pub mod attempt;
pub mod check;
pub mod completions;
pub mod decide;
pub mod doctor;
pub mod exit;
pub mod followups;
pub mod gc;
pub mod glob_match;
pub mod graph;
pub mod init;
pub mod lock;
pub mod log;
pub mod man;
pub mod mcp;
pub mod plan;
pub mod printer;
pub mod reading;
pub mod reference;
pub mod report;
pub mod resume;
pub mod runs;
pub mod stats;
pub mod status;
pub mod verify;
pub mod why;
pub mod worker;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use exit::{CliError, Exit};
use printer::Printer;

/// Run AI coding agents in loops declared in KDL.
#[derive(Debug, Parser)]
#[command(name = "mvk", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// The repository to work on (default: the git repository that holds the loop file).
    #[arg(long, global = true, value_name = "DIR", env = crate::env::MVK_REPO)]
    pub repo: Option<PathBuf>,

    /// Print only errors.
    #[arg(long, short, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Print more detail.
    #[arg(long, short, global = true)]
    pub verbose: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
    /// Acceptance rate, cost per accepted change, attempts by loop, agent and rung.
    Stats(stats::StatsArgs),
    /// Write a run's timeline as one self-contained HTML page: attempts, verdicts, merges, cost.
    Report(report::ReportArgs),
    /// Print the completion script of a shell: bash, zsh, fish, elvish or powershell.
    Completions(completions::CompletionsArgs),
    /// Print mvk's manual page (roff), or write one page per command with `--out DIR`.
    Man(man::ManArgs),
    /// List the non-blocking notes reviewers left: follow-up work.
    Followups(followups::FollowupsArgs),
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

/// Parses the arguments, runs the command and returns its exit code.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // The sandbox's trampoline (hidden, not a command): it confines itself and becomes the agent or gate.
    if args
        .get(1)
        .is_some_and(|a| a == crate::run::sandbox::TRAMPOLINE)
    {
        return crate::run::sandbox::trampoline(&args[2..]);
    }
    // The generic gates' path matcher (hidden, not a command): lines in, the matching lines out.
    if args.get(1).is_some_and(|a| a == glob_match::HELPER) {
        return glob_match::run(&args[2..]);
    }
    // Where this executable is, found before a long run gives a rebuild the time to replace it.
    let _ = crate::exe::path();
    // libgit2 checks that every entry of a tree it writes exists, one object read per entry
    // (a loose object is opened and inflated): in a wide flow this was an eighth of mvk's
    // CPU. The trees mvk writes come from trees it read or from an attempt's index, whose
    // entries that differ from the base `capture` checks itself (an agent can forge one).
    git2::opts::strict_object_creation(false);
    // A command `mvk mcp` started detached (hidden, not a command): a session of its own first.
    let mut args = args;
    let served = args.get(1).is_some_and(|a| a == crate::session::SESSION);
    if served {
        if let Err(e) = crate::session::enter_session() {
            printer::err_line(&format!("error: {e}"));
            return Exit::Internal.into();
        }
        args.remove(1);
    }
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            // Printing help or the usage error can only fail if the terminal is gone.
            let _ = e.print();
            return code.into();
        }
    };
    // A command `mvk mcp` started reads files as the server does: its repository's only.
    if served && let Err(e) = crate::session::fence(cli.repo.as_deref()) {
        printer::err_line(&format!("error: {e}"));
        return Exit::Internal.into();
    }
    let printer = Printer::new(cli.quiet, cli.verbose);
    let result = match &cli.command {
        Command::Init(args) => init::init(&cli, &printer, args),
        Command::Apply(args) => apply::apply(&cli, &printer, args),
        Command::Gc(args) => gc::gc(&cli, &printer, args),
        Command::Resume(args) => resume::resume(&cli, &printer, args),
        Command::Approve(args) => decide::approve(&cli, &printer, args),
        Command::Reject(args) => decide::reject(&cli, &printer, args),
        Command::Why(args) => why::why(&cli, &printer, args),
        Command::Check(args) => check::check(&cli, &printer, args),
        Command::Doctor(args) => doctor::doctor(&cli, &printer, args),
        Command::Plan(args) => plan::plan(&cli, &printer, args),
        Command::Graph(args) => graph::graph(&cli, &printer, args),
        Command::Lock(args) => lock::lock(&cli, &printer, args),
        Command::Runs(args) => runs::runs(&cli, &printer, args),
        Command::Status(args) => status::status(&cli, &printer, args),
        Command::Log(args) => log::log(&cli, &printer, args),
        Command::Stats(args) => stats::stats(&cli, &printer, args),
        Command::Report(args) => report::report(&cli, &printer, args),
        Command::Completions(args) => completions::completions(&cli, &printer, args),
        Command::Man(args) => man::man(&cli, &printer, args),
        Command::Followups(args) => followups::followups(&cli, &printer, args),
        Command::Verify(args) => verify::verify(&cli, &printer, args),
        Command::Attempt(args) => attempt::attempt(&cli, &printer, args),
        Command::Mcp(args) => mcp::mcp(&cli, &printer, args),
        Command::Worker(args) => worker::worker(&cli, &printer, args),
    };
    match result {
        Ok(code) => code.into(),
        Err(err) => {
            printer.error(&err.to_string());
            if let Some(hint) = err.hint() {
                printer.hint(hint);
            }
            err.exit().into()
        }
    }
}

/// Compiles a file for a command, printing its diagnostics; `Err` when it has errors.
pub fn compile(
    cli: &Cli,
    printer: &Printer,
    file: &std::path::Path,
) -> Result<crate::ir::Program, CliError> {
    let compiled = compile_quiet(cli, file);
    printer.diagnostics(&compiled.diags, &compiled.sources);
    match compiled.program {
        Some(p) => Ok(p),
        None => Err(failure(file, &compiled.diags)),
    }
}

/// The error for a file that did not compile: drift when the lock is all that is wrong.
pub fn failure(file: &std::path::Path, diags: &crate::diag::Diagnostics) -> CliError {
    let file = crate::source::display_path(file);
    let errors = diags.error_count();
    if crate::resolve::lock::only_drift(diags) {
        CliError::Drift { file, errors }
    } else {
        CliError::Invalid { file, errors }
    }
}

pub fn compile_quiet(cli: &Cli, file: &std::path::Path) -> crate::resolve::Compiled {
    compile_with(cli, file, crate::resolve::lock::Mode::Verify)
}

/// Compiles a file, using `mvk.lock` beside it as `lock` says.
pub fn compile_with(
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
