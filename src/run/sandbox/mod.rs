//! A `sandbox` (IR) and a process about to start in; out comes the process rewritten to start
//! through mvk's hidden trampoline, `mvk __sandbox POLICY -- PROGRAM ARG…`, which confines itself
//! and then runs PROGRAM in a PID namespace of its own under a tiny init ([`pidns`]), ending as
//! PROGRAM did (the trampoline keeps its pid and process group, so timeouts and the group kill
//! work as for any child, and nothing PROGRAM starts outlives it).
//!
//! The trampoline, single-threaded and before anything else: without network, it enters a fresh
//! network namespace (no interface up; through a user namespace when mvk is not root); then a
//! PID namespace for what it starts; then Landlock (ABI 6) refuses every write outside the worktree, a temporary directory of the
//! process's own, a few devices (`/dev/null`, …) and the paths the loop grants, and every signal
//! to a process outside the sandbox (mvk among them). An agent may also commit in its worktree,
//! but never touch what the repository already holds: its HEAD is detached (the worktree's own
//! git directory is granted, no ref is), and the objects it writes go to a directory of the
//! attempt's own (`GIT_OBJECT_DIRECTORY`, the shared store as a read-only alternate), which mvk,
//! outside the sandbox, copies into the shared store object by object, each checked against its
//! name, after the agent exits ([`absorb_objects`]); mvk then sets the attempt's branch from the
//! worktree's HEAD. Without network the loopback interface is brought up, so that tests can bind
//! 127.0.0.1. Applying it in a child of mvk, which then starts the namespace's init as a program of its own, needs no `unsafe` (`pre_exec` or a bare `fork` would).
//!
//! The environment starts empty: [`BASE_ENV`] from mvk's, the variables the sandbox names, then
//! `TMPDIR` and what mvk sets (`MVK_*`, the definition's `env`). Where the kernel cannot confine,
//! [`preflight`] warns, or refuses a `required=#true` sandbox before anything runs; the
//! trampoline refuses too, so a sandbox that is required never runs unconfined.
//!
//! Its rooms: [`policy`] (what a sandbox allows: the grants, the places no grant may lead to,
//! the environment that reaches a confined process, what the trampoline is told), [`support`]
//! (what the kernel can confine, asked before a run), [`confine`](mod@confine) (a process
//! rewritten to start through the trampoline), [`trampoline`](mod@trampoline) (the trampoline
//! itself, confining the process it becomes: [`netns`], [`ruleset`], [`pidns`]) and [`absorb`]
//! (an agent's objects, checked, into the shared store; [`agent_pack`] copies them out and
//! finds what reading them would cost).

use std::io;
use std::path::PathBuf;

mod absorb;
mod agent_pack;
mod confine;
mod netns;
mod pidns;
mod policy;
mod ruleset;
mod support;
mod trampoline;

pub(crate) use absorb::{AbsorbError, Limits, absorb_objects};
pub(crate) use confine::confine;
pub(crate) use policy::{BASE_ENV, Grants, Protected, refuse_exposing_grants};
pub(crate) use support::preflight;
pub(crate) use trampoline::trampoline;

/// The hidden first argument that makes `mvk` the trampoline.
pub(crate) const TRAMPOLINE: &str = "__sandbox";
/// `mvk __sandbox probe`: confine a throwaway process and print what the kernel allowed.
const PROBE: &str = "probe";
/// `mvk __sandbox probe --pretend-unsupported`: answer as a kernel without support would.
const PRETEND_FLAG: &str = "--pretend-unsupported";
/// The trampoline's exit code when it refuses to run a required sandbox unconfined.
pub(crate) const REFUSED_EXIT: u8 = 125;

/// Why the sandbox cannot be set up or is refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SandboxError {
    #[error(
        "{owner} requires a sandbox this machine cannot provide: {problems}; run it on a kernel with Landlock (5.13 or later, ABI 6 for the signal scope) and network namespaces, or write `required=#false` to run it unconfined with a warning"
    )]
    Unsupported { owner: String, problems: String },
    #[error("cannot ask the kernel what it can confine (`mvk {TRAMPOLINE} {PROBE}`)")]
    Probe {
        #[source]
        source: io::Error,
    },
    #[error("the sandbox probe answered `{answer}`")]
    ProbeAnswer { answer: String },
    #[error(
        "{owner}: the sandbox grants `{granted}`, which would let a confined process write {what} (`{}`); grant a narrower path that holds neither (`~/.cache/pip`, not `~/.cache`)",
        place.display()
    )]
    Exposes {
        owner: String,
        granted: String,
        what: String,
        place: PathBuf,
    },
}
