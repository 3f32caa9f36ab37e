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
use crate::run::exec::process::ProcessSpec;
use crate::run::judge::adapter::{LiveUsage, Usage};

/// How often the log is looked at when it is not known to have been written (it is found, and
/// a write missed, within this).
const POLL: Duration = Duration::from_millis(100);

/// At most this much of a log is read: a session's log is some megabytes; one that grows past
/// this is not a log (a sparse file the agent made), and the live figure stops there.
const MAX_LOG: u64 = 1 << 30;

/// The first line of a Gemini chat log (its session's header) is read up to this.
const MAX_HEADER: u64 = 64 * 1024;

/// The session log an agent keeps, and where: `None` for one whose output reports as it goes.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Codex { home: PathBuf },
    Gemini { home: PathBuf },
}

impl Kind {
    /// `agent`'s, from the environment its process `ps` is given (a sandbox keeps only some of
    /// mvk's): Codex's `CODEX_HOME` (else `~/.codex`), the Gemini CLI's `GEMINI_CLI_HOME` (else
    /// `~`) and its `.gemini`.
    pub(crate) fn of(agent: &Agent, ps: &ProcessSpec) -> Option<Kind> {
        let var = |name: &str| {
            if let Some((_, v)) = ps.env.iter().rev().find(|(k, _)| k == name) {
                return Some(PathBuf::from(v));
            }
            if ps.env_clear || ps.env_remove.iter().any(|k| k == name) {
                return None;
            }
            std::env::var_os(name).map(PathBuf::from)
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
        let logged = self.logged.lock().map(|l| l.clone()).unwrap_or_default();
        if logged.path.is_none() {
            tracing::warn!(
                session = %self.thread_id,
                "the agent's session log was not found: its budget was held between attempts only"
            );
        }
        let usage = logged.usage?;
        Some(Usage {
            session: Some(self.thread_id.clone()),
            ..usage
        })
    }
}

/// The follower's loop: finds the log, then reads what is appended to it as it is written
/// (woken by inotify, and every [`POLL`] in any case) until told it is done; then it reads up to
/// the length the log had at that moment, and stops. A line still being written is kept by the
/// reader until its end is read. At most [`MAX_LOG`] bytes are read.
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
    let mut read = 0u64;
    loop {
        let last = done.load(Ordering::Acquire);
        if file.is_none()
            && let Some(path) = kind.find(session)
            && let Some(f) = open_log(&path)
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
        // Once done, the log is read to where it ended then, not as it may go on growing.
        let end = if last {
            f.metadata().map_or(read, |m| m.len()).min(MAX_LOG)
        } else {
            MAX_LOG
        };
        while read < end {
            let want = usize::try_from(end - read).map_or(buf.len(), |w| w.min(buf.len()));
            let n = match f.read(buf.get_mut(..want).unwrap_or_default()) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            read += n as u64;
            reader.feed(buf.get(..n).unwrap_or_default(), |u| {
                if let Ok(mut g) = logged.lock() {
                    g.usage = Some(u.clone());
                }
                lock(gauge).observe(u);
            });
            if !last && done.load(Ordering::Acquire) {
                break;
            }
        }
        if last {
            return;
        }
        wait(notes.as_ref());
    }
}

/// Opens `path` for reading when it is a regular file, not through a symbolic link and without
/// waiting on a FIFO: the agent may write in the directories the log is looked for in.
fn open_log(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            (rustix::fs::OFlags::NOFOLLOW
                | rustix::fs::OFlags::NONBLOCK
                | rustix::fs::OFlags::CLOEXEC)
                .bits()
                .cast_signed(),
        )
        .open(path)
        .ok()?;
    f.metadata().ok().filter(std::fs::Metadata::is_file)?;
    Some(f)
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

/// Codex's log of `thread` under `home`: `sessions/YYYY/MM/DD/rollout-*-<thread>.jsonl`, dated
/// by Codex's local day: yesterday's, today's or tomorrow's in UTC.
fn find_codex(home: &Path, thread: &str) -> Option<PathBuf> {
    let suffix = format!("-{thread}.jsonl");
    let today = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    [today, today.saturating_sub(1), today + 1]
        .into_iter()
        .find_map(|day| {
            let (y, m, d) = civil(day);
            let dir = home.join(format!("sessions/{y:04}/{m:02}/{d:02}"));
            std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
                let name = e.file_name();
                let name = name.to_str()?;
                (name.starts_with("rollout-") && name.ends_with(&suffix)).then(|| e.path())
            })
        })
}

/// The date (year, month, day) of `days` since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
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
            let mut first = Vec::new();
            let file = open_log(&e.path())?;
            std::io::BufRead::read_until(
                &mut std::io::BufReader::new(file.take(MAX_HEADER)),
                b'\n',
                &mut first,
            )
            .ok()?;
            let named = format!("\"{id}\"");
            String::from_utf8_lossy(&first)
                .contains(&named)
                .then(|| e.path())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threads_log_is_found_on_the_day_codex_dated_it() {
        let home = tempfile::tempdir().unwrap();
        let today = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 86_400;
        let at = |day: u64, name: &str| {
            let (y, m, d) = civil(day);
            let dir = home.path().join(format!("sessions/{y:04}/{m:02}/{d:02}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), "").unwrap();
            dir.join(name)
        };
        // A local date ahead of UTC's.
        let wanted = at(today + 1, "rollout-x-bbb.jsonl");
        assert_eq!(find_codex(home.path(), "bbb"), Some(wanted));
        // Days no clock of a run starting now can give are not searched.
        at(today + 9, "rollout-x-ccc.jsonl");
        assert_eq!(find_codex(home.path(), "ccc"), None);
        assert_eq!(find_codex(&home.path().join("nowhere"), "bbb"), None);
    }

    #[test]
    fn days_since_1970_are_dated_as_the_calendar_does() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_793), (2026, 12, 6));
    }

    #[test]
    fn a_log_that_is_not_a_regular_file_is_not_opened() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.jsonl");
        std::fs::write(&real, "{}\n").unwrap();
        assert!(open_log(&real).is_some());
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(open_log(&link).is_none());
        let fifo = dir.path().join("fifo.jsonl");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Opened without waiting for a writer, and refused.
        assert!(open_log(&fifo).is_none());
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
