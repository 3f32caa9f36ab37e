//! Every environment variable mvk reads or sets, each one documented constant.

/// `off` turns every `notify` off for this process (a try of a loop whose notifications go to a
/// team's chat); anything else, or unset, leaves them as the loop says.
pub(crate) const MVK_NOTIFY: &str = "MVK_NOTIFY";
/// The repository to work on, like `--repo`.
pub(crate) const MVK_REPO: &str = "MVK_REPO";
/// Disables colour in diagnostics when set to anything non-empty (<https://no-color.org>).
pub(crate) const NO_COLOR: &str = "NO_COLOR";
/// The terminal width diagnostics are wrapped to, and the live view of a run when the terminal
/// does not say.
pub(crate) const COLUMNS: &str = "COLUMNS";
/// Off a terminal, how long a step of a run (an agent, a gate, a reviewer) goes on before a
/// line says it still does, and then again each time as long: `30s` (the default), `1m`,
/// `500ms`, or a number of seconds.
pub(crate) const MVK_PROGRESS_EVERY: &str = "MVK_PROGRESS_EVERY";
/// Where attempt worktrees are pooled, per repository (default: the user's cache directory).
pub(crate) const MVK_WORKTREE_ROOT: &str = "MVK_WORKTREE_ROOT";
/// The user's cache directory, for the worktree pool.
pub(crate) const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
/// The home directory, when `XDG_CACHE_HOME` is not set.
pub(crate) const HOME: &str = "HOME";
/// Crash tests only: the name of a point in mvk's code where the process kills itself with
/// SIGKILL, as a power cut or the OOM killer would (`agent-captured`, `attempt-passed`, `review-recorded`, `merge-intent`,
/// `merge-locked`, `merge-files-half`, `merge-checkout`, `merge-ref-moved`, `merge-unlocked`,
/// `merge-published` (a landing's steps, in order); for a Temporal run's coordinator `coordinator-recording`,
/// `coordinator-landing-answered`, `coordinator-ending`), or where it fails with an error of its
/// own (`coordinator-record-fails`). See [`crate::run::failpoint`] and [`crate::run::failing`].
pub(crate) const MVK_FAILPOINT: &str = "MVK_FAILPOINT";
/// mvk's cache directory: git imports are fetched into `$MVK_CACHE_DIR/git/<blake3 of URL>`
/// (default: `$XDG_CACHE_HOME/mvk`, else `~/.cache/mvk`).
pub(crate) const MVK_CACHE_DIR: &str = "MVK_CACHE_DIR";
/// Tests only: `1` makes the test of the book's command-line reference (`book/src/cli.md`)
/// write the page from the clap definition instead of failing on a difference.
pub const MVK_BLESS: &str = "MVK_BLESS";
/// Test hook, not a setting: when set in mvk's own environment, mvk's sandbox probe and
/// trampoline act as on a kernel without Landlock or network namespaces, so that the warning and
/// the refusal can be exercised here. Read once by mvk and handed to the trampoline in its
/// policy; the trampoline ignores the variable, so an agent, a gate or a loop's `env` that sets
/// it changes nothing.
pub(crate) const MVK_SANDBOX_UNSUPPORTED: &str = "MVK_SANDBOX_UNSUPPORTED";
/// Test hook, not a setting: milliseconds that replace the escapee sweep's time limit (10 s),
/// read once from mvk's own environment, so that a test sees quickly and surely what happens
/// when escapees outlast a sweep (the step the sweep followed fails).
pub(crate) const MVK_TEST_SWEEP_LIMIT_MS: &str = "MVK_TEST_SWEEP_LIMIT_MS";
/// Set for every gate: the path of the running mvk executable, so that a gate script can call
/// mvk's own helpers (the stdlib's generic gates match paths with `"$MVK_EXE" __glob-match`).
pub(crate) const MVK_EXE: &str = "MVK_EXE";

/// The variable naming the run in every agent's and gate's environment (the contract's
/// `MVK_RUN`); a resume finds what a dead mvk left running by it.
pub(crate) const RUN_VAR: &str = "MVK_RUN";
/// The variable naming the task, in an agent's and a gate's environment.
pub(crate) const TASK_VAR: &str = "MVK_TASK";
/// The task's scope globs, one a line, in every gate's environment.
pub(crate) const SCOPE_VAR: &str = "MVK_SCOPE";

/// Variables that point git at a repository; removed from agents' and gates' environments.
pub(crate) const GIT_LOCATION_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
];
