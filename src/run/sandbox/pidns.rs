//! A PID namespace of the sandboxed program's own: in goes the program to run, out comes the way
//! it ended, as the trampoline's own; nothing it starts outlives it.
//!
//! The trampoline (the process mvk started: its pid and process group are what mvk waits for,
//! times out and kills) starts `mvk __sandbox __init -- PROGRAM ARG…` as the first process of a
//! fresh PID namespace, that is its init (PID 1). The init, made non-dumpable first (the program
//! cannot trace it or write its memory), starts PROGRAM in a session of its own (so without a
//! controlling terminal), passes it SIGTERM, SIGINT, SIGHUP and SIGQUIT, reaps every orphan of the namespace,
//! and once PROGRAM has ended tells the trampoline how (over its stdin, one end of a socket
//! pair) and exits: the kernel then kills whatever is left in the namespace, and the trampoline
//! ends as PROGRAM did (the same exit code, or the same signal). What PROGRAM starts, `setsid`
//! and double forks included, stays in the namespace: mvk never adopts it, and it dies with
//! PROGRAM. A SIGKILL of the trampoline's group (mvk's timeout) kills the init with it, and so
//! the whole namespace.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rustix::io::Errno;
use rustix::process::{DumpableBehavior, Pid, Signal, WaitOptions};

/// `mvk __sandbox __init -- PROGRAM ARG…`: the namespace's init.
pub(super) const INIT: &str = "__init";
/// `mvk __sandbox __alone -- PROGRAM ARG…`: PROGRAM in a session of its own, as the init starts it.
pub(super) const ALONE: &str = "__alone";

/// The stop signals the init passes on to the program (anything else sent to an init from
/// outside its namespace, without a handler, is dropped by the kernel).
const FORWARDED: [(i32, Signal); 4] = [
    (signal_hook::consts::SIGTERM, Signal::TERM),
    (signal_hook::consts::SIGINT, Signal::INT),
    (signal_hook::consts::SIGHUP, Signal::HUP),
    (signal_hook::consts::SIGQUIT, Signal::QUIT),
];

/// Why [`isolate`] gave this process's next child no PID namespace of its own.
#[derive(Debug)]
pub(super) enum Unisolated {
    /// The kernel refused the namespaces: nothing changed, the program can run as without one.
    Refused(String),
    /// The namespaces were entered, but the user could not be mapped into the new user
    /// namespace: the next child is the PID namespace's PID 1 whatever runs, so the program
    /// must not run (without the init, every fork after its first child's end fails; with it,
    /// unmapped, it could write nothing).
    HalfEntered(String),
}

impl std::fmt::Display for Unisolated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unisolated::Refused(why) => f.write_str(why),
            Unisolated::HalfEntered(why) => write!(
                f,
                "the PID namespace was entered but the user could not be mapped into it ({why})"
            ),
        }
    }
}

/// Makes this process's next child the first of a new PID namespace: directly where it may
/// (root, or inside the user namespace the network's isolation entered), else inside a user
/// namespace of its own that maps the user to itself.
pub(super) fn isolate() -> Result<(), Unisolated> {
    use nix::sched::{CloneFlags, unshare};
    if unshare(CloneFlags::CLONE_NEWPID).is_ok() {
        return Ok(());
    }
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID)
        .map_err(|e| Unisolated::Refused(format!("no PID namespace: {e}")))?;
    super::netns::map_user(uid, gid).map_err(Unisolated::HalfEntered)
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Exited(i32),
    Signaled(i32),
}

impl Ended {
    fn line(self) -> String {
        match self {
            Ended::Exited(code) => format!("exit {code}\n"),
            Ended::Signaled(sig) => format!("signal {sig}\n"),
        }
    }

    fn parse(line: &str) -> Option<Ended> {
        let (kind, n) = line.trim().split_once(' ')?;
        let n = n.parse().ok()?;
        match kind {
            "exit" => Some(Ended::Exited(n)),
            "signal" => Some(Ended::Signaled(n)),
            _ => None,
        }
    }
}

/// Runs PROGRAM under an init of its own in the namespace [`isolate`] prepared, waits for it,
/// and returns the code to exit with; when the program died of a signal, this process dies of
/// the same signal first. `Err` when the init could not be started (nothing ran then).
pub(super) fn run(program: &OsStr, args: &[OsString]) -> Result<ExitCode, String> {
    let exe = crate::exe::path().map_err(|e| format!("cannot find mvk's executable: {e}"))?;
    let (report, theirs) =
        UnixStream::pair().map_err(|e| format!("cannot make the init's socket: {e}"))?;
    // The command (holding the init's end) is dropped at the end of the statement, so the
    // init's exit is the end of the report.
    let mut init = Command::new(exe)
        .arg(super::TRAMPOLINE)
        .arg(INIT)
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .spawn()
        .map_err(|e| format!("cannot start the namespace's init: {e}"))?;
    // The stop signals mvk sends the whole group reach the init too, which passes them on: this
    // process waits to report how the program took them. A handler (not an ignored signal)
    // leaves the init's defaults alone.
    let stay = Arc::new(AtomicBool::new(false));
    for (sig, _) in FORWARDED {
        let _ = signal_hook::flag::register(sig, Arc::clone(&stay));
    }
    let mut said = String::new();
    let _ = (&report).take(64).read_to_string(&mut said);
    let status = init.wait();
    let ended = Ended::parse(&said).or_else(|| {
        // The init died before it could tell (SIGKILLed with the group): as it died.
        let status = status.ok()?;
        status
            .code()
            .map(Ended::Exited)
            .or(status.signal().map(Ended::Signaled))
    });
    Ok(match ended {
        Some(Ended::Exited(code)) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Some(Ended::Signaled(sig)) => {
            // No core file of this process in the worktree for the program's crash.
            let _ = rustix::process::setrlimit(
                rustix::process::Resource::Core,
                rustix::process::Rlimit {
                    current: Some(0),
                    maximum: Some(0),
                },
            );
            let _ = signal_hook::low_level::emulate_default_handler(sig);
            // A signal whose default is not to end a process.
            ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
        }
        None => ExitCode::from(1),
    })
}

/// Says something on stderr, as the sandbox does (best effort: a broken stderr says nothing).
fn say(text: String) {
    let _ = writeln!(io::stderr(), "mvk sandbox: {text}");
}

/// `-- PROGRAM ARG…` as PROGRAM and its arguments; `None` (after the usage is said) otherwise.
fn program_of<'a>(args: &'a [OsString], mode: &str) -> Option<(&'a OsString, &'a [OsString])> {
    match (args.first(), args.get(1)) {
        (Some(sep), Some(program)) if sep == "--" => Some((program, &args[2..])),
        _ => {
            say(format!(
                "usage: mvk {} {mode} -- PROGRAM [ARG…]",
                super::TRAMPOLINE
            ));
            None
        }
    }
}

/// The exit code of a program that could not be run, as a shell gives it.
fn not_run(e: &io::Error) -> u8 {
    if e.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// The init: `ARGS` are what follows `mvk __sandbox __init`, that is `-- PROGRAM ARG…`; its stdin
/// is the socket [`run`] reads how the program ended from.
pub(super) fn init(args: &[OsString]) -> ExitCode {
    let tell = |ended: Ended| {
        let _ = rustix::io::write(io::stdin().as_fd(), ended.line().as_bytes());
    };
    let Some((program, program_args)) = program_of(args, INIT) else {
        return ExitCode::from(super::REFUSED_EXIT);
    };
    // Not dumpable, before the program runs: it has this process's uid and Landlock domain, so
    // where Yama does not forbid it (no Yama, `ptrace_scope` 0) it could attach to its PID 1
    // (or write its memory: `/proc/1/mem`, `process_vm_writev`) and act as it — leave the
    // trampoline's group and outlive the namespace. A process that is not dumpable is traced
    // only with CAP_SYS_PTRACE, which the program has not; its own `execve` makes the program
    // dumpable again.
    if let Err(e) = rustix::process::set_dumpable_behavior(DumpableBehavior::NotDumpable) {
        say(format!(
            "refusing to run: the program could take over the namespace's init (it cannot be made non-dumpable: {e})"
        ));
        tell(Ended::Exited(i32::from(super::REFUSED_EXIT)));
        return ExitCode::from(1);
    }
    let exe = match crate::exe::path() {
        Ok(exe) => exe,
        Err(e) => {
            say(format!("cannot find mvk's executable: {e}"));
            tell(Ended::Exited(i32::from(not_run(&e))));
            return ExitCode::from(1);
        }
    };
    // Registered before the program starts, so that no stop signal sent meanwhile is lost.
    let signals = signal_hook::iterator::Signals::new(FORWARDED.map(|(sig, _)| sig));
    // A session of its own (`mvk __sandbox __alone` calls `setsid`, then runs it: a `pre_exec`
    // hook would need `unsafe`), so no controlling terminal: the terminal mvk runs in, the
    // user's, is not the program's to open as `/dev/tty` and type into (TIOCSTI) for the user's
    // shell to run once mvk exits. The session's process group is the program's own: a
    // forwarded signal reaches all of it once, as mvk's group kill would have. Stdin stays
    // `/dev/null`, as mvk gives every process it starts.
    let child = Command::new(exe)
        .arg(super::TRAMPOLINE)
        .arg(ALONE)
        .arg("--")
        .arg(program)
        .args(program_args)
        .stdin(Stdio::null())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(e) => {
            say(format!("cannot run `{}`: {e}", program.to_string_lossy()));
            tell(Ended::Exited(i32::from(not_run(&e))));
            return ExitCode::from(1);
        }
    };
    let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) else {
        return ExitCode::from(1);
    };
    match signals {
        Ok(mut signals) => {
            std::thread::spawn(move || {
                for sig in signals.forever() {
                    if let Some((_, signal)) = FORWARDED.iter().find(|(s, _)| *s == sig) {
                        // Before its `setsid` the program has no group yet: it alone.
                        if rustix::process::kill_process_group(pid, *signal) == Err(Errno::SRCH) {
                            let _ = rustix::process::kill_process(pid, *signal);
                        }
                    }
                }
            });
        }
        Err(e) => say(format!("stop signals will not reach the program: {e}")),
    }
    // Every orphan of the namespace is this process's child: reap them all, until the program.
    loop {
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some((reaped, status))) if reaped == pid => {
                let ended = match (status.exit_status(), status.terminating_signal()) {
                    (Some(code), _) => Ended::Exited(code),
                    (None, Some(sig)) => Ended::Signaled(sig),
                    (None, None) => Ended::Exited(1),
                };
                tell(ended);
                // Exiting ends the namespace: the kernel kills what is left in it.
                return ExitCode::SUCCESS;
            }
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                say(format!("cannot wait for the program: {e}"));
                return ExitCode::from(1);
            }
        }
    }
}

/// `mvk __sandbox __alone -- PROGRAM ARG…` (`ARGS` what follows `__alone`): PROGRAM run in a
/// session of its own, which has no controlling terminal; never returns when it runs it.
pub(super) fn alone(args: &[OsString]) -> ExitCode {
    let Some((program, program_args)) = program_of(args, ALONE) else {
        return ExitCode::from(super::REFUSED_EXIT);
    };
    if let Err(e) = rustix::process::setsid() {
        say(format!(
            "refusing to run: it cannot have a session of its own (setsid: {e}), so the terminal mvk runs in would be its own"
        ));
        return ExitCode::from(super::REFUSED_EXIT);
    }
    let err = Command::new(program).args(program_args).exec();
    say(format!("cannot run `{}`: {err}", program.to_string_lossy()));
    ExitCode::from(not_run(&err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_the_program_ended_is_read_back_as_written() {
        for ended in [Ended::Exited(0), Ended::Exited(3), Ended::Signaled(9)] {
            assert_eq!(Ended::parse(&ended.line()), Some(ended));
        }
        assert_eq!(Ended::parse(""), None);
        assert_eq!(Ended::parse("exit x"), None);
    }
}
