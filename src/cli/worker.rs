//! `mvk worker [--temporal-address HOST:PORT] [--task-queue QUEUE] [--repo DIR]`: makes the
//! attempts of flows run with `mvk apply --executor temporal`, one at a time, in the clone of
//! the repository at `--repo` (else the one holding the current directory), until SIGTERM or
//! Ctrl-C, which let the running attempt finish.

use clap::Args;

use super::apply::TemporalArgs;
use super::printer::Printer;
use super::{Cli, CliError, Exit};

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub(crate) temporal: TemporalArgs,
}

pub(crate) fn worker(cli: &Cli, printer: &Printer, args: &WorkerArgs) -> Result<Exit, CliError> {
    #[cfg(feature = "temporal")]
    {
        let start = cli.repo.clone().unwrap_or_else(|| ".".into());
        let repo = super::repo::repository_at(&start)?;
        let endpoint = crate::run::temporal::Endpoint {
            address: args.temporal.temporal_address.clone(),
            task_queue: args.temporal.task_queue.clone(),
            namespace: args.temporal.temporal_namespace.clone(),
        };
        printer.status(&format!(
            "worker {} polls `{}` at {} (namespace `{}`) for attempts, in `{}`",
            std::process::id(),
            endpoint.task_queue,
            endpoint.address,
            endpoint.namespace,
            repo.display()
        ));
        super::running::runtime()?
            .block_on(crate::run::temporal::worker(&endpoint, &repo))
            .map_err(super::running::run_error)?;
        printer.status("worker stopped");
        Ok(Exit::Ok)
    }
    #[cfg(not(feature = "temporal"))]
    {
        let _ = (cli, printer, args);
        Err(super::running::without_temporal())
    }
}
