//! A program, its run options and an observer in, a run report out: where a run's attempts are
//! made. [`Local`], the default, makes them in this process; `temporal::Temporal` (the
//! `temporal` feature) hands them to `mvk worker`s through a Temporal server. Either way the
//! run's ledger, trail, status files and landings stay in this process, so `mvk status`, `log`
//! and `stats` read a run the same whichever executor made it. The CLI picks one with
//! `--executor`.

use std::future::Future;
use std::pin::Pin;

use crate::ir::Program;
use crate::run::driver::{self, Observer, RunError, RunOptions, RunReport};

/// A run of a program, to its report.
pub(crate) type RunFuture<'a> = Pin<Box<dyn Future<Output = Result<RunReport, RunError>> + 'a>>;

/// Where the attempts of `mvk apply` are made.
pub(crate) trait Executor {
    /// Runs `program` as `mvk apply` does: every selected task to its end, each accepted
    /// change landed in order, the run recorded in the ledger.
    fn apply<'a>(
        &'a self,
        program: &'a Program,
        opts: &'a RunOptions,
        observer: &'a dyn Observer,
    ) -> RunFuture<'a>;
}

/// Attempts made here, in worktrees of this machine's pool, up to the flow's `parallel`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Local;

impl Executor for Local {
    fn apply<'a>(
        &'a self,
        program: &'a Program,
        opts: &'a RunOptions,
        observer: &'a dyn Observer,
    ) -> RunFuture<'a> {
        Box::pin(driver::apply(program, opts, observer))
    }
}
