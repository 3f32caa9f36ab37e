//! The interpreter's parts, each usable on its own: [`evidence`] reads a gate's output for
//! proof that tests ran; [`process`] runs an agent or a gate in its
//! own process group with bounded memory; [`worktree`] keeps a pool of reusable git worktrees
//! and captures an attempt's change as a commit; [`seal`] decides whether a change touched the
//! oracle. The loop that drives them (`mvk apply`) builds on these.

pub mod adapter;
pub mod evidence;
pub mod process;
pub mod seal;
pub mod worktree;

#[cfg(test)]
mod testing;
