//! Outcomes in, the documented exit codes out (see the contract's "Exit codes"), and the one
//! error type of the command line.

use std::process::ExitCode;

/// The exit codes of the contract (`book/src/contract.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Exit {
    Ok = 0,
    Rejected = 1,
    Stuck = 2,
    Budget = 3,
    Human = 4,
    Drift = 5,
    Usage = 64,
    Invalid = 65,
    Internal = 70,
    /// Stopped by Ctrl-C (128 + SIGINT, as shells report it).
    Interrupted = 130,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The exit for a run outcome's code (0–5); anything else is an internal error.
    pub fn from_code(code: u8) -> Exit {
        match code {
            0 => Exit::Ok,
            1 => Exit::Rejected,
            2 => Exit::Stuck,
            3 => Exit::Budget,
            4 => Exit::Human,
            5 => Exit::Drift,
            _ => Exit::Internal,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

/// A command that could not do its job, and why.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    #[error("`{file}` is not a valid loop definition ({errors} error{s})", s = if *errors == 1 { "" } else { "s" })]
    Invalid { file: String, errors: usize },
    #[error("the imports of `{file}` do not match `mvk.lock` ({errors} import{s})", s = if *errors == 1 { "" } else { "s" })]
    Drift { file: String, errors: usize },
    #[error("{message}")]
    Usage {
        message: String,
        hint: Option<String>,
    },
    #[error("{message}")]
    Internal { message: String },
}

impl CliError {
    pub(crate) fn exit(&self) -> Exit {
        match self {
            CliError::Invalid { .. } => Exit::Invalid,
            CliError::Drift { .. } => Exit::Drift,
            CliError::Usage { .. } => Exit::Usage,
            CliError::Internal { .. } => Exit::Internal,
        }
    }

    pub(crate) fn hint(&self) -> Option<&str> {
        match self {
            CliError::Usage { hint, .. } => hint.as_deref(),
            CliError::Drift { .. } => {
                Some("run `mvk lock --update` to accept the new versions, or undo the change")
            }
            _ => None,
        }
    }
}
