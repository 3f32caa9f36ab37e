//! The clap definition in; the command-line reference of the book (`book/src/cli.md`) out, as
//! Markdown: every command and subcommand, its usage, every argument and flag with its help,
//! default, values and environment variable. A test keeps the book's copy equal to this text.

use std::fmt::Write as _;

use clap::{Arg, Command, CommandFactory};

use super::Cli;

/// The whole reference page.
pub fn markdown() -> String {
    let cmd = built();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Command-line reference\n\n\
         <!-- Generated from mvk's clap definition by `src/cli/reference.rs`: do not edit by hand.\n     \
         Refresh it with `MVK_BLESS=1 cargo test --test integration cli_reference`. -->\n"
    );
    let _ = writeln!(
        out,
        "{}\n",
        cmd.get_about().map(ToString::to_string).unwrap_or_default()
    );
    let _ = writeln!(out, "```text\n{}\n```\n", usage(&cmd));
    let _ = writeln!(out, "Commands:\n");
    for sub in visible(&cmd) {
        let _ = writeln!(
            out,
            "- [`mvk {name}`](#mvk-{name}): {about}",
            name = sub.get_name(),
            about = sub.get_about().map(ToString::to_string).unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "\nOptions every command takes (before or after its name):\n"
    );
    table(&mut out, cmd.get_arguments());
    for sub in visible(&cmd) {
        section(&mut out, sub, &format!("mvk {}", sub.get_name()));
    }
    out
}

/// The section of command CMD, spelt NAME (`mvk lessons`), then one per subcommand of its own
/// (`mvk lessons pin`).
fn section(out: &mut String, cmd: &Command, name: &str) {
    let _ = writeln!(out, "\n## `{name}`\n");
    let about = cmd
        .get_long_about()
        .or_else(|| cmd.get_about())
        .map(ToString::to_string)
        .unwrap_or_default();
    let _ = writeln!(out, "{about}\n");
    let _ = writeln!(out, "```text\n{}\n```", usage(cmd));
    // Global options, `--help` and `--version` are in the table at the top.
    let own: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_global_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    if !own.is_empty() {
        out.push('\n');
        table(out, own.into_iter());
    }
    for sub in visible(cmd) {
        section(out, sub, &format!("{name} {}", sub.get_name()));
    }
}

/// The definition, built so that subcommands know their full names (`mvk apply`), without
/// clap's `help` subcommand.
pub(super) fn built() -> Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The commands a user sees (hidden ones are for mvk's own maintenance).
pub(super) fn visible(cmd: &Command) -> impl Iterator<Item = &Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set())
}

fn usage(cmd: &Command) -> String {
    let usage = cmd.clone().render_usage().to_string();
    usage.trim().to_string()
}

/// A table of ARGS: how each is written, and its help with default, values and variable.
fn table<'a>(out: &mut String, args: impl Iterator<Item = &'a Arg>) {
    let _ = writeln!(out, "| argument | meaning |\n|---|---|");
    for arg in args.filter(|a| !a.is_hide_set()) {
        let _ = writeln!(out, "| `{}` | {} |", spelling(arg), cell(&meaning(arg)));
    }
}

/// `-q`, `--quiet`; `--format <FORMAT>`; `<FILE>...`.
fn spelling(arg: &Arg) -> String {
    let value = || {
        let names = arg
            .get_value_names()
            .map(|n| n.iter().map(ToString::to_string).collect::<Vec<_>>())
            .unwrap_or_else(|| vec![arg.get_id().to_string().to_uppercase()]);
        let many = arg.get_num_args().is_some_and(|n| n.max_values() > 1);
        let text = names
            .iter()
            .map(|n| format!("<{n}>"))
            .collect::<Vec<_>>()
            .join(" ");
        if many { format!("{text}...") } else { text }
    };
    if arg.is_positional() {
        return value();
    }
    let mut names = Vec::new();
    if let Some(short) = arg.get_short() {
        names.push(format!("-{short}"));
    }
    if let Some(long) = arg.get_long() {
        names.push(format!("--{long}"));
    }
    let takes_value = arg.get_action().takes_values();
    let joined = names.join(", ");
    if takes_value {
        format!("{joined} {}", value())
    } else {
        joined
    }
}

fn meaning(arg: &Arg) -> String {
    let mut text = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let text_end = text.trim_end().len();
    text.truncate(text_end);
    if !text.is_empty() && !text.ends_with('.') {
        text.push('.');
    }
    let possible: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let takes_value = arg.get_action().takes_values();
    if takes_value && !possible.is_empty() {
        let _ = write!(text, " Values: {}.", possible.join(", "));
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    if takes_value && !defaults.is_empty() {
        let _ = write!(text, " Default: {}.", defaults.join(", "));
    }
    if let Some(env) = arg.get_env() {
        let _ = write!(text, " Environment: `{}`.", env.to_string_lossy());
    }
    if arg.is_required_set() {
        text.push_str(" Required.");
    }
    text.trim().to_string()
}

/// Text fit for one table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}
