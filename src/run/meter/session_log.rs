//! Codex's session log, followed while `codex exec` runs. In: where Codex keeps its sessions
//! (`$CODEX_HOME`, else `~/.codex`) and the thread id it printed first (`thread.started`). Out:
//! the usage the log records after each model response (`token_usage_record`, the thread's
//! total so far), read by the Codex adapter's own scanner and handed to the meter's gauge as it
//! is written; and, once the process ended, the last of it.
//!
//! The log is `sessions/YYYY/MM/DD/rollout-<local time>-<thread id>.jsonl`; its date is Codex's
//! local one, so the newest few day directories are searched for the thread's file rather than
//! today's computed. A log that never appears (`--ephemeral`, another home) leaves the budget
//! held between attempts, as for any agent that reports once.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{Gauge, lock};
use crate::ir::{Adapter, Agent};
use crate::run::judge::adapter::{LiveUsage, Usage};

/// How often the log is looked at when it is not known to have been written (it is found, and
/// a write missed, within this).
const POLL: Duration = Duration::from_millis(100);

/// Day directories searched for the thread's log, newest first.
const DAYS_SEARCHED: usize = 3;

/// Where Codex keeps its sessions for `agent`: its own `CODEX_HOME`, mvk's, else `~/.codex`.
pub(crate) fn codex_home(agent: &Agent) -> PathBuf {
    agent
        .env
        .get("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CODEX_HOME").map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".codex")))
        .unwrap_or_else(|| PathBuf::from(".codex"))
}

/// What the followed log recorded: its path and the last usage read, once found.
#[derive(Debug, Clone, Default)]
struct Logged {
    path: Option<PathBuf>,
    usage: Option<Usage>,
}

/// A thread following one session log.
pub(crate) struct Follower {
    thread_id: String,
    done: Arc<AtomicBool>,
    logged: Arc<Mutex<Logged>>,
    thread: Option<JoinHandle<()>>,
}

impl Follower {
    /// Follows thread `thread`'s log under `home`, telling `gauge` of each usage it records.
    pub(super) fn start(home: PathBuf, thread: String, gauge: Arc<Mutex<Gauge>>) -> Follower {
        let done = Arc::new(AtomicBool::new(false));
        let logged = Arc::new(Mutex::new(Logged::default()));
        let (d, l, t) = (Arc::clone(&done), Arc::clone(&logged), thread.clone());
        let spawned = std::thread::Builder::new()
            .name("mvk-session-log".into())
            .spawn(move || follow(&home, &t, &d, &l, &gauge));
        Follower {
            thread_id: thread,
            done,
            logged,
            // Without a thread the budget is held between attempts, as for one that reports
            // once: nothing is lost but the live figure.
            thread: spawned.ok(),
        }
    }

    /// Reads what is left of the log, stops following it, and returns the last usage it
    /// recorded.
    pub(super) fn stop(mut self) -> Option<Usage> {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let usage = self.logged.lock().ok().and_then(|l| l.usage.clone())?;
        Some(Usage {
            session: Some(self.thread_id.clone()),
            ..usage
        })
    }
}

/// The follower's loop: finds the log, then reads what is appended to it as it is written
/// (woken by inotify, and every [`POLL`] in any case) until told it is done (one last read after
/// that). A line still being written is kept by the scanner until its end is read.
fn follow(
    home: &Path,
    thread: &str,
    done: &AtomicBool,
    logged: &Mutex<Logged>,
    gauge: &Mutex<Gauge>,
) {
    let mut file: Option<(File, Option<rustix::fd::OwnedFd>)> = None;
    let Ok(mut live) = LiveUsage::new(Adapter::Codex) else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let last = done.load(Ordering::Acquire);
        if file.is_none()
            && let Some(path) = find(home, thread)
            && let Ok(f) = File::open(&path)
        {
            file = Some((f, watch(&path)));
            if let Ok(mut l) = logged.lock() {
                l.path = Some(path);
            }
        }
        let Some((f, notes)) = file.as_mut() else {
            if last {
                return;
            }
            std::thread::sleep(POLL);
            continue;
        };
        loop {
            let n = match f.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            live.feed(buf.get(..n).unwrap_or_default(), |l| {
                let Some(u) = l.so_far() else {
                    return false;
                };
                if let Ok(mut g) = logged.lock() {
                    g.usage = Some(u.clone());
                }
                lock(gauge).observe(u);
                false
            });
        }
        if last {
            return;
        }
        wait(notes.as_ref());
    }
}

/// An inotify descriptor woken when `path` is written; `None` where none can be had (polling
/// then reads it).
fn watch(path: &Path) -> Option<rustix::fd::OwnedFd> {
    use rustix::fs::inotify;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(&fd, path, inotify::WatchFlags::MODIFY).ok()?;
    Some(fd)
}

/// Waits until the log is written (its notes drained) or [`POLL`] passed.
fn wait(notes: Option<&rustix::fd::OwnedFd>) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let Some(fd) = notes else {
        std::thread::sleep(POLL);
        return;
    };
    let timeout = Timespec {
        tv_sec: 0,
        tv_nsec: i64::from(POLL.subsec_nanos()),
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    if matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0) {
        let mut drain = [std::mem::MaybeUninit::<u8>::uninit(); 1024];
        let mut reader = rustix::fs::inotify::Reader::new(fd, &mut drain);
        while reader.next().is_ok() {}
    }
}

/// The log of `thread` under `home`: `sessions/*/*/*/rollout-*-<thread>.jsonl`, in the newest
/// [`DAYS_SEARCHED`] day directories.
fn find(home: &Path, thread: &str) -> Option<PathBuf> {
    let suffix = format!("-{thread}.jsonl");
    let mut days = Vec::new();
    for year in newest(&home.join("sessions"), 2) {
        for month in newest(&year, 2) {
            days.extend(newest(&month, DAYS_SEARCHED));
        }
    }
    days.sort_unstable_by(|a, b| b.cmp(a));
    days.truncate(DAYS_SEARCHED);
    days.iter().find_map(|day| {
        std::fs::read_dir(day).ok()?.flatten().find_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            (name.starts_with("rollout-") && name.ends_with(&suffix)).then(|| e.path())
        })
    })
}

/// The `n` last-sorting subdirectories of `dir` (date parts sort as their dates do).
fn newest(dir: &Path, n: usize) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort_unstable_by(|a, b| b.cmp(a));
    dirs.truncate(n);
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threads_log_is_found_in_the_newest_day_whatever_its_date() {
        let home = tempfile::tempdir().unwrap();
        let at = |day: &str, name: &str| {
            let d = home.path().join("sessions").join(day);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(name), "").unwrap();
            d.join(name)
        };
        at("2026/12/05", "rollout-2026-12-05T10-00-00-aaa.jsonl");
        // A local date ahead of UTC's.
        let wanted = at("2026/12/07", "rollout-2026-12-07T03-21-22-bbb.jsonl");
        assert_eq!(find(home.path(), "bbb"), Some(wanted));
        assert_eq!(find(home.path(), "ccc"), None);
        assert_eq!(find(&home.path().join("nowhere"), "bbb"), None);
    }

    /// Codex 0.171.0's own session log (tests/fixtures/adapters/SOURCES.md): four model
    /// responses, each recorded as it came with the thread's total so far.
    #[test]
    fn each_response_of_a_real_session_log_is_read_as_the_threads_total_so_far() {
        let log = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/adapters/codex-0.171.0-session.jsonl");
        let text = std::fs::read(log).unwrap();
        let mut live = LiveUsage::new(Adapter::Codex).unwrap();
        let mut totals = Vec::new();
        // Cut anywhere, as a log being written is read.
        for chunk in text.chunks(777) {
            live.feed(chunk, |l| {
                let t = l
                    .so_far()
                    .map(|u| (u.input_tokens, u.cached_tokens, u.output_tokens));
                if t.is_some() && totals.last() != Some(&t) {
                    totals.push(t);
                }
                false
            });
        }
        let totals: Vec<_> = totals.into_iter().flatten().collect();
        assert_eq!(
            totals,
            [
                (1200, 800, 40),
                (2400, 1600, 80),
                (3600, 2400, 120),
                (4800, 3200, 160)
            ]
        );
    }
}
