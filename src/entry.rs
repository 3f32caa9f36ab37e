//! The process's arguments in; its exit code out. The hidden entries come first (the sandbox's
//! trampoline, the generic gates' path matcher, a command the MCP server started in a session
//! of its own), then the command line is parsed and its command run: by [`crate::cli`], or, for
//! `mvk mcp`, by [`crate::mcp`], which serves the cli's own functions as tools. Above both, so
//! that neither needs the other to dispatch.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::printer::{self, Printer};
use crate::cli::{
    Cli, Command, Exit, apply, attempt, check, completions, decide, doctor, followups, gc,
    glob_match, graph, init, lessons, lock, log, man, plan, report, resume, runs, stats, status,
    verify, watch, why, worker,
};

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
    // A command `mvk mcp` or `mvk watch` started detached (hidden, not a command): a session
    // of its own first.
    let mut args = args;
    let served = args.get(1).is_some_and(|a| a == crate::session::SESSION);
    let detached = args.get(1).is_some_and(|a| a == crate::session::DETACHED);
    if served || detached {
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
        Command::Watch(args) => watch::watch(&cli, &printer, args),
        Command::Stats(args) => stats::stats(&cli, &printer, args),
        Command::Report(args) => report::report(&cli, &printer, args),
        Command::Completions(args) => completions::completions(&cli, &printer, args),
        Command::Man(args) => man::man(&cli, &printer, args),
        Command::Followups(args) => followups::followups(&cli, &printer, args),
        Command::Lessons(args) => lessons::lessons(&cli, &printer, args),
        Command::Verify(args) => verify::verify(&cli, &printer, args),
        Command::Attempt(args) => attempt::attempt(&cli, &printer, args),
        Command::Mcp(args) => crate::mcp::command(&cli, &printer, args),
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
