//! Signals to mvk in (SIGINT, SIGTERM, SIGHUP, each with its sender); out: a stop for those from
//! outside the run (a person's Ctrl-C, a `kill`, a CI cancel), and for those one of mvk's own
//! descendants sent — an agent or a gate turning on mvk — nothing but a count, which the attempt
//! reads and rejects the agent for. (SIGKILL and SIGSTOP cannot be caught: a sandbox's signal
//! scope is what stops those; without one, the ledger and `mvk resume` are what is left.)

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;

/// Signals mvk's descendants sent it since it started.
static FROM_DESCENDANTS: AtomicU64 = AtomicU64::new(0);

/// How many signals mvk's own descendants have sent it so far.
pub fn from_descendants() -> u64 {
    FROM_DESCENDANTS.load(Ordering::SeqCst)
}

/// A thread reading mvk's stop signals; dropping it stops the thread.
pub struct Watch {
    handle: signal_hook::iterator::Handle,
    stops: tokio::sync::mpsc::UnboundedReceiver<i32>,
}

/// Starts reading SIGINT, SIGTERM and SIGHUP.
pub fn watch() -> io::Result<Watch> {
    let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])?;
    let handle = signals.handle();
    let (tx, stops) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for origin in signals.forever() {
            let sender = origin.process.map(|p| p.pid);
            if sender.is_some_and(is_descendant) {
                FROM_DESCENDANTS.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(
                    signal = origin.signal,
                    ?sender,
                    "ignored a signal one of mvk's own agents or gates sent it"
                );
                continue;
            }
            if tx.send(origin.signal).is_err() {
                break;
            }
        }
    });
    Ok(Watch { handle, stops })
}

impl Watch {
    /// Resolves when a signal from outside the run asks mvk to stop.
    pub async fn stopped(&mut self) {
        // A closed channel means the thread is gone: nothing will ask to stop any more.
        if self.stops.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.handle.close();
    }
}

/// Whether `pid` is a descendant of this process (orphans mvk adopted as subreaper included).
/// A sender that is already gone cannot be placed, and counts as outside.
fn is_descendant(pid: i32) -> bool {
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let mut p = pid;
    // Bounded: a process tree is never this deep, and a cycle in a racing /proc must not hang.
    for _ in 0..1024 {
        if p <= 1 {
            return false;
        }
        let Some(parent) = parent_of(p) else {
            return false;
        };
        if parent == me {
            return true;
        }
        p = parent;
    }
    false
}

/// The parent pid from `/proc/PID/stat` (the field after the state, after the `)` that ends the
/// command name, which may itself hold spaces and parentheses).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_a_descendant_and_mvk_itself_and_init_are_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert!(is_descendant(pid));
        assert!(!is_descendant(i32::try_from(std::process::id()).unwrap()));
        assert!(!is_descendant(1));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_descendant(pid), "a process that is gone is outside");
    }
}
