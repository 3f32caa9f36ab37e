//! The repository's side of a run, in: an accepted change, a task's seal, the agent's
//! configuration; out: commits on the target branch and checks of what a change touched.
//! [`land`] merges or squashes a change onto its target; [`agent_pack`] packs the agent's own
//! configuration into a worktree and out again; [`verify`] is the oracle check on its own
//! (`mvk verify`).

pub mod agent_pack;
pub mod land;
pub mod verify;
