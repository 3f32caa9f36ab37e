//! An agent's own session log, followed while it runs, where its output reports its usage only
//! at its end. In: the tool's home directory and the session id it printed first. Out: the
//! usage the log records after each model response, handed to the meter's gauge as it is
//! written; and, once the process ended, the last of it.
//!
//! - Codex (`codex exec --json`, whose `thread.started` names the thread):
//!   `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<thread id>.jsonl`, whose
//!   `token_usage_record` holds the thread's total so far, read by the Codex adapter's own
//!   scanner. Its date is Codex's local one, so the newest few day directories are searched.
//! - The Gemini CLI (`--output-format stream-json`, whose `init` names the session):
//!   `~/.gemini/tmp/<project>/chats/session-<time>-<first 8 of the id>.jsonl`, a log of the
//!   chat's records: each response's `tokens` (its own, not a total), written again as its tool
//!   calls are added, and `$rewindTo` dropping records after one.
//!
//! A log that never appears (`--ephemeral`, another home) leaves the budget held between
//! attempts, as for any agent that reports once.

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

/// The session log an agent keeps, and where: `None` for one whose output reports as it goes.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Codex { home: PathBuf },
    Gemini { home: PathBuf },
}

impl Kind {
    /// `agent`'s, from its own environment, else mvk's: Codex's `CODEX_HOME` (else
    /// `~/.codex`), the Gemini CLI's `GEMINI_CLI_HOME` (else `~`) and its `.gemini`.
    pub(crate) fn of(agent: &Agent) -> Option<Kind> {
        let var = |name: &str| {
            agent
                .env
                .get(name)
                .map(PathBuf::from)
                .or_else(|| std::env::var_os(name).map(PathBuf::from))
        };
        let home = || var("HOME").unwrap_or_else(|| PathBuf::from("."));
        match agent.adapter {
            Adapter::Codex => Some(Kind::Codex {
                home: var("CODEX_HOME").unwrap_or_else(|| home().join(".codex")),
            }),
            Adapter::Gemini => Some(Kind::Gemini {
                home: var("GEMINI_CLI_HOME").unwrap_or_else(home).join(".gemini"),
            }),
            _ => None,
        }
    }

    /// The log of session `id`, once it exists.
    fn find(&self, id: &str) -> Option<PathBuf> {
        match self {
            Kind::Codex { home } => find_codex(home, id),
            Kind::Gemini { home } => find_gemini(home, id),
        }
    }

    fn reader(&self) -> Option<Reader> {
        match self {
            Kind::Codex { .. } => LiveUsage::new(Adapter::Codex)
                .ok()
                .map(|l| Reader::Codex(Box::new(l))),
            Kind::Gemini { .. } => Some(Reader::Gemini(GeminiChat::default())),
        }
    }
}

/// Reads a log as it grows, cut anywhere.
enum Reader {
    Codex(Box<LiveUsage>),
    Gemini(GeminiChat),
}

impl Reader {
    /// Reads `bytes`; `each` is told the total after every complete line that reports one.
    fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(Usage)) {
        match self {
            Reader::Codex(live) => live.feed(bytes, |l| {
                if let Some(u) = l.so_far() {
                    each(u);
                }
                false
            }),
            Reader::Gemini(chat) => chat.feed(bytes, each),
        }
    }
}

/// A Gemini CLI chat log read so far: each response's tokens by its record id, in order.
#[derive(Default)]
struct GeminiChat {
    partial: Vec<u8>,
    /// The line being read is over [`MAX_RECORD`]: dropped to its end.
    overlong: bool,
    responses: Vec<(String, Usage)>,
}

impl GeminiChat {
    fn feed(&mut self, bytes: &[u8], mut each: impl FnMut(Usage)) {
        for piece in bytes.split_inclusive(|&b| b == b'\n') {
            let Some(line) = piece.strip_suffix(b"\n") else {
                if self.partial.len() + piece.len() > MAX_RECORD {
                    self.overlong = true;
                    self.partial.clear();
                } else if !self.overlong {
                    self.partial.extend_from_slice(piece);
                }
                continue;
            };
            let whole = if std::mem::take(&mut self.overlong) {
                self.partial.clear();
                false
            } else if self.partial.is_empty() {
                self.line(line)
            } else {
                let mut joined = std::mem::take(&mut self.partial);
                joined.extend_from_slice(line);
                let whole = self.line(&joined);
                // Its capacity is kept for the next line.
                joined.clear();
                self.partial = joined;
                whole
            };
            if whole {
                each(self.total());
            }
        }
    }

    /// Reads one record; whether it changed the total.
    fn line(&mut self, line: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            return false;
        };
        // `$set` and `$rewindTo` lines carry no tokens; a response rewound past was still spent,
        // and stays counted.
        let (Some(id), Some(tokens)) = (
            v.get("id").and_then(serde_json::Value::as_str),
            v.get("tokens").filter(|t| t.is_object()),
        ) else {
            return false;
        };
        let n = |k: &str| {
            tokens
                .get(k)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        // As its `stats` count them: tool-use prompts are input, thoughts are output.
        let usage = Usage {
            input_tokens: n("input").saturating_add(n("tool")),
            output_tokens: n("output").saturating_add(n("thoughts")),
            cached_tokens: n("cached"),
            usd_micros: None,
            session: None,
        };
        // A record is written again as its tool calls are added: the same response.
        match self.responses.iter_mut().find(|(seen, _)| seen == id) {
            Some((_, u)) if *u == usage => false,
            Some((_, u)) => {
                *u = usage;
                true
            }
            None => {
                self.responses.push((id.to_string(), usage));
                true
            }
        }
    }

    fn total(&self) -> Usage {
        let mut total = Usage::default();
        for (_, u) in &self.responses {
            total.absorb(u);
        }
        total
    }
}

/// A chat record longer than this is not one mvk reads (a response's text can be long; its
/// tokens are in the same line).
const MAX_RECORD: usize = 16 * 1024 * 1024;

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
    /// Follows session `thread`'s log of `kind`, telling `gauge` of each usage it records.
    pub(super) fn start(kind: Kind, thread: String, gauge: Arc<Mutex<Gauge>>) -> Follower {
        let done = Arc::new(AtomicBool::new(false));
        let logged = Arc::new(Mutex::new(Logged::default()));
        let (d, l, t) = (Arc::clone(&done), Arc::clone(&logged), thread.clone());
        let spawned = std::thread::Builder::new()
            .name("mvk-session-log".into())
            .spawn(move || follow(&kind, &t, &d, &l, &gauge));
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
    kind: &Kind,
    session: &str,
    done: &AtomicBool,
    logged: &Mutex<Logged>,
    gauge: &Mutex<Gauge>,
) {
    let mut file: Option<(File, Option<rustix::fd::OwnedFd>)> = None;
    let Some(mut reader) = kind.reader() else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let last = done.load(Ordering::Acquire);
        if file.is_none()
            && let Some(path) = kind.find(session)
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
            reader.feed(buf.get(..n).unwrap_or_default(), |u| {
                if let Ok(mut g) = logged.lock() {
                    g.usage = Some(u.clone());
                }
                lock(gauge).observe(u);
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

/// Codex's log of `thread` under `home`: `sessions/*/*/*/rollout-*-<thread>.jsonl`, in the
/// newest [`DAYS_SEARCHED`] day directories.
fn find_codex(home: &Path, thread: &str) -> Option<PathBuf> {
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

/// The Gemini CLI's log of session `id` under `home` (`.gemini`):
/// `tmp/*/chats/session-*-<first 8 of id>.jsonl`, whose first record names the whole id (two
/// sessions can share 8 characters).
fn find_gemini(home: &Path, id: &str) -> Option<PathBuf> {
    let short = id.get(..8)?;
    let suffix = format!("-{short}.jsonl");
    let projects = std::fs::read_dir(home.join("tmp")).ok()?;
    projects.flatten().find_map(|project| {
        let chats = std::fs::read_dir(project.path().join("chats")).ok()?;
        chats.flatten().find_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if !(name.starts_with("session-") && name.ends_with(&suffix)) {
                return None;
            }
            let mut first = String::new();
            let file = File::open(e.path()).ok()?;
            std::io::BufRead::read_line(&mut std::io::BufReader::new(file), &mut first).ok()?;
            first.contains(&format!("\"{id}\"")).then(|| e.path())
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
        assert_eq!(find_codex(home.path(), "bbb"), Some(wanted));
        assert_eq!(find_codex(home.path(), "ccc"), None);
        assert_eq!(find_codex(&home.path().join("nowhere"), "bbb"), None);
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

    /// The Gemini CLI 0.61.0's own chat log (tests/fixtures/adapters/SOURCES.md): four responses,
    /// each written as it came, those calling tools twice; their sum is the CLI's final stats.
    #[test]
    fn a_real_gemini_chat_log_counts_each_response_once() {
        let log = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/adapters/gemini-0.61.0-chat.jsonl");
        let text = std::fs::read(log).unwrap();
        let mut reader = Reader::Gemini(GeminiChat::default());
        let mut totals = Vec::new();
        for chunk in text.chunks(501) {
            reader.feed(chunk, |u| {
                let t = (u.input_tokens, u.cached_tokens, u.output_tokens);
                if totals.last() != Some(&t) {
                    totals.push(t);
                }
            });
        }
        assert_eq!(
            totals,
            [
                (1200, 300, 80),
                (2500, 600, 170),
                (3900, 900, 270),
                (5400, 1200, 380)
            ]
        );
    }

    #[test]
    fn the_gemini_chat_of_the_session_is_the_one_whose_record_names_it() {
        let home = tempfile::tempdir().unwrap();
        let chats = home.path().join("tmp/slot-0/chats");
        std::fs::create_dir_all(&chats).unwrap();
        let id = "c0052bca-8fba-47da-8359-50ebb1026fd7";
        // Another session sharing the first 8 characters.
        std::fs::write(
            chats.join("session-2026-12-06T18-33-c0052bca.jsonl"),
            "{\"sessionId\":\"c0052bca-0000-0000-0000-000000000000\"}\n",
        )
        .unwrap();
        assert_eq!(find_gemini(home.path(), id), None);
        let wanted = chats.join("session-2026-12-06T18-34-c0052bca.jsonl");
        std::fs::write(&wanted, format!("{{\"sessionId\":\"{id}\"}}\n")).unwrap();
        assert_eq!(find_gemini(home.path(), id), Some(wanted));
    }
}
