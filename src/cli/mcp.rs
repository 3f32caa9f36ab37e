//! `mvk mcp`'s arguments: none in; [`McpArgs`] out, which [`crate::mcp::command`] runs: the MCP
//! server on standard input and output, until the client closes them. Exit 0 when the client
//! went away, 70 when serving failed.

use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct McpArgs {}
