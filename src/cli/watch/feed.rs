//! Where `mvk watch` reads a run from, in; new events and the run's status laid onto its
//! [`Board`] at each poll, out. Two feeds, both read-only:
//!
//! - [`Feed::Ledger`]: the repository's `.mvk/ledger.db`, opened read-only (each poll a few
//!   short statements, so a running `mvk apply` never waits for the view): the events after the
//!   last one read, by id, then, when something happened (or a second has passed, for liveness),
//!   the run's status as `mvk status` builds it. Without a RUN it follows the latest run, and
//!   goes on to a newer one once the one it shows is over.
//! - [`Feed::File`]: an `events.jsonl` (a copy, a CI artifact, a shared checkout's), read from
//!   the byte offset where the last poll stopped; a line not yet whole waits for the next poll,
//!   a file that shrank is read again from its start. The `heartbeat` beside it, when there is
//!   one, says whether the run still beats.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use crate::cli::reading::{self, Ledgered};
use crate::cli::{Cli, CliError};
use crate::ledger::read::{EventRow, HEARTBEAT_STALE, Reader, RunRow, ms_since_epoch};
use crate::report::board::Board;

/// How often the status is read again when no event came: liveness and heartbeats move on.
const STATUS_EVERY: Duration = Duration::from_secs(1);
/// The most of an events file read in one poll, so that a long file replays without freezing
/// the view.
const FILE_CHUNK: u64 = 4 * 1024 * 1024;

/// A run's source.
pub(super) enum Feed {
    /// Boxed: it holds the ledger's connection, many times the file's state.
    Ledger(Box<LedgerFeed>),
    File(FileFeed),
}

/// What a poll changed.
#[derive(Debug, Default)]
pub(super) struct Polled {
    /// New events, or a new status.
    pub(super) changed: bool,
    /// The feed went on to another run (its id): the board was started again.
    pub(super) switched: Option<String>,
}

impl Feed {
    /// Reads what is new onto `board`.
    pub(super) fn poll(&mut self, board: &mut Board) -> Result<Polled, CliError> {
        match self {
            Feed::Ledger(l) => l.poll(board),
            Feed::File(f) => f.poll(board),
        }
    }

    /// Where the run's files are (`.mvk/runs/<run>/`): its attempts' logs.
    pub(super) fn run_dir(&self, run: &str) -> Option<PathBuf> {
        match self {
            Feed::Ledger(l) => Some(l.mvk_dir.join("runs").join(run)),
            Feed::File(f) => f.path.parent().map(Path::to_path_buf),
        }
    }
}

/// The repository's ledger, and the run it shows.
pub(super) struct LedgerFeed {
    mvk_dir: PathBuf,
    ledger: Option<Ledgered>,
    /// The run the command line named: never another.
    named: bool,
    run: Option<RunRow>,
    last_event: i64,
    read_at: Option<Instant>,
    /// The tasks each task starts after, by program digest.
    after: Option<(String, BTreeMap<String, Vec<String>>)>,
}

impl LedgerFeed {
    /// The feed of `run` (a unique prefix of its id), or of the latest run with `None`; a run
    /// that does not exist is a usage error now, but a repository without runs yet is watched
    /// until one starts.
    pub(super) fn open(cli: &Cli, run: Option<&str>) -> Result<LedgerFeed, CliError> {
        let mvk_dir = reading::mvk_dir(cli)?;
        let (ledger, found) = match run {
            Some(given) => {
                let ledger = reading::open(cli)?;
                let found = reading::find_run(&ledger, Some(given))?;
                (Some(ledger), Some(found))
            }
            None => match reading::open(cli) {
                Ok(ledger) => {
                    let latest = ledger.reader.runs().map_err(|e| reading::internal(&e))?;
                    let latest = latest.into_iter().next();
                    (Some(ledger), latest)
                }
                // No ledger yet: the first run makes one.
                Err(CliError::Usage { .. }) => (None, None),
                Err(e) => return Err(e),
            },
        };
        Ok(LedgerFeed {
            mvk_dir,
            ledger,
            named: run.is_some(),
            run: found,
            last_event: 0,
            read_at: None,
            after: None,
        })
    }

    fn poll(&mut self, board: &mut Board) -> Result<Polled, CliError> {
        let mut polled = Polled::default();
        if self.ledger.is_none() {
            match Reader::open(&self.mvk_dir.join("ledger.db")) {
                Ok(reader) => {
                    self.ledger = Some(Ledgered {
                        mvk_dir: self.mvk_dir.clone(),
                        reader,
                    });
                }
                Err(crate::ledger::read::ReadError::NoLedger { .. }) => return Ok(polled),
                Err(e) => return Err(reading::read_error(e)),
            }
        }
        let Some(ledger) = &self.ledger else {
            return Ok(polled);
        };
        let internal = |e: crate::ledger::LedgerError| reading::internal(&e);
        // Without a RUN: a newer run than one that is over (or than none) is the one to show.
        let stale = self.read_at.is_none_or(|t| t.elapsed() >= STATUS_EVERY);
        if !self.named && stale && (self.run.is_none() || board.over()) {
            let latest = ledger.reader.runs().map_err(internal)?.into_iter().next();
            if let Some(latest) = latest
                && self.run.as_ref().is_none_or(|r| r.id != latest.id)
            {
                polled.switched = Some(latest.id.clone());
                *board = Board::default();
                self.last_event = 0;
                self.read_at = None;
                self.run = Some(latest);
            }
        }
        let Some(run) = &self.run else {
            return Ok(polled);
        };
        let events = ledger
            .reader
            .events(&run.id, self.last_event)
            .map_err(internal)?;
        for e in &events {
            self.last_event = e.id;
            board.apply(e);
        }
        if !events.is_empty() || self.read_at.is_none_or(|t| t.elapsed() >= STATUS_EVERY) {
            let current = ledger
                .reader
                .run(&run.id)
                .map_err(internal)?
                .unwrap_or_else(|| run.clone());
            let status = crate::report::status::status(&ledger.reader, &ledger.mvk_dir, &current)
                .map_err(internal)?;
            let after = match &self.after {
                Some((digest, after)) if *digest == current.program_digest => after.clone(),
                _ => {
                    let ir = ledger
                        .reader
                        .program_ir(&current.program_digest)
                        .map_err(internal)?;
                    let after = after_of(ir.as_ref());
                    self.after = Some((current.program_digest.clone(), after.clone()));
                    after
                }
            };
            board.apply_status(&status, &after);
            self.run = Some(current);
            self.read_at = Some(Instant::now());
            polled.changed = true;
        }
        Ok(polled)
    }
}

/// Each task's `after`, from a stored program.
fn after_of(ir: Option<&Value>) -> BTreeMap<String, Vec<String>> {
    let tasks = ir
        .and_then(|ir| ir.get("tasks")?.as_array())
        .cloned()
        .unwrap_or_default();
    tasks
        .iter()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?.to_string();
            let after = t
                .get("after")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            Some((name, after))
        })
        .collect()
}

/// An `events.jsonl`, read as it grows.
pub(super) struct FileFeed {
    pub(super) path: PathBuf,
    offset: u64,
    /// The start of a line not yet whole.
    partial: Vec<u8>,
    next_id: i64,
    /// Lines that were not events (not JSON, or without a name).
    pub(super) unread: u64,
    /// The run's heartbeat, when its file is beside the events: ms since the epoch.
    pub(super) heartbeat_ms: Option<i64>,
}

/// One line of `events.jsonl`, as [`crate::run::trail::Line`] writes it.
#[derive(Deserialize)]
struct FileLine {
    time: String,
    #[serde(default)]
    run: String,
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    attempt: Option<u32>,
    event: String,
    #[serde(default)]
    detail: Value,
}

impl FileFeed {
    /// The feed of the events file at `path`, which must be readable.
    pub(super) fn open(path: &Path) -> Result<FileFeed, CliError> {
        std::fs::File::open(path).map_err(|e| CliError::Usage {
            message: format!("cannot read the events file `{}`: {e}", path.display()),
            hint: Some(
                "name a run's `events.jsonl` (`.mvk/runs/<run>/events.jsonl`, or a copy of one)"
                    .into(),
            ),
        })?;
        Ok(FileFeed {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
            next_id: 1,
            unread: 0,
            heartbeat_ms: None,
        })
    }

    fn poll(&mut self, board: &mut Board) -> Result<Polled, CliError> {
        let mut polled = Polled::default();
        let io = |e: std::io::Error| CliError::Internal {
            message: format!("cannot read the events file `{}`: {e}", self.path.display()),
        };
        self.heartbeat_ms = self
            .path
            .parent()
            .and_then(|dir| heartbeat_of(&dir.join("heartbeat")));
        let mut file = std::fs::File::open(&self.path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < self.offset {
            // Replaced or cut: read it again from its start.
            *board = Board::default();
            self.offset = 0;
            self.partial.clear();
            self.next_id = 1;
            self.unread = 0;
            polled.changed = true;
        }
        if len == self.offset {
            return Ok(polled);
        }
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut chunk = Vec::new();
        file.take(FILE_CHUNK).read_to_end(&mut chunk).map_err(io)?;
        self.offset += chunk.len() as u64;
        self.partial.extend_from_slice(&chunk);
        let whole = match self.partial.iter().rposition(|b| *b == b'\n') {
            Some(end) => self.partial.drain(..=end).collect::<Vec<u8>>(),
            None => return Ok(polled),
        };
        for line in whole.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match self.row_of(line) {
                Some(row) => {
                    board.apply(&row);
                    polled.changed = true;
                }
                None => self.unread += 1,
            }
        }
        Ok(polled)
    }

    /// The event a line holds, as a ledger row (numbered in the file's order).
    fn row_of(&mut self, line: &[u8]) -> Option<EventRow> {
        let l: FileLine = serde_json::from_slice(line).ok()?;
        let time_ms = humantime::parse_rfc3339_weak(&l.time)
            .ok()
            .map_or(0, ms_since_epoch);
        let id = self.next_id;
        self.next_id += 1;
        Some(EventRow {
            id,
            run: l.run,
            task: l.task,
            attempt: l.attempt,
            time_ms,
            event: l.event,
            detail: l.detail,
        })
    }

    /// Whether the heartbeat beside the events has stopped (older than a live run's).
    pub(super) fn heartbeat_stale(&self, now_ms: i64) -> Option<bool> {
        let beat = self.heartbeat_ms?;
        let stale = i64::try_from(HEARTBEAT_STALE.as_millis()).unwrap_or(i64::MAX);
        Some(now_ms.saturating_sub(beat) > stale)
    }
}

/// The time a `heartbeat` file holds (`{"pid":…,"time":"…"}`), else its modification time.
fn heartbeat_of(path: &Path) -> Option<i64> {
    let text = std::fs::read_to_string(path).ok()?;
    let from_text = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| humantime::parse_rfc3339_weak(v.get("time")?.as_str()?).ok())
        .map(ms_since_epoch);
    from_text.or_else(|| {
        let modified = std::fs::metadata(path).ok()?.modified().ok()?;
        Some(ms_since_epoch(modified))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    #[test]
    fn an_events_file_is_read_as_it_grows_a_line_at_a_time_and_again_when_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut file = std::fs::File::create(&path).unwrap();
        let started = r#"{"time":"2026-01-01T00:00:00Z","run":"r1","task":null,"attempt":null,"event":"run.started","detail":{"file":"loops/f.kdl","program":"f","tasks":["a","b"]}}"#;
        writeln!(file, "{started}").unwrap();
        // Half a line: not read until it is whole.
        let half = r#"{"time":"2026-01-01T00:00:01Z","run":"r1","task":"a","attempt":null,"#;
        write!(file, "{half}").unwrap();
        file.flush().unwrap();
        let mut feed = FileFeed::open(&path).unwrap();
        let mut board = Board::default();
        assert!(feed.poll(&mut board).unwrap().changed);
        assert_eq!(board.run, "r1");
        assert_eq!(board.tasks.len(), 2);
        assert_eq!(board.events.len(), 1);
        assert!(board.tasks[0].started_ms.is_none());
        writeln!(file, r#""event":"task.started","detail":{{}}}}"#).unwrap();
        writeln!(file, "not json").unwrap();
        file.flush().unwrap();
        assert!(feed.poll(&mut board).unwrap().changed);
        assert_eq!(board.events.len(), 2);
        assert_eq!(board.tasks[0].started_ms, Some(1_767_225_601_000));
        assert_eq!(feed.unread, 1);
        assert!(!feed.poll(&mut board).unwrap().changed, "nothing new");

        // Replaced by a shorter file: read from its start.
        std::fs::write(&path, format!("{started}\n")).unwrap();
        assert!(feed.poll(&mut board).unwrap().changed);
        assert_eq!(board.events.len(), 1);
        assert_eq!(feed.unread, 0);
    }

    #[test]
    fn a_missing_events_file_is_a_usage_error() {
        let Err(e) = FileFeed::open(Path::new("/nonexistent/events.jsonl")) else {
            panic!("opened");
        };
        assert_eq!(e.exit(), crate::cli::Exit::Usage);
    }
}
