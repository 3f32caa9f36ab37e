//! Every environment variable mvk reads or sets, each one documented constant.

/// The repository to work on, like `--repo`.
pub const MVK_REPO: &str = "MVK_REPO";
/// Disables colour in diagnostics when set to anything non-empty (<https://no-color.org>).
pub const NO_COLOR: &str = "NO_COLOR";
/// The terminal width diagnostics are wrapped to.
pub const COLUMNS: &str = "COLUMNS";
