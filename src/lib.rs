//! mvk runs AI coding agents in loops declared in KDL.
//!
//! The crate is a pipeline, like a compiler; each stage is a module whose first doc line says
//! what goes in and what comes out:
//!
//! ```text
//! loops/*.kdl ─ syntax ─▶ ast ─ resolve ─▶ ir (+ digest) ─ plan ─▶ DAG ─ cli prints
//! ```
//!
//! - [`syntax`]: KDL text → typed, spanned syntax tree; never touches git or the disk.
//! - [`resolve`]: imports, definitions, parameters, templates, fan-out → [`ir::Program`].
//! - [`digest`]: canonical encoding of the IR → blake3 digests per field, task and program.
//! - [`plan`]: the IR → petgraph DAG, batches, worst-case cost.
//! - [`drift`]: a run's stored program and the program compiled now → what changed, field by
//!   field, and what it invalidates.
//! - [`run`]: the interpreter: the driver (apply, resume), attempts, processes, the worktree pool,
//!   the seal check, gates and evidence, landing, run locks.
//! - [`ledger`]: the SQLite ledger; [`ledger::read`] reads it back (rows, liveness).
//! - [`report`]: ledger rows → a run's status, stats over runs, the diagnosis of a run gone wrong.
//! - [`scaffold`]: a project directory → the starter files of `mvk init`.
//! - [`cli`]: the command line, a thin layer over the above.
//!
//! # Files
//! - `loops/*.kdl`, in the user's repository: read by [`resolve`] through [`syntax`].
//! - `stdlib/` in this repository, imported as `std/…`: embedded by [`stdlib`].
//! - prompt templates (`*.hbs`): read by [`resolve`], checked and rendered by [`prompt`].
//! - `.mvk/ledger.db`, `.mvk/runs/<run>/`, `.mvk/locks/<program>.lock` in the user's repository:
//!   [`ledger`], [`run::trail`], [`run::lock`].
//! - `mvk.lock`, beside the loop files: read and written by [`resolve::lock`] (only `mvk lock` writes).
//! - git imports, fetched into `$MVK_CACHE_DIR/git/<blake3 of URL>` (default `~/.cache/mvk/git/…`): [`resolve::git`].
//! - attempt worktrees, outside the repository (`$MVK_WORKTREE_ROOT` or `~/.cache/mvk/worktrees/<repo>`): [`run::worktree`].

pub mod cli;
pub mod diag;
pub mod digest;
pub mod drift;
pub mod env;
pub mod ir;
pub mod ledger;
pub mod plan;
pub mod prompt;
pub mod report;
pub mod resolve;
pub mod run;
pub mod scaffold;
pub mod source;
pub mod stdlib;
pub mod syntax;
