//! `mvk completions SHELL`: the shell's name in; its completion script for every command and
//! flag, generated from the clap definition by `clap_complete`, out.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::printer::Printer;
use super::{Cli, CliError, Exit};

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    pub(crate) shell: Shell,
}

pub(crate) fn completions(
    _cli: &Cli,
    printer: &Printer,
    args: &CompletionsArgs,
) -> Result<Exit, CliError> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "mvk", &mut script);
    printer.out(&String::from_utf8_lossy(&script));
    Ok(Exit::Ok)
}
