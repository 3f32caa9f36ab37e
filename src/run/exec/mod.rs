//! Processes, in: an argv, its environment, its limits (time, memory, output); out: how it ended
//! and what it printed, with nothing of it left running. [`process`] runs an agent or a gate in
//! its own process group; [`reaper`] adopts and ends what such a group leaves behind;
//! [`signals`] turns the user's Ctrl-C and a supervisor's SIGTERM into an orderly stop;
//! [`untrusted`] reads what an agent could have written without following, blocking on or
//! swallowing it.

pub(crate) mod process;
pub(crate) mod reaper;
pub(crate) mod signals;
pub(crate) mod untrusted;
