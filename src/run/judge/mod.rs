//! Judging an attempt, in: its agent's output, its gates' commands and the change; out: verdicts.
//! [`gate`] runs a gate and [`evidence`] reads its output for nonce-bound proof that tests ran;
//! [`adapter`] reads an agent's cost, usage and rate limits from what it printed; [`ansi`]
//! strips terminal codes first.

pub mod adapter;
pub(crate) mod ansi;
pub mod evidence;
pub mod gate;
