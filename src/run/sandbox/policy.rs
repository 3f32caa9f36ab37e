//! What a sandbox allows: its `write` grants and the places mvk keeps that no grant may lead to
//! in; out, a grant that would expose one refused, the paths a confined process may write, the
//! environment that reaches it, and the [`Policy`] the trampoline is handed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ir::{Program, Sandbox};

use super::SandboxError;

/// Variables of mvk's environment that reach a sandboxed process without being named.
pub(crate) const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
];

/// Devices every process writes to; granted for writing in every sandbox. Not `/dev/tty`: the
/// terminal mvk runs in is the user's, and a program that can open it for ioctls can type into
/// it (TIOCSTI) what the user's shell runs, unconfined, once mvk exits. Without the grant
/// Landlock (ABI 5 and later) refuses it every device ioctl on the terminal however it opened
/// it; in a PID namespace the program has no controlling terminal either ([`pidns`]).
pub(super) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// What the trampoline is told: exactly what it may write, and what to do where it cannot confine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Policy {
    /// mvk's own places for the process (its worktree, temporary directory, devices).
    pub(super) write: Vec<PathBuf>,
    /// The sandbox's grants, which the trampoline opens once and checks against `protected`
    /// before it hands the kernel the very directories it checked (see [`open_grants`]).
    #[serde(default)]
    pub(super) grants: Vec<PathBuf>,
    #[serde(default)]
    pub(super) protected: Vec<Protected>,
    pub(super) network: bool,
    pub(super) required: bool,
    /// The tests' stand-in for an old kernel, from mvk's own environment (see
    /// [`pretend_unsupported`]); never from the confined process's.
    #[serde(default)]
    pub(super) pretend: bool,
}

/// What a sandboxed process may write besides the sandbox's grants.
pub(crate) struct Grants<'a> {
    /// Its working directory (the worktree).
    pub(crate) cwd: &'a Path,
    /// Its own temporary directory, emptied first; `TMPDIR` names it.
    pub(crate) tmp: PathBuf,
    /// Where the objects of its commits go, emptied first, when it may commit in `cwd`'s
    /// repository (agents may; gates only check): see [`absorb_objects`].
    pub(crate) objects: Option<PathBuf>,
    /// Where mvk keeps what no confined process may write: no grant may lead there.
    pub(crate) protected: &'a [Protected],
    /// The directory of the agent's lessons file, which it may write (agents only).
    pub(crate) lessons: Option<&'a Path>,
}

/// A place where mvk keeps what no confined process may write, as the kernel finds it (links
/// resolved when the run began), and what it holds, for the refusal.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Protected {
    pub what: String,
    pub place: PathBuf,
}

impl Protected {
    pub fn new(what: &str, place: &Path) -> Self {
        Protected {
            what: what.to_string(),
            place: resolved(place),
        }
    }
}

/// The protected place that a grant leading to `path` (links resolved) would expose: one that
/// holds it, or one that lies inside it.
pub(super) fn exposed<'p>(path: &Path, protected: &'p [Protected]) -> Option<&'p Protected> {
    protected
        .iter()
        .find(|p| p.place.starts_with(path) || path.starts_with(&p.place))
}

/// Every sandbox of `program` with whose it is: each task's, and its agents' own.
pub(super) fn sandboxes(program: &Program) -> Vec<(String, &Sandbox)> {
    let mut owned: Vec<(String, &Sandbox)> = Vec::new();
    for task in &program.tasks {
        if let Some(s) = &task.sandbox {
            owned.push((format!("task `{}`", task.name), s));
        }
        for (agent, _) in task.agents() {
            if let Some(s) = &agent.sandbox {
                owned.push((format!("agent `{}` of task `{}`", agent.name, task.name), s));
            }
        }
    }
    owned
}

/// Refuses a `write` grant that holds, or lies inside, a place where mvk keeps what a confined
/// process must not write: `protected` names each (the main checkout with its ledger, the
/// repository's git directory, the attempt worktrees with mvk's trusted index copies, the
/// import cache). A grant of `~/.cache` (where the worktrees live by default) would let an
/// agent edit another attempt's worktree, or the index copy mvk trusts for its next capture.
/// Checked again at each start ([`confine`], then the trampoline on what it opened): a link a
/// confined process planted under one grant must not lead the next one into those places.
pub(crate) fn refuse_exposing_grants(
    program: &Program,
    protected: &[Protected],
) -> Result<(), SandboxError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    for (owner, sandbox) in sandboxes(program) {
        for granted in &sandbox.write {
            let Some(path) = expand(granted, home.as_deref()) else {
                continue;
            };
            if let Some(p) = exposed(&resolved(&path), protected) {
                return Err(SandboxError::Exposes {
                    owner,
                    granted: granted.clone(),
                    what: p.what.clone(),
                    place: p.place.clone(),
                });
            }
        }
    }
    Ok(())
}

/// `p` with the symbolic links of its longest existing ancestor resolved, the rest appended:
/// what the kernel will find there (a place that does not exist yet is compared as it will be).
pub(super) fn resolved(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = p;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return rest.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// A granted path as the kernel sees it: `~/…` under `home`; `None` when there is no home to
/// expand against (nothing is granted rather than something unmeant).
pub(super) fn expand(granted: &str, home: Option<&Path>) -> Option<PathBuf> {
    match granted.strip_prefix('~') {
        Some(rest) => home.map(|h| h.join(rest.trim_start_matches('/'))),
        None => Some(PathBuf::from(granted)),
    }
}
