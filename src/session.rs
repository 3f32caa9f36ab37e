//! A command line `mvk mcp` started in (`mvk __session COMMAND…`); that command on its own
//! out: in a session of its own ([`enter_session`]), its compilations fenced in its
//! repository's checkout as the server's are ([`fence`]). The server ([`crate::mcp`]) starts
//! such commands, the process entry ([`crate::entry`]) runs them, `mvk gc` removes what they
//! leave once [`START_TIMEOUT`] has passed.

use std::path::PathBuf;
use std::time::Duration;

/// The hidden first argument that makes `mvk` leave the server's session before it parses the
/// rest as a command line: `mvk __session apply FILE` (see [`enter_session`]).
pub(crate) const SESSION: &str = "__session";

/// The hidden first argument of a command `mvk watch` started to go on without it (the run an
/// answered checkpoint continues: `mvk __detached resume RUN`): a session of its own, as
/// [`SESSION`]'s, but not fenced; it reads the files any command a person types reads.
pub(crate) const DETACHED: &str = "__detached";

/// How long a started command may take to name its run (compiling, taking the run lock); one
/// that names none by then is stopped. `mvk gc` removes the output of a command that named no
/// run once it is older than this.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(120);

/// In a command the MCP server started (`mvk __session …`, see [`crate::mcp::spawn`]): a new
/// session, led by this process, with no controlling terminal, so the server's client, its
/// terminal and a signal to the server's session or process group do not reach the run.
/// `setsid(2)` through rustix's safe wrapper, called by the command itself before it does
/// anything else: a `pre_exec` hook in the server would need `unsafe`, and util-linux's `setsid`
/// binary may be missing. It cannot fail here (the command is started as an ordinary member of
/// the server's process group, never a group leader), but if it did the run would not be
/// detached as promised, so it is an error.
pub(crate) fn enter_session() -> Result<(), String> {
    rustix::process::setsid()
        .map(|_| ())
        .map_err(|e| format!("cannot start a session of its own (setsid): {e}"))
}

/// Fences this process's compilations in the checkout that `repo` (else the working
/// directory) is in, as the server and the commands it starts do; returns its top directory.
pub(crate) fn fence(repo: Option<&std::path::Path>) -> Result<PathBuf, String> {
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the working directory: {e}"))?;
    let dir = files_dir(&cwd.join(repo.unwrap_or(&cwd)));
    let confine = crate::resolve::confine::Confine::for_checkout(&dir)?;
    crate::resolve::confine::confine_process(confine);
    Ok(dir)
}

/// The top of the checkout that holds `start` (a linked worktree's own, not the main one's), or
/// `start` itself outside a repository.
fn files_dir(start: &std::path::Path) -> PathBuf {
    git2::Repository::discover(start)
        .ok()
        .and_then(|r| r.workdir().map(std::path::Path::to_path_buf))
        .unwrap_or_else(|| start.to_path_buf())
}
