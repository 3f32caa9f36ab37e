//! `mvk mcp`: no arguments in; the MCP server on standard input and output out, until the
//! client closes them (see [`crate::mcp`]). Exit 0 when the client went away, 70 when serving
//! failed.

use clap::Args;

use super::printer::Printer;
use super::{Cli, CliError, Exit};

#[derive(Debug, Args)]
pub struct McpArgs {}

pub fn mcp(cli: &Cli, _printer: &Printer, _args: &McpArgs) -> Result<Exit, CliError> {
    super::apply::runtime()?
        .block_on(crate::mcp::serve(cli.repo.clone()))
        .map_err(|e| CliError::Internal {
            message: format!("the MCP server stopped: {e}"),
        })?;
    Ok(Exit::Ok)
}
