//! Signals to mvk in (SIGINT, SIGTERM, SIGHUP, SIGQUIT, each with the sender the kernel recorded
//! at delivery); out: a stop for those from outside the run (a person's Ctrl-C or Ctrl-\, a
//! `kill`, a CI cancel), and for those mvk's own agents or gates may have sent, nothing but a
//! count in the [`Window`] of the attempt that started them, which rejects its agent for it.
//! (SIGKILL and SIGSTOP cannot be caught: a sandbox's signal scope is what stops those; without
//! one, the ledger and `mvk resume` are what is left. Every other signal keeps its default.)
//!
//! Who sent a signal is decided from what cannot change after the fact, in this order: no
//! sender (the terminal, the kernel) or one of mvk's ancestors (read when the watch starts) is
//! outside; a process mvk started itself (every agent and gate leads its own process group,
//! registered in its window at spawn, and the record outlives the process) is that window's; a
//! sender still in `/proc` is placed by its group and its parents; a sender already gone cannot
//! be placed, and is *not* obeyed once mvk has started anything (an agent's `kill -TERM -$PGID;
//! exit` must not stop the run): it counts against the attempt open at the time when there is
//! only one (against none when several are: a task must not get its siblings rejected), and
//! mvk says on standard error how to stop it instead.
//!
//! An attempt reads its count only after [`settle`]: mvk signals itself a marker and waits until
//! the reading thread has seen it, so every signal delivered before is decided by then.

use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR2};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;

/// The signals that stop a run when they come from outside it.
pub(crate) const STOPS: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];
/// mvk's marker to itself (see [`settle`]); from anyone else it is ignored.
const MARKER: i32 = SIGUSR2;
/// How long [`settle`] waits for the reading thread at most.
const SETTLE_BOUND: Duration = Duration::from_secs(2);

/// How many watches are reading signals now (the marker is only sent while one is).
static WATCHES: AtomicUsize = AtomicUsize::new(0);
/// While no watch is active, the stop signals and the marker act as by default (see [`watch`]).
static DEFAULTS: OnceLock<Arc<AtomicBool>> = OnceLock::new();
/// Markers sent, and the number sent when the reading thread last saw one.
static MARKS_SENT: AtomicU64 = AtomicU64::new(0);
static MARKS_SEEN: AtomicU64 = AtomicU64::new(0);
/// Told when the reading thread sees a marker, so that [`settle`] wakes at once: a poll every
/// 2 ms cost each settle 2 ms or more, and every attempt settles after its agent and each gate.
static MARK_SEEN: tokio::sync::Notify = tokio::sync::Notify::const_new();
/// Every process group mvk started in a window, and the windows still open.
static GROUPS: Mutex<Vec<(i32, Weak<WindowState>)>> = Mutex::new(Vec::new());
/// Whether mvk has started a process in a window: from then on a sender that is gone may have
/// been one of its descendants.
static STARTED: AtomicBool = AtomicBool::new(false);

#[derive(Debug, Default)]
struct WindowState {
    groups: Mutex<BTreeSet<i32>>,
    signals: AtomicU64,
}

/// The processes one attempt started (its agent's tries), and the stop signals they may have
/// sent mvk. Open while it exists.
#[derive(Debug, Clone, Default)]
pub(crate) struct Window(Arc<WindowState>);

impl PartialEq for Window {
    fn eq(&self, other: &Window) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Window {}

impl Window {
    pub(crate) fn new() -> Window {
        Window::default()
    }

    /// Records that the process group `pgid` (a child mvk just spawned) belongs to this window.
    pub(crate) fn adopt(&self, pgid: i32) {
        STARTED.store(true, Ordering::SeqCst);
        self.0
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pgid);
        let mut groups = GROUPS.lock().unwrap_or_else(PoisonError::into_inner);
        groups.retain(|(g, w)| *g != pgid && w.strong_count() > 0);
        groups.push((pgid, Arc::downgrade(&self.0)));
    }

    /// The stop signals counted against this window so far (call [`settle`] first).
    pub(crate) fn signals(&self) -> u64 {
        self.0.signals.load(Ordering::SeqCst)
    }
}

/// Who sent a signal, as far as mvk can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    /// A person, a supervisor, the terminal: obeyed.
    Outside,
    /// A process of the group mvk started with this id.
    Group(i32),
    /// One of mvk's descendants outside any group it started (an escapee adopted by mvk), or a
    /// sender already gone: not obeyed, counted against the open window if it is the only one.
    Unplaced,
    /// mvk itself: the marker.
    Me,
}

/// Decides who sent a signal from `pid` (none: the kernel or the terminal), given mvk's pid,
/// its ancestors, the groups it started and whether it started any.
fn place(pid: Option<i32>, me: i32, ancestors: &[i32], started: bool) -> Sender {
    let Some(pid) = pid.filter(|p| *p > 0) else {
        return Sender::Outside;
    };
    if pid == me {
        return Sender::Me;
    }
    if ancestors.contains(&pid) {
        return Sender::Outside;
    }
    let known = |g: i32| {
        GROUPS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .any(|(k, _)| *k == g)
    };
    if known(pid) {
        return Sender::Group(pid);
    }
    // A sender (or a parent of it) gone before it could be read.
    let gone = if started {
        Sender::Unplaced
    } else {
        Sender::Outside
    };
    let Some((_, group)) = stat_of(pid) else {
        return gone;
    };
    if known(group) {
        return Sender::Group(group);
    }
    // Up its parents: a group mvk started (a process that left it with `setsid`), or mvk.
    let mut p = pid;
    for _ in 0..1024 {
        let Some((parent, _)) = stat_of(p) else {
            return gone;
        };
        if known(parent) {
            return Sender::Group(parent);
        }
        if parent == me {
            return Sender::Unplaced;
        }
        if parent <= 1 {
            return Sender::Outside;
        }
        p = parent;
    }
    Sender::Outside
}

/// Counts one signal against the window that owns `group`; an unplaced one only against the
/// open window when there is exactly one (it can be no one else's), never against several:
/// otherwise one task's agent could get every sibling's honest attempt rejected. Out comes
/// whether it was counted.
fn count(sender: Sender) -> bool {
    let groups = GROUPS.lock().unwrap_or_else(PoisonError::into_inner);
    let mut open: Vec<Arc<WindowState>> = Vec::new();
    for (g, w) in groups.iter() {
        if let Sender::Group(sent) = sender
            && sent != *g
        {
            continue;
        }
        if let Some(w) = w.upgrade()
            && !open.iter().any(|o| Arc::ptr_eq(o, &w))
        {
            open.push(w);
        }
    }
    if open.len() > 1 && sender == Sender::Unplaced {
        return false;
    }
    for w in &open {
        w.signals.fetch_add(1, Ordering::SeqCst);
    }
    !open.is_empty()
}

/// A thread reading mvk's stop signals; dropping it stops and joins the thread, which removes
/// the handlers it registered (so a program that runs several commands in turn does not pile
/// them up) and gives the signals their default action back.
pub(crate) struct Watch {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
    stops: tokio::sync::mpsc::UnboundedReceiver<i32>,
}

/// Starts reading SIGINT, SIGTERM, SIGHUP and SIGQUIT; `warn` tells the user about a stop
/// signal that was not obeyed because its sender could not be placed.
pub(crate) fn watch(warn: impl Fn(String) + Send + 'static) -> io::Result<Watch> {
    // Once per process: an action that does what the signal does by default while no watch
    // reads it (signal-hook leaves its own handler installed, doing nothing, otherwise).
    let defaults = match DEFAULTS.get() {
        Some(d) => Arc::clone(d),
        None => {
            let d = Arc::new(AtomicBool::new(true));
            for sig in STOPS.into_iter().chain([MARKER]) {
                signal_hook::flag::register_conditional_default(sig, Arc::clone(&d))?;
            }
            Arc::clone(DEFAULTS.get_or_init(|| d))
        }
    };
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let ancestors = ancestors_of(me);
    let mut signals = SignalsInfo::<WithOrigin>::new(STOPS.into_iter().chain([MARKER]))?;
    let handle = signals.handle();
    let (tx, stops) = tokio::sync::mpsc::unbounded_channel();
    WATCHES.fetch_add(1, Ordering::SeqCst);
    defaults.store(false, Ordering::SeqCst);
    let thread = std::thread::spawn(move || {
        for origin in signals.forever() {
            let sender = origin.process.map(|p| p.pid);
            let placed = place(sender, me, &ancestors, STARTED.load(Ordering::SeqCst));
            if origin.signal == MARKER {
                if placed == Sender::Me {
                    MARKS_SEEN.store(MARKS_SENT.load(Ordering::SeqCst), Ordering::SeqCst);
                    MARK_SEEN.notify_waiters();
                }
                continue;
            }
            match placed {
                Sender::Outside | Sender::Me => {
                    if tx.send(origin.signal).is_err() {
                        break;
                    }
                }
                Sender::Group(_) => {
                    let _ = count(placed);
                    tracing::warn!(
                        signal = origin.signal,
                        ?sender,
                        "ignored a signal one of mvk's own agents or gates sent it"
                    );
                }
                Sender::Unplaced => {
                    let counted = if count(placed) {
                        "counted against the one attempt running"
                    } else {
                        "counted against no attempt, as several were running"
                    };
                    warn(format!(
                        "ignored signal {} from process {}, which mvk cannot tell from one of its own agents or gates (it is gone, or is a descendant outside the agent's group), {counted}; to stop the run, press Ctrl-C or send the signal from a process that stays alive (a shell's `kill`)",
                        origin.signal,
                        sender.unwrap_or(0)
                    ));
                }
            }
        }
    });
    Ok(Watch {
        handle,
        thread: Some(thread),
        stops,
    })
}

/// Waits until every signal delivered to mvk before this call has been decided (counted
/// against its window, or passed on as a stop): mvk sends itself the marker and waits for the
/// reading thread to see it, up to a bound. Returns at once when no watch reads signals.
pub(crate) async fn settle() {
    if WATCHES.load(Ordering::SeqCst) == 0 {
        return;
    }
    let target = MARKS_SENT.fetch_add(1, Ordering::SeqCst) + 1;
    let me = rustix::process::getpid();
    if rustix::process::kill_process(me, rustix::process::Signal::USR2).is_err() {
        return;
    }
    let until = tokio::time::Instant::now() + SETTLE_BOUND;
    loop {
        // Registered before the count is read: a marker seen in between still wakes it.
        let seen = MARK_SEEN.notified();
        tokio::pin!(seen);
        seen.as_mut().enable();
        if MARKS_SEEN.load(Ordering::SeqCst) >= target {
            return;
        }
        if tokio::time::timeout_at(until, seen).await.is_err() {
            return;
        }
    }
}

impl Watch {
    /// Resolves when a signal from outside the run asks mvk to stop; the signal.
    pub(crate) async fn stopped(&mut self) -> i32 {
        // A closed channel means the thread is gone: nothing will ask to stop any more.
        match self.stops.recv().await {
            Some(signal) => signal,
            None => std::future::pending::<i32>().await,
        }
    }
}

/// A stop signal's name, and who sends it as far as the signal tells.
pub(crate) fn stop_name(signal: i32) -> (&'static str, &'static str) {
    match signal {
        SIGINT => ("SIGINT", "SIGINT (Ctrl-C)"),
        SIGTERM => ("SIGTERM", "SIGTERM (a `kill`, or a CI job cancelled)"),
        SIGHUP => ("SIGHUP", "SIGHUP (its terminal closed)"),
        SIGQUIT => ("SIGQUIT", "SIGQUIT (Ctrl-\\)"),
        _ => ("a signal", "a stop signal"),
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let last = WATCHES.fetch_sub(1, Ordering::SeqCst) == 1;
        self.handle.close();
        // The thread owns the registration: joined, its handlers are gone.
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        if last && let Some(d) = DEFAULTS.get() {
            d.store(true, Ordering::SeqCst);
        }
    }
}

/// mvk's parent, its parent, … up to init: senders that are never mvk's own.
fn ancestors_of(me: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut p = me;
    for _ in 0..1024 {
        match stat_of(p) {
            Some((parent, _)) if parent > 0 => {
                out.push(parent);
                p = parent;
            }
            _ => break,
        }
    }
    out
}

/// The parent pid and process group from `/proc/PID/stat` (the fields after the state, after
/// the `)` that ends the command name, which may itself hold spaces and parentheses).
fn stat_of(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(1);
    let parent = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((parent, group))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> i32 {
        i32::try_from(std::process::id()).unwrap()
    }

    #[test]
    fn senders_are_placed_by_what_cannot_race() {
        let ancestors = ancestors_of(me());
        assert!(!ancestors.is_empty());
        assert_eq!(place(None, me(), &ancestors, true), Sender::Outside);
        assert_eq!(place(Some(0), me(), &ancestors, true), Sender::Outside);
        assert_eq!(place(Some(me()), me(), &ancestors, true), Sender::Me);
        assert_eq!(
            place(Some(ancestors[0]), me(), &ancestors, true),
            Sender::Outside
        );
        // A group mvk started is known after its leader is gone.
        let window = Window::new();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        window.adopt(pid);
        child.wait().unwrap();
        assert_eq!(place(Some(pid), me(), &ancestors, true), Sender::Group(pid));
        assert!(count(Sender::Group(pid)));
        assert_eq!(window.signals(), 1);
        drop(window);
        // A sender that is gone cannot be placed once mvk has started something.
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_pid = i32::try_from(gone.id()).unwrap();
        gone.wait().unwrap();
        assert_eq!(
            place(Some(gone_pid), me(), &ancestors, true),
            Sender::Unplaced
        );
        assert_eq!(
            place(Some(gone_pid), me(), &ancestors, false),
            Sender::Outside
        );
        // A live descendant outside any known group is mvk's, without a group.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let sleeper_pid = i32::try_from(sleeper.id()).unwrap();
        assert_eq!(
            place(Some(sleeper_pid), me(), &ancestors, true),
            Sender::Unplaced
        );
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    #[test]
    fn an_unplaced_sender_is_counted_only_when_one_window_is_open() {
        // Windows of other tests may be open too: count through windows of this test only
        // when no other is (GROUPS is shared by the test process), so compare before and after.
        let a = Window::new();
        let b = Window::new();
        let spawn = || {
            let mut c = std::process::Command::new("true").spawn().unwrap();
            let pid = i32::try_from(c.id()).unwrap();
            c.wait().unwrap();
            pid
        };
        a.adopt(spawn());
        b.adopt(spawn());
        assert!(!count(Sender::Unplaced), "two windows open: nobody's");
        assert_eq!((a.signals(), b.signals()), (0, 0));
        drop(b);
        let counted = count(Sender::Unplaced);
        assert_eq!(a.signals(), u64::from(counted));
    }

    /// Run in a child process by the test below: two watches in turn, then SIGTERM to itself.
    #[test]
    #[ignore = "run by a_dropped_watch_gives_the_default_action_back, in a process of its own"]
    fn watch_twice_then_terminate() {
        if std::env::var_os("MVK_SIGNALS_CHILD").is_none() {
            return;
        }
        drop(watch(|_| {}).unwrap());
        drop(watch(|_| {}).unwrap());
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM)
            .unwrap();
        std::thread::sleep(Duration::from_secs(5));
        println!("still alive");
    }

    #[test]
    fn a_dropped_watch_gives_the_default_action_back() {
        // Without unregistering, the second watch's handlers pile on the first's, and once
        // signal-hook's handler stays alone SIGTERM is ignored: the child would live on.
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "run::exec::signals::tests::watch_twice_then_terminate",
                "--ignored",
                "--nocapture",
            ])
            .env("MVK_SIGNALS_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(SIGTERM),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}
