//! The trampoline, `mvk __sandbox …` run as the confined process itself: its arguments (a
//! [`Policy`] and the program) in; out, that process confined (network, Landlock, capabilities,
//! a PID namespace) and become the program, or an exit code when it cannot or must not be.
//! `probe` answers what the kernel allows instead.

use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

use super::netns::isolate_network;
use super::pidns;
use super::policy::Policy;
use super::ruleset::{open_grants, restrict};
use super::support::Support;
use super::{PRETEND_FLAG, PROBE, REFUSED_EXIT, TRAMPOLINE};

/// The trampoline: `ARGS` are what follows `mvk __sandbox`. Never returns when it runs the
/// program; returns an exit code when it cannot or must not.
pub(crate) fn trampoline(args: &[OsString]) -> ExitCode {
    // Whatever the environment says: the stand-in for an old kernel comes from mvk, in the
    // arguments (see `pretend_unsupported`).
    let pretending = format!("{} is set for mvk", crate::env::MVK_SANDBOX_UNSUPPORTED);
    if args.first().is_some_and(|a| a == PROBE) {
        let support = if args.get(1).is_some_and(|a| a == PRETEND_FLAG) {
            Support {
                landlock: "none".into(),
                network: Some(pretending.clone()),
                pid: Some(pretending),
            }
        } else {
            let network = isolate_network().err();
            Support {
                network,
                pid: pidns::isolate().err().map(|e| e.to_string()),
                landlock: restrict(&[], Vec::new()).unwrap_or_else(|_| "none".into()),
            }
        };
        println!("{}", serde_json::to_string(&support).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    if args.first().is_some_and(|a| a == pidns::INIT) {
        return pidns::init(&args[1..]);
    }
    if args.first().is_some_and(|a| a == pidns::ALONE) {
        return pidns::alone(&args[1..]);
    }
    let policy = args
        .first()
        .and_then(|a| a.to_str())
        .and_then(|a| serde_json::from_str::<Policy>(a).ok());
    let (Some(policy), Some(sep), Some(program)) = (policy, args.get(1), args.get(2)) else {
        eprintln!("mvk sandbox: usage: mvk {TRAMPOLINE} POLICY -- PROGRAM [ARG…]");
        return ExitCode::from(REFUSED_EXIT);
    };
    if sep != "--" {
        eprintln!("mvk sandbox: usage: mvk {TRAMPOLINE} POLICY -- PROGRAM [ARG…]");
        return ExitCode::from(REFUSED_EXIT);
    }
    // Best effort on a broken stderr: the refusal's exit code still says it.
    let say = |text: String| {
        let _ = writeln!(io::stderr(), "mvk sandbox: {text}");
    };
    let pretend = policy.pretend;
    // First: each grant is opened once, checked where it leads, and that very directory is
    // what Landlock grants, so no link planted between mvk's check and now can move it.
    let opened = match open_grants(&policy.grants, &policy.protected) {
        Ok(opened) => opened,
        Err(why) => {
            say(format!("refusing to run: {why}"));
            return ExitCode::from(REFUSED_EXIT);
        }
    };
    if !policy.network {
        let done = if pretend {
            Err(pretending.clone())
        } else {
            isolate_network()
        };
        if let Err(why) = done {
            if policy.required {
                say(format!(
                    "refusing to run: the network cannot be turned off ({why})"
                ));
                return ExitCode::from(REFUSED_EXIT);
            }
            say(format!("the network stays on: {why}"));
        }
    }
    // Before Landlock and the capability drop: entering the namespace needs the privilege.
    let pids = if pretend {
        Err(pidns::Unisolated::Refused(pretending))
    } else {
        pidns::isolate()
    };
    let level = if pretend {
        Ok("none".to_string())
    } else {
        restrict(&policy.write, opened)
    };
    match level {
        Ok(level) if level == "full" => {}
        Ok(level) | Err(level) => {
            if policy.required {
                say(format!(
                    "refusing to run: Landlock is not fully enforced ({level})"
                ));
                return ExitCode::from(REFUSED_EXIT);
            }
            say(format!("writes are not fully confined: Landlock {level}"));
        }
    }
    if !pretend && let Err(why) = drop_capabilities() {
        if policy.required {
            say(format!(
                "refusing to run: its capabilities cannot be dropped ({why})"
            ));
            return ExitCode::from(REFUSED_EXIT);
        }
        say(format!("the program keeps its capabilities: {why}"));
    }
    let own_pids = match pids {
        Ok(()) => true,
        Err(pidns::Unisolated::HalfEntered(why)) => {
            // Required or not: the program cannot run well in what is left (see `Unisolated`).
            say(format!(
                "refusing to run: {}",
                pidns::Unisolated::HalfEntered(why)
            ));
            return ExitCode::from(REFUSED_EXIT);
        }
        Err(pidns::Unisolated::Refused(why)) => {
            if policy.required {
                say(format!(
                    "refusing to run: it cannot have a PID namespace of its own, so what it starts could outlive it ({why})"
                ));
                return ExitCode::from(REFUSED_EXIT);
            }
            say(format!(
                "processes it starts can outlive it (no PID namespace of its own: {why})"
            ));
            false
        }
    };
    if own_pids {
        // Once the namespace is entered, the program cannot run without its init: its first
        // child would become the namespace's PID 1, and every fork after that child's end fails.
        return match pidns::run(program, &args[3..]) {
            Ok(code) => code,
            Err(why) => {
                say(format!("refusing to run: {why}"));
                ExitCode::from(REFUSED_EXIT)
            }
        };
    }
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(program).args(&args[3..]).exec();
    say(format!("cannot run `{}`: {err}", program.to_string_lossy()));
    ExitCode::from(if err.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}

/// Drops every capability this process holds, for good: Landlock confines paths, not
/// privileges, and as root (whose network namespace is entered without a user namespace) the
/// program would keep them all: `mknod` a device node of the disk where it may write and write
/// the disk through it, or `chattr +i` a file mvk must delete. The bounding set goes first, so
/// that `exec` gives root none back; then the ambient, inheritable, permitted and effective
/// sets. A process that holds none has nothing to drop.
fn drop_capabilities() -> Result<(), String> {
    use rustix::thread::{CapabilitySet, CapabilitySets, capabilities, set_capabilities};
    let held = capabilities(None).map_err(|e| format!("cannot read them: {e}"))?;
    if held.permitted.is_empty() && held.effective.is_empty() && held.inheritable.is_empty() {
        return Ok(());
    }
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(63)
        .min(63);
    for cap in 0..=last {
        match rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(
            1 << cap,
        )) {
            // A number this kernel does not know.
            Ok(()) | Err(rustix::io::Errno::INVAL) => {}
            Err(e) => {
                return Err(format!(
                    "cannot drop capability {cap} from the bounding set: {e}"
                ));
            }
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| format!("cannot clear the ambient set: {e}"))?;
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    set_capabilities(None, none).map_err(|e| format!("cannot clear them: {e}"))
}
