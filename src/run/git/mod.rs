//! The repository's side of a run, in: an accepted change, a task's seal; out: commits on the
//! target branch and checks of what a change touched. [`land`] merges or squashes a change onto
//! its target; [`seal`] decides whether a change touched the oracle (sealed tests, fixtures,
//! gate scripts); [`verify`] is that check on its own (`mvk verify`); [`treediff`] compares two trees, skipping what they share.

pub(crate) mod land;
pub(crate) mod seal;
pub(crate) mod treediff;
pub(crate) mod verify;
