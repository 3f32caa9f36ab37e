//! What the integration tests share: a temporary repository with the shell-only project (a bug,
//! a sealed test, a loop file) and scripted agents from `tests/agents/` ([`Fixture`]), `mvk`
//! run in it hermetically, a finished run's exit code and events ([`Run`]), and a terminal of a
//! fixed size to run it in ([`Tmux`]).

mod fixture;
mod project;
mod run;
mod tmux;

pub(crate) use fixture::*;
pub(crate) use project::*;
pub(crate) use run::*;
pub(crate) use tmux::*;
