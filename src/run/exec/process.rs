//! Runs one child process (an agent or a gate): in goes a [`ProcessSpec`], out comes a
//! [`ProcessOutcome`] saying how it ended, with the full output in log files and a bounded tail in memory.
//!
//! The child runs in its own process group with stdin at `/dev/null`. On timeout the whole group gets
//! SIGTERM, then SIGKILL after [`ProcessSpec::kill_grace`]. When the leader ends, group members still
//! alive are SIGKILLed. If the [`run`] future is dropped, the group is SIGKILLed too. A [`Stop`]
//! pulled while it runs ends the group the way a timeout does ([`Termination::Stopped`]); a
//! [`Tap`] sees its standard output as it comes, in the order written to the log (a budget
//! meter reads usage there and pulls the stop). Linux only: the liveness of a group is read from
//! `/proc`.

use std::collections::VecDeque;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};
use tokio::fs::File;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Default time between SIGTERM and SIGKILL when a process times out.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// Default number of bytes kept in memory of each of stdout and stderr.
pub(crate) const DEFAULT_TAIL_BYTES: usize = 64 * 1024;
/// How long output is still read after the whole group has ended. Only a process that left the
/// group (e.g. via `setsid`) while holding a pipe can make this bound matter.
pub(crate) const DRAIN_BOUND: Duration = Duration::from_secs(5);
/// How long to wait for SIGKILLed members to disappear; a process in uninterruptible sleep can lag.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How often `/proc` is polled while waiting for a group to empty.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Read size for the pipes; matches the default Linux pipe capacity.
const READ_CHUNK: usize = 64 * 1024;

/// What to run and where its output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessSpec {
    /// Program name (looked up on `PATH`) or path.
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    /// Working directory; must exist.
    pub(crate) cwd: PathBuf,
    /// Variables set on top of the base environment (applied last, so they win over `env_remove`).
    pub(crate) env: Vec<(String, String)>,
    /// Start from an empty environment instead of inheriting mvk's (then `env` is applied).
    pub(crate) env_clear: bool,
    /// Names removed from the inherited environment.
    pub(crate) env_remove: Vec<String>,
    /// Wall-clock limit for the leader; `None` means no limit.
    pub(crate) timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL after a timeout.
    pub(crate) kill_grace: Duration,
    /// Full stdout is streamed here (truncated first; parent directories are created).
    pub(crate) stdout_log: PathBuf,
    /// Full stderr is streamed here. May equal `stdout_log` for one combined log: then one pipe
    /// carries both streams, in the order the child wrote them, and everything counts as stdout.
    pub(crate) stderr_log: PathBuf,
    /// Memory bound for each of the two tails.
    pub(crate) tail_bytes: usize,
    /// Where to write the process group's id once it runs, so that a later mvk can find what a
    /// dead one left running (see [`crate::run::exec::reaper::kill_orphans`]).
    pub(crate) group_file: Option<PathBuf>,
    /// The attempt's window that the stop signals this process sends mvk are counted in.
    pub(crate) signals: Option<crate::run::exec::signals::Window>,
    /// Sees each chunk of standard output once it is in the log.
    pub(crate) tap: Option<Tap>,
    /// Ends the process group when pulled (gracefully, then by force after `kill_grace`).
    pub(crate) stop: Option<Stop>,
}

/// What reads a process's standard output as it comes (see [`ProcessSpec::tap`]).
pub(crate) trait OutputTap: Send {
    /// The next bytes of standard output, cut anywhere.
    fn chunk(&mut self, bytes: &[u8]);
}

/// A shared [`OutputTap`]; two specs are equal when they share it.
#[derive(Clone)]
pub(crate) struct Tap(pub(crate) std::sync::Arc<std::sync::Mutex<dyn OutputTap>>);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

impl PartialEq for Tap {
    fn eq(&self, other: &Tap) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Tap {}

/// A switch that, once pulled, ends the process it was given to (and any given it later).
#[derive(Debug, Clone, Default)]
pub(crate) struct Stop(std::sync::Arc<StopState>);

#[derive(Debug, Default)]
struct StopState {
    pulled: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl PartialEq for Stop {
    fn eq(&self, other: &Stop) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Stop {}

impl Stop {
    /// Asks for the process to end; from any thread, any number of times.
    pub(crate) fn pull(&self) {
        self.0
            .pulled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub(crate) fn is_pulled(&self) -> bool {
        self.0.pulled.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Returns once pulled.
    async fn pulled(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            // Registered before the flag is read: a pull in between still wakes it.
            notified.as_mut().enable();
            if self.is_pulled() {
                return;
            }
            notified.await;
        }
    }
}

impl ProcessSpec {
    /// A spec with no arguments, the inherited environment, no timeout and default bounds.
    pub(crate) fn new(
        program: impl Into<String>,
        cwd: impl Into<PathBuf>,
        stdout_log: impl Into<PathBuf>,
        stderr_log: impl Into<PathBuf>,
    ) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: Vec::new(),
            env_clear: false,
            env_remove: Vec::new(),
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            stdout_log: stdout_log.into(),
            stderr_log: stderr_log.into(),
            tail_bytes: DEFAULT_TAIL_BYTES,
            group_file: None,
            signals: None,
            tap: None,
            stop: None,
        }
    }
}

/// How the leader process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Termination {
    /// Exited on its own with this code.
    Exited(i32),
    /// Killed by this signal, not sent by the runner.
    Signaled(i32),
    /// Ran past its timeout and was terminated by the runner.
    TimedOut,
    /// Ended by the runner because its [`ProcessSpec::stop`] was pulled.
    Stopped,
}

impl Termination {
    /// True for `Exited(0)` only.
    #[cfg(test)]
    pub(crate) fn success(self) -> bool {
        self == Self::Exited(0)
    }
}

/// What a finished run produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessOutcome {
    pub(crate) termination: Termination,
    /// Last at most `tail_bytes` bytes of stdout (lossy UTF-8; when cut, starts at a line or character boundary).
    pub(crate) stdout_tail: String,
    /// Last at most `tail_bytes` bytes of stderr, cut like `stdout_tail` (empty for a combined log).
    pub(crate) stderr_tail: String,
    /// Total bytes read from stdout (all of them are in `stdout_log`).
    pub(crate) stdout_bytes: u64,
    /// Total bytes read from stderr.
    pub(crate) stderr_bytes: u64,
    /// From just before spawning to the end of draining the output.
    pub(crate) duration: Duration,
    /// Members of the group were still alive after the leader ended and were SIGKILLed.
    pub(crate) stragglers_killed: bool,
    /// Pid of the leader, which is also the process group id.
    pub(crate) pid: u32,
}

/// Why a process could not be run (or its output not recorded).
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(
        "cannot find program `{program}` (not on PATH, not an existing file, or its interpreter is missing)"
    )]
    ProgramNotFound { program: String },
    #[error("working directory `{}` for `{program}` is not a directory", path.display())]
    CwdMissing { program: String, path: PathBuf },
    #[error("cannot start `{program}`")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("started `{program}` but got no usable pid for it")]
    NoPid { program: String },
    #[error("cannot wait for `{program}` to end")]
    Wait {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot create log directory `{}`", path.display())]
    CreateLogDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot create log file `{}`", path.display())]
    CreateLog {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write log file `{}`", path.display())]
    WriteLog {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read {stream} of `{program}`")]
    ReadOutput {
        program: String,
        stream: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("the task copying {stream} of `{program}` failed")]
    OutputTask {
        program: String,
        stream: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("cannot prepare the sandbox of `{program}`")]
    Sandbox {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "refusing to start `{program}`: its sandbox grants `{granted}`, which now leads to {what} (`{}`); a confined process may have put a link there since the run began; grant paths no confined process can replace",
        place.display()
    )]
    GrantExposes {
        program: String,
        granted: String,
        what: String,
        place: PathBuf,
    },
    #[error("refusing to signal process group `{pgid}` (not a child's group)")]
    UnsafeGroup { pgid: i32 },
    #[error("cannot signal process group `{pgid}`")]
    Signal {
        pgid: i32,
        #[source]
        source: io::Error,
    },
}

/// Runs `spec` to completion (see the module docs for the guarantees).
///
/// Errors are about starting the process or recording its output; how the process ended, including a
/// timeout, is reported in [`ProcessOutcome::termination`].
pub(crate) async fn run(spec: &ProcessSpec) -> Result<ProcessOutcome, ProcessError> {
    let started = Instant::now();
    let program = &spec.program;

    // std reports a missing cwd as NotFound, just like a missing program; check first to tell them apart.
    let cwd_is_dir = tokio::fs::metadata(&spec.cwd)
        .await
        .is_ok_and(|meta| meta.is_dir());
    if !cwd_is_dir {
        return Err(ProcessError::CwdMissing {
            program: program.clone(),
            path: spec.cwd.clone(),
        });
    }

    // A log shared by both streams is fed by one pipe, as a shell's `2>&1` does: the child's
    // writes reach it in the order they were made. Two pipes copied by two tasks interleave as
    // the scheduler pleases, cutting one stream's line with the other's (an evidence line
    // printed after a report on stderr was lost that way).
    let shared = spec.stderr_log == spec.stdout_log;
    let stdout_file = open_log(&spec.stdout_log).await?;
    let stderr_file = if shared {
        None
    } else {
        Some(open_log(&spec.stderr_log).await?)
    };
    let mut command = Command::new(program);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    if spec.env_clear {
        command.env_clear();
    }
    for name in &spec.env_remove {
        command.env_remove(name);
    }
    for (name, value) in &spec.env {
        command.env(name, value);
    }
    let one_pipe = if shared {
        let (read, write) = shared_pipe().map_err(|source| ProcessError::Spawn {
            program: program.clone(),
            source,
        })?;
        let write_too = write.try_clone().map_err(|source| ProcessError::Spawn {
            program: program.clone(),
            source,
        })?;
        command
            .stdout(Stdio::from(write))
            .stderr(Stdio::from(write_too));
        Some(read)
    } else {
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        None
    };

    let spawning = crate::run::exec::reaper::spawning();
    let spawned = command.spawn();
    // The command holds the parent's copies of a shared pipe's write end: closed now, or the
    // reader would never see the end of the output.
    drop(command);
    let mut child = spawned.map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            ProcessError::ProgramNotFound {
                program: program.clone(),
            }
        } else {
            ProcessError::Spawn {
                program: program.clone(),
                source,
            }
        }
    })?;
    let pid = child.id().ok_or_else(|| ProcessError::NoPid {
        program: program.clone(),
    })?;
    let pgid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| ProcessError::NoPid {
            program: program.clone(),
        })?;
    // A sibling task's reaping of escapees must not take this child (see `reaper::own`).
    let _own = crate::run::exec::reaper::own(pgid.as_raw_nonzero().get());
    drop(spawning);
    if let Some(window) = &spec.signals {
        window.adopt(pgid.as_raw_nonzero().get());
    }
    // Declared after `child`, so on an early return or a dropped future it runs first and kills the
    // whole group while the leader is still unreaped (its pid, hence the group id, cannot be reused yet).
    let mut guard = GroupGuard { pgid: Some(pgid) };
    if let Some(file) = &spec.group_file {
        tokio::fs::write(
            file,
            crate::run::exec::reaper::group_record(pgid.as_raw_nonzero().get()),
        )
        .await
        .map_err(|source| ProcessError::CreateLog {
            path: file.clone(),
            source,
        })?;
    }

    // Dropping the sender (when this future is dropped) also stops the pumps.
    let (stop_tx, stop_rx) = watch::channel(false);
    let missing = || ProcessError::Spawn {
        program: program.clone(),
        source: io::Error::other("output pipes missing after spawn"),
    };
    let (stdout_task, stderr_task) = match (one_pipe, stderr_file) {
        (Some(read), _) => {
            let reader =
                tokio::net::unix::pipe::Receiver::from_owned_fd(read).map_err(|source| {
                    ProcessError::Spawn {
                        program: program.clone(),
                        source,
                    }
                })?;
            let both = spawn_pump(spec, reader, stdout_file, Stream::Stdout, stop_rx);
            (both, None)
        }
        (None, Some(stderr_file)) => {
            let stdout = child.stdout.take().ok_or_else(missing)?;
            let stderr = child.stderr.take().ok_or_else(missing)?;
            (
                spawn_pump(spec, stdout, stdout_file, Stream::Stdout, stop_rx.clone()),
                Some(spawn_pump(
                    spec,
                    stderr,
                    stderr_file,
                    Stream::Stderr,
                    stop_rx,
                )),
            )
        }
        (None, None) => return Err(missing()),
    };

    let (termination, stragglers_killed) = supervise(&mut child, pgid, spec).await?;
    // The group is gone; from here its id may be reused by an unrelated process, so never signal it again.
    guard.pgid = None;

    let pumps = async {
        let stdout = stdout_task.await;
        let stderr = match stderr_task {
            Some(task) => Some(task.await),
            None => None,
        };
        (stdout, stderr)
    };
    tokio::pin!(pumps);
    let (stdout_pumped, stderr_pumped) = tokio::select! {
        done = &mut pumps => done,
        () = tokio::time::sleep(DRAIN_BOUND) => {
            tracing::warn!(
                program = %program,
                "output pipes still open {DRAIN_BOUND:?} after the process group ended; dropping the rest"
            );
            // Ignoring the error is fine: it only means both pumps already ended.
            let _ = stop_tx.send(true);
            pumps.await
        }
    };
    let stdout_pumped = pumped(stdout_pumped, program, "stdout")?;
    let stderr_pumped = match stderr_pumped {
        Some(joined) => pumped(joined, program, "stderr")?,
        None => Pumped::empty(spec.tail_bytes),
    };

    Ok(ProcessOutcome {
        termination,
        stdout_tail: stdout_pumped.tail.into_string(),
        stderr_tail: stderr_pumped.tail.into_string(),
        stdout_bytes: stdout_pumped.bytes,
        stderr_bytes: stderr_pumped.bytes,
        duration: started.elapsed(),
        stragglers_killed,
        pid,
    })
}

/// Sends SIGKILL to process group `pgid`. Returns `Ok(false)` when no such group exists.
///
/// Refuses `pgid <= 1` (which would mean "every process") and mvk's own group.
#[cfg(test)]
pub(crate) fn kill_group(pgid: i32) -> Result<bool, ProcessError> {
    signal_group(pgid, Signal::KILL)
}

/// Sends SIGTERM to process group `pgid`, with the same checks as [`kill_group`].
#[cfg(test)]
pub(crate) fn terminate_group(pgid: i32) -> Result<bool, ProcessError> {
    signal_group(pgid, Signal::TERM)
}

fn signal_group(pgid: i32, signal: Signal) -> Result<bool, ProcessError> {
    // `kill(-1, ..)` would signal every process we may signal; `from_raw` wants a non-negative id.
    let target = (pgid > 1)
        .then(|| Pid::from_raw(pgid))
        .flatten()
        .filter(|pid| *pid != rustix::process::getpgrp())
        .ok_or(ProcessError::UnsafeGroup { pgid })?;
    match rustix::process::kill_process_group(target, signal) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::SRCH) => Ok(false),
        Err(errno) => Err(ProcessError::Signal {
            pgid,
            source: errno.into(),
        }),
    }
}

/// Best-effort signal for the internal paths, where the group may already be gone.
fn signal_group_quietly(pgid: Pid, signal: Signal) {
    if let Err(error) = signal_group(pgid.as_raw_nonzero().get(), signal) {
        tracing::warn!(%error, "signalling a child process group failed");
    }
}

/// Kills the group when dropped, unless disarmed by clearing `pgid`.
struct GroupGuard {
    pgid: Option<Pid>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            signal_group_quietly(pgid, Signal::KILL);
        }
    }
}

/// Waits for the leader (enforcing the timeout) and makes sure the whole group is gone afterwards.
/// Returns the termination and whether stragglers were killed.
async fn supervise(
    child: &mut Child,
    pgid: Pid,
    spec: &ProcessSpec,
) -> Result<(Termination, bool), ProcessError> {
    let wait_error = |source| ProcessError::Wait {
        program: spec.program.clone(),
        source,
    };
    let timeout = async {
        match spec.timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let stop = async {
        match &spec.stop {
            Some(stop) => stop.pulled().await,
            None => std::future::pending().await,
        }
    };
    let ended = tokio::select! {
        // A process that already exited ended on its own, whatever was pulled meanwhile.
        biased;
        waited = child.wait() => Ok(waited.map_err(wait_error)?),
        () = timeout => Err(Termination::TimedOut),
        () = stop => Err(Termination::Stopped),
    };
    let cut = match ended {
        Ok(status) => return Ok((termination_of(status), kill_stragglers(pgid).await)),
        Err(cut) => cut,
    };

    // Timed out or stopped: ask the whole group to stop and give it the grace period to do so.
    signal_group_quietly(pgid, Signal::TERM);
    let deadline = tokio::time::Instant::now() + spec.kill_grace;
    match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(waited) => {
            waited.map_err(wait_error)?;
            let group_ended = tokio::time::timeout_at(deadline, wait_group_gone(pgid))
                .await
                .is_ok();
            let killed = !group_ended && kill_stragglers(pgid).await;
            Ok((cut, killed))
        }
        Err(_elapsed) => {
            signal_group_quietly(pgid, Signal::KILL);
            child.wait().await.map_err(wait_error)?;
            if tokio::time::timeout(KILL_WAIT, wait_group_gone(pgid))
                .await
                .is_err()
            {
                tracing::warn!(program = %spec.program, "process group survived SIGKILL for {KILL_WAIT:?}");
            }
            Ok((cut, false))
        }
    }
}

fn termination_of(status: ExitStatus) -> Termination {
    match (status.code(), status.signal()) {
        (Some(code), _) => Termination::Exited(code),
        (None, Some(signal)) => Termination::Signaled(signal),
        // wait(2) without WUNTRACED reports only exits and deaths by signal; keep a value anyway.
        (None, None) => Termination::Exited(-1),
    }
}

/// After the leader ended: SIGKILLs whatever is left of its group and waits (bounded) for it to vanish.
async fn kill_stragglers(pgid: Pid) -> bool {
    if !group_alive(pgid) {
        return false;
    }
    signal_group_quietly(pgid, Signal::KILL);
    if tokio::time::timeout(KILL_WAIT, wait_group_gone(pgid))
        .await
        .is_err()
    {
        tracing::warn!(
            pgid = pgid.as_raw_nonzero().get(),
            "stragglers survived SIGKILL for {KILL_WAIT:?}"
        );
    }
    true
}

async fn wait_group_gone(pgid: Pid) {
    while group_alive(pgid) {
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Whether a non-zombie process is in group `pgid`. `kill(-pgid, 0)` alone would count zombies, which
/// linger when the container's init does not reap orphans, so `/proc` is scanned (it is in-memory,
/// hence the blocking reads) and `kill` is only the fallback when `/proc` is unreadable.
fn group_alive(pgid: Pid) -> bool {
    // No member at all, zombies included: nothing to scan for (the common case, after a
    // leader that waited for its children; a /proc scan per process was a twentieth of a
    // wide flow's CPU).
    if rustix::process::test_kill_process_group(pgid).is_err_and(|e| e == rustix::io::Errno::SRCH) {
        return false;
    }
    let raw = pgid.as_raw_nonzero().get();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return rustix::process::test_kill_process_group(pgid).is_ok();
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let is_pid = name
            .to_str()
            .is_some_and(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()));
        // A process may vanish between listing and reading; that simply means it is not alive.
        is_pid
            && std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| parse_stat(&stat))
                .is_some_and(|(state, pgrp)| pgrp == raw && !matches!(state, 'Z' | 'X' | 'x'))
    })
}

/// Extracts (state, pgrp) from `/proc/<pid>/stat`. The command name may contain spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<(char, i32)> {
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, pgrp))
}

async fn open_log(path: &Path) -> Result<File, ProcessError> {
    if let Some(parent) = path.parent()
        && !parent.as_os_str().is_empty()
    {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|source| ProcessError::CreateLogDir {
                path: parent.to_path_buf(),
                source,
            })?;
    }
    File::create(path)
        .await
        .map_err(|source| ProcessError::CreateLog {
            path: path.to_path_buf(),
            source,
        })
}

/// What one pump collected from one pipe.
struct Pumped {
    tail: Tail,
    bytes: u64,
    /// First error; reading (or at least draining) goes on after a log write error so the child is
    /// not blocked on a full pipe.
    error: Option<ProcessError>,
}

impl Pumped {
    /// Nothing read: stderr's share when it went into stdout's pipe.
    fn empty(tail_bytes: usize) -> Self {
        Self {
            tail: Tail::new(tail_bytes),
            bytes: 0,
            error: None,
        }
    }
}

/// A pipe for both of a child's output streams: the read end (close-on-exec, kept by mvk) and
/// the write end to hand the child.
fn shared_pipe() -> io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)
}

fn spawn_pump<R>(
    spec: &ProcessSpec,
    reader: R,
    log: File,
    stream: Stream,
    stop: watch::Receiver<bool>,
) -> JoinHandle<Pumped>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (log_path, name) = match stream {
        Stream::Stdout => (spec.stdout_log.clone(), "stdout"),
        Stream::Stderr => (spec.stderr_log.clone(), "stderr"),
    };
    let tap = match stream {
        Stream::Stdout => spec.tap.clone(),
        Stream::Stderr => None,
    };
    tokio::spawn(pump(
        reader,
        (log, log_path, tap),
        spec.program.clone(),
        name,
        spec.tail_bytes,
        stop,
    ))
}

#[derive(Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// Copies a pipe into its log file, its tail and its tap until EOF, a read error, or `stop`.
async fn pump<R: AsyncRead + Unpin>(
    mut reader: R,
    (mut log, log_path, tap): (File, PathBuf, Option<Tap>),
    program: String,
    stream: &'static str,
    tail_bytes: usize,
    mut stop: watch::Receiver<bool>,
) -> Pumped {
    let mut buf = vec![0_u8; READ_CHUNK];
    let mut tail = Tail::new(tail_bytes);
    let mut bytes = 0_u64;
    let mut error = None;
    loop {
        let read = tokio::select! {
            // Stop first, so a process that writes without pause cannot keep us here.
            biased;
            _ = stop.wait_for(|&stop| stop) => break,
            read = reader.read(&mut buf) => read,
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(source) if source.kind() == io::ErrorKind::Interrupted => continue,
            Err(source) => {
                error.get_or_insert(ProcessError::ReadOutput {
                    program: program.clone(),
                    stream,
                    source,
                });
                break;
            }
        };
        let Some(chunk) = buf.get(..n) else { break };
        bytes += n as u64;
        tail.push(chunk);
        if error.is_none()
            && let Err(source) = log.write_all(chunk).await
        {
            error = Some(ProcessError::WriteLog {
                path: log_path.clone(),
                source,
            });
        }
        // Straight from the pipe: a meter sees a line as soon as the child wrote it.
        if let Some(tap) = &tap
            && let Ok(mut tap) = tap.0.lock()
        {
            tap.chunk(chunk);
        }
    }
    // tokio writes files in the background; flush to wait for the last write and see its error.
    if error.is_none()
        && let Err(source) = log.flush().await
    {
        error = Some(ProcessError::WriteLog {
            path: log_path,
            source,
        });
    }
    Pumped { tail, bytes, error }
}

fn pumped(
    joined: Result<Pumped, tokio::task::JoinError>,
    program: &str,
    stream: &'static str,
) -> Result<Pumped, ProcessError> {
    let pumped = joined.map_err(|source| ProcessError::OutputTask {
        program: program.to_owned(),
        stream,
        source,
    })?;
    match pumped.error {
        Some(error) => Err(error),
        None => Ok(pumped),
    }
}

/// The last `cap` bytes of a stream.
struct Tail {
    buf: VecDeque<u8>,
    cap: usize,
    /// Bytes were dropped from the front, so the first line or character may be partial.
    truncated: bool,
}

impl Tail {
    fn new(cap: usize) -> Self {
        Self {
            buf: VecDeque::with_capacity(cap.min(READ_CHUNK)),
            cap,
            truncated: false,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if chunk.len() >= self.cap {
            self.truncated |= !self.buf.is_empty() || chunk.len() > self.cap;
            self.buf.clear();
            self.buf
                .extend(chunk.get(chunk.len() - self.cap..).unwrap_or_default());
        } else {
            let overflow = (self.buf.len() + chunk.len()).saturating_sub(self.cap);
            if overflow > 0 {
                self.truncated = true;
                self.buf.drain(..overflow);
            }
            self.buf.extend(chunk);
        }
    }

    fn into_string(self) -> String {
        let bytes = Vec::from(self.buf);
        let start = if self.truncated {
            clean_start(&bytes)
        } else {
            0
        };
        String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).into_owned()
    }
}

/// Where a truncated tail should start: after the first newline if that is in the first half (so the
/// tail begins with a whole line), else after the continuation bytes of a character cut in two.
fn clean_start(bytes: &[u8]) -> usize {
    let half = bytes.get(..bytes.len() / 2).unwrap_or_default();
    if let Some(newline) = half.iter().position(|&b| b == b'\n') {
        return newline + 1;
    }
    bytes
        .iter()
        .take(3)
        .take_while(|&&b| b & 0b1100_0000 == 0b1000_0000)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec running `sh -c script` in `dir`, with logs in `dir/logs/`.
    fn sh(dir: &Path, script: &str) -> ProcessSpec {
        let mut spec = ProcessSpec::new(
            "sh",
            dir,
            dir.join("logs/stdout.log"),
            dir.join("logs/stderr.log"),
        );
        spec.args = vec!["-c".to_owned(), script.to_owned()];
        spec
    }

    /// Alive means present in /proc and not a zombie (orphans may never be reaped in a container).
    fn is_alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parse_stat(&stat))
            .is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
    }

    fn read_pid(path: &Path) -> i32 {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading pid file {}: {e}", path.display()));
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("pid file {} holds {text:?}: {e}", path.display()))
    }

    fn kill_pid(pid: i32) {
        if let Some(pid) = (pid > 1).then(|| Pid::from_raw(pid)).flatten() {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }

    #[tokio::test]
    async fn exit_code_output_and_logs_are_reported() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = sh(dir.path(), "echo out; echo err >&2; pwd; exit 3");
        let outcome = run(&spec).await.expect("run");
        assert_eq!(outcome.termination, Termination::Exited(3));
        assert!(!outcome.termination.success());
        let cwd = dir.path().canonicalize().expect("canonical temp dir");
        let expected_stdout = format!("out\n{}\n", cwd.display());
        assert_eq!(outcome.stdout_tail, expected_stdout);
        assert_eq!(outcome.stderr_tail, "err\n");
        assert_eq!(outcome.stdout_bytes, expected_stdout.len() as u64);
        assert_eq!(outcome.stderr_bytes, 4);
        assert!(!outcome.stragglers_killed);
        assert!(outcome.pid > 1);
        assert_eq!(
            std::fs::read_to_string(&spec.stdout_log).expect("stdout log"),
            expected_stdout
        );
        assert_eq!(
            std::fs::read_to_string(&spec.stderr_log).expect("stderr log"),
            "err\n"
        );
    }

    #[tokio::test]
    async fn success_and_stdin_is_dev_null() {
        let dir = tempfile::tempdir().expect("temp dir");
        // `cat` would hang on an inherited terminal or pipe; /dev/null gives immediate EOF.
        let outcome = run(&sh(dir.path(), "cat; echo done")).await.expect("run");
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert!(outcome.termination.success());
        assert_eq!(outcome.stdout_tail, "done\n");
    }

    #[tokio::test]
    async fn death_by_signal_is_reported() {
        let dir = tempfile::tempdir().expect("temp dir");
        let outcome = run(&sh(dir.path(), "kill -9 $$")).await.expect("run");
        assert_eq!(outcome.termination, Termination::Signaled(9));
    }

    #[tokio::test]
    async fn child_runs_in_its_own_process_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Field 5 of /proc/self/stat is the pgrp; the leader's pgrp must be its own pid.
        let outcome = run(&sh(dir.path(), "cut -d' ' -f5 /proc/$$/stat; echo $$"))
            .await
            .expect("run");
        let lines: Vec<&str> = outcome.stdout_tail.lines().collect();
        assert_eq!(lines.len(), 2, "{:?}", outcome.stdout_tail);
        assert_eq!(lines[0], lines[1]);
        assert_eq!(lines[1], outcome.pid.to_string());
        assert_ne!(
            lines[0],
            rustix::process::getpgrp().as_raw_nonzero().to_string()
        );
    }

    #[tokio::test]
    async fn missing_program_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = sh(dir.path(), "");
        spec.program = "mvk-no-such-program-xyz".to_owned();
        let error = run(&spec).await.expect_err("run should fail");
        assert!(
            matches!(&error, ProcessError::ProgramNotFound { program } if program == "mvk-no-such-program-xyz"),
            "{error:?}"
        );
        assert!(error.to_string().contains("`mvk-no-such-program-xyz`"));
    }

    #[tokio::test]
    async fn missing_cwd_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = sh(dir.path(), "true");
        spec.cwd = dir.path().join("absent");
        let error = run(&spec).await.expect_err("run should fail");
        assert!(
            matches!(&error, ProcessError::CwdMissing { path, .. } if *path == spec.cwd),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn environment_is_cleared_removed_and_set() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = ProcessSpec::new(
            "/usr/bin/env",
            dir.path(),
            dir.path().join("out"),
            dir.path().join("err"),
        );
        spec.env_clear = true;
        spec.env = vec![("MVK_A".to_owned(), "1".to_owned())];
        let outcome = run(&spec).await.expect("run");
        assert_eq!(outcome.stdout_tail, "MVK_A=1\n");

        spec.env_clear = false;
        spec.env_remove = vec!["PATH".to_owned(), "MVK_B".to_owned()];
        spec.env = vec![("MVK_B".to_owned(), "2".to_owned())];
        let outcome = run(&spec).await.expect("run");
        let lines: Vec<&str> = outcome.stdout_tail.lines().collect();
        assert!(lines.contains(&"MVK_B=2"), "{lines:?}");
        assert!(!lines.iter().any(|l| l.starts_with("PATH=")), "{lines:?}");
        // Inherited variables survive when not removed (cargo sets this one for tests).
        assert!(
            lines.iter().any(|l| l.starts_with("CARGO_PKG_NAME=")),
            "{lines:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn huge_output_goes_to_the_log_and_the_tail_stays_bounded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = sh(dir.path(), "head -c 200000000 /dev/zero | tr '\\0' a");
        spec.tail_bytes = 4096;
        let outcome = run(&spec).await.expect("run");
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert_eq!(outcome.stdout_bytes, 200_000_000);
        assert_eq!(
            std::fs::metadata(&spec.stdout_log)
                .expect("stdout log")
                .len(),
            200_000_000
        );
        assert_eq!(outcome.stdout_tail.len(), 4096);
        assert!(outcome.stdout_tail.bytes().all(|b| b == b'a'));
    }

    #[tokio::test]
    async fn combined_log_keeps_both_streams_in_the_order_written() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = sh(dir.path(), "echo one; echo two >&2; echo three");
        spec.stderr_log = spec.stdout_log.clone();
        let outcome = run(&spec).await.expect("run");
        let log = std::fs::read_to_string(&spec.stdout_log).expect("stdout log");
        assert_eq!(log, "one\ntwo\nthree\n");
        // One pipe: the tail is the combined output, in order, and stderr has none of its own.
        assert_eq!(outcome.stdout_tail, "one\ntwo\nthree\n");
        assert_eq!(outcome.stderr_tail, "");
        assert_eq!(outcome.stdout_bytes, 14);
    }

    // Guards the order two pipes lost: partial lines written alternately to stdout and stderr
    // must reach a shared log exactly as written (with two pipes this fails within a few runs).
    #[tokio::test]
    async fn combined_log_never_cuts_a_line_with_the_other_stream() {
        let dir = tempfile::tempdir().expect("temp dir");
        let script = "for i in 1 2 3 4 5 6 7 8; do printf 'err%s-' $i >&2; printf 'out%s-' $i; \
                      printf 'a\\n' >&2; printf 'b\\n'; done";
        let mut spec = sh(dir.path(), script);
        spec.stderr_log = spec.stdout_log.clone();
        let expected: String = (1..=8).map(|i| format!("err{i}-out{i}-a\nb\n")).collect();
        for round in 0..100 {
            run(&spec).await.expect("run");
            let log = std::fs::read_to_string(&spec.stdout_log).expect("stdout log");
            assert_eq!(log, expected, "round {round}");
        }
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group_even_when_term_is_ignored() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("grandchild.pid");
        let leader_file = dir.path().join("leader.pid");
        // Ignoring TERM is inherited by the grandchild, so only the SIGKILL escalation can end them.
        let mut spec = sh(
            dir.path(),
            &format!(
                "trap '' TERM; echo $$ > {}; sleep 1000 & echo $! > {}; while :; do sleep 1; done",
                leader_file.display(),
                pid_file.display()
            ),
        );
        spec.timeout = Some(Duration::from_secs(3));
        spec.kill_grace = Duration::from_millis(300);
        let outcome = run(&spec).await.expect("run");
        let grandchild = read_pid(&pid_file);
        let leader = read_pid(&leader_file);
        let (grandchild_alive, leader_alive) = (is_alive(grandchild), is_alive(leader));
        kill_pid(grandchild);
        assert_eq!(outcome.termination, Termination::TimedOut);
        assert!(!grandchild_alive, "grandchild {grandchild} survived");
        assert!(!leader_alive, "leader {leader} survived");
        assert!(outcome.duration >= Duration::from_secs(3));
        assert!(outcome.duration < Duration::from_secs(20), "{outcome:?}");
    }

    /// Counts the lines it sees, and pulls the stop at the third.
    struct StopAtThree {
        lines: usize,
        stop: Stop,
    }

    impl OutputTap for StopAtThree {
        fn chunk(&mut self, bytes: &[u8]) {
            self.lines += bytes.iter().filter(|&&b| b == b'\n').count();
            if self.lines >= 3 {
                self.stop.pull();
            }
        }
    }

    #[tokio::test]
    async fn a_tap_sees_the_output_as_it_comes_and_a_pulled_stop_ends_the_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("grandchild.pid");
        // Without end, a line every 50 ms, and a grandchild that outlives nothing.
        let mut spec = sh(
            dir.path(),
            &format!(
                "sleep 1000 & echo $! > {}; n=0; while :; do n=$((n+1)); echo line $n; sleep 0.05; done",
                pid_file.display()
            ),
        );
        let stop = Stop::default();
        let tap = std::sync::Arc::new(std::sync::Mutex::new(StopAtThree {
            lines: 0,
            stop: stop.clone(),
        }));
        spec.tap = Some(Tap(tap.clone()));
        spec.stop = Some(stop);
        spec.timeout = Some(Duration::from_secs(60));
        let outcome = run(&spec).await.expect("run");
        let grandchild = read_pid(&pid_file);
        let grandchild_alive = is_alive(grandchild);
        kill_pid(grandchild);
        assert_eq!(outcome.termination, Termination::Stopped);
        assert!(!grandchild_alive, "grandchild {grandchild} survived");
        assert!(outcome.duration < Duration::from_secs(10), "{outcome:?}");
        // Stopped after the third line, long before the timeout (a busy machine may let a line
        // or two more through before the SIGTERM lands).
        let seen = tap.lock().expect("tap").lines;
        assert!(seen >= 3, "{seen} lines");
        assert!(outcome.stdout_tail.starts_with("line 1\nline 2\nline 3\n"));
    }

    #[tokio::test]
    async fn timeout_term_ends_the_group_without_waiting_for_the_grace() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("grandchild.pid");
        let mut spec = sh(
            dir.path(),
            &format!("sleep 1000 & echo $! > {}; sleep 1000", pid_file.display()),
        );
        spec.timeout = Some(Duration::from_secs(2));
        // Longer than the duration bound below: finishing in time proves TERM did the job.
        spec.kill_grace = Duration::from_secs(60);
        let outcome = run(&spec).await.expect("run");
        let grandchild = read_pid(&pid_file);
        let alive = is_alive(grandchild);
        kill_pid(grandchild);
        assert_eq!(outcome.termination, Termination::TimedOut);
        assert!(!alive, "grandchild {grandchild} survived");
        assert!(!outcome.stragglers_killed);
        assert!(outcome.duration < Duration::from_secs(30), "{outcome:?}");
    }

    #[tokio::test]
    async fn stragglers_holding_the_pipe_are_killed_and_run_returns() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("straggler.pid");
        // The background sleep inherits stdout, so without killing it the pipe would never close.
        let spec = sh(
            dir.path(),
            &format!(
                "sleep 1000 & echo $! > {}; echo started",
                pid_file.display()
            ),
        );
        let outcome = tokio::time::timeout(Duration::from_secs(20), run(&spec))
            .await
            .expect("run() hung on a straggler")
            .expect("run");
        let straggler = read_pid(&pid_file);
        let alive = is_alive(straggler);
        kill_pid(straggler);
        assert!(!alive, "straggler {straggler} survived");
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert!(outcome.stragglers_killed);
        assert_eq!(outcome.stdout_tail, "started\n");
    }

    #[tokio::test]
    async fn a_pipe_held_outside_the_group_only_delays_by_the_drain_bound() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("escapee.pid");
        // `setsid` leaves the group, so the group kill cannot close this pipe; the drain bound must.
        // The leader waits for the pid file, written after `setsid`, so the escape has happened
        // before the leader exits (otherwise the straggler kill would catch it first).
        let pid_path = pid_file.display();
        let spec = sh(
            dir.path(),
            &format!(
                "setsid sh -c 'echo $$ > {pid_path}; exec sleep 1000' & \
                 while [ ! -s {pid_path} ]; do sleep 0.05; done; echo hi"
            ),
        );
        let result = tokio::time::timeout(Duration::from_secs(30), run(&spec)).await;
        kill_pid(read_pid(&pid_file));
        let outcome = result
            .expect("run() hung on an escaped pipe holder")
            .expect("run");
        assert_eq!(outcome.termination, Termination::Exited(0));
        assert_eq!(outcome.stdout_tail, "hi\n");
        assert!(outcome.duration >= DRAIN_BOUND, "{outcome:?}");
        assert!(!outcome.stragglers_killed, "{outcome:?}");
    }

    #[tokio::test]
    async fn dropping_the_run_future_kills_the_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("grandchild.pid");
        let spec = sh(
            dir.path(),
            &format!("sleep 1000 & echo $! > {}; sleep 1000", pid_file.display()),
        );
        let mut running = Box::pin(run(&spec));
        let deadline = Instant::now() + Duration::from_secs(20);
        let grandchild = loop {
            tokio::select! {
                ended = &mut running => panic!("run() ended early: {ended:?}"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
            let pid = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|text| text.trim().parse::<i32>().ok());
            if let Some(pid) = pid {
                break pid;
            }
            assert!(Instant::now() < deadline, "grandchild never started");
        };
        assert!(is_alive(grandchild));
        drop(running);
        // The guard's SIGKILL is sent synchronously on drop; dying takes a moment.
        let deadline = Instant::now() + Duration::from_secs(20);
        while is_alive(grandchild) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let alive = is_alive(grandchild);
        kill_pid(grandchild);
        assert!(
            !alive,
            "grandchild {grandchild} survived the dropped future"
        );
    }

    #[test]
    fn kill_group_refuses_dangerous_targets() {
        for pgid in [-5, 0, 1, rustix::process::getpgrp().as_raw_nonzero().get()] {
            assert!(
                matches!(kill_group(pgid), Err(ProcessError::UnsafeGroup { pgid: p }) if p == pgid),
                "{pgid}"
            );
        }
        assert!(matches!(
            terminate_group(1),
            Err(ProcessError::UnsafeGroup { .. })
        ));
    }

    #[tokio::test]
    async fn kill_group_kills_a_live_group() {
        let mut child = Command::new("sleep")
            .arg("1000")
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn sleep");
        let pgid = i32::try_from(child.id().expect("pid")).expect("pid fits i32");
        assert!(kill_group(pgid).expect("kill_group"));
        let status = child.wait().await.expect("run");
        assert_eq!(status.signal(), Some(9));
        // Reaped leader, empty group: nothing to signal.
        assert!(!kill_group(pgid).expect("kill_group"));
    }

    #[test]
    fn tail_keeps_only_the_last_bytes() {
        let mut tail = Tail::new(8);
        tail.push(b"abc");
        tail.push(b"defgh");
        assert!(!tail.truncated);
        tail.push(b"ij");
        assert_eq!(tail.buf.len(), 8);
        assert!(tail.truncated);
        assert_eq!(tail.into_string(), "cdefghij");

        let mut tail = Tail::new(4);
        tail.push(b"0123456789");
        assert_eq!(tail.buf.len(), 4);
        assert_eq!(tail.into_string(), "6789");

        let mut tail = Tail::new(0);
        tail.push(b"abc");
        assert_eq!(tail.into_string(), "");
    }

    #[test]
    fn truncated_tail_starts_at_a_line_or_char_boundary() {
        // A newline in the first half: start with the next whole line.
        let mut tail = Tail::new(10);
        tail.push(b"xxxxpartial\nwhole\n");
        assert_eq!(tail.into_string(), "whole\n");

        // No early newline: drop the continuation bytes of a split `é` (0xC3 0xA9).
        let mut tail = Tail::new(5);
        tail.push("aéabcd".as_bytes());
        assert_eq!(tail.buf.front(), Some(&0xA9));
        assert_eq!(tail.into_string(), "abcd");

        // Untruncated output is left exactly as it was.
        let mut tail = Tail::new(64);
        tail.push(b"partial\nwhole\n");
        assert_eq!(tail.into_string(), "partial\nwhole\n");
    }

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = "4242 (a) b (c)) S 1 4240 4240 0 -1 4194560";
        assert_eq!(parse_stat(stat), Some(('S', 4240)));
        assert_eq!(parse_stat("garbage"), None);
    }
}
