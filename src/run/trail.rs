//! A run's transitions in; the files a person skims and a program parses out:
//! `.mvk/runs/<run>/events.jsonl` (appended, one JSON object a line), `.mvk/runs/<run>/heartbeat`,
//! and `.mvk/STATUS.md` with `.mvk/loop_state.json` (rewritten whole at each transition).
//!
//! Rewritten files go through a temporary file and a rename, so a reader never sees half of one.
//! Event lines are written with one `write_all` on a file opened for appending, so lines from
//! concurrent writers never interleave within a line.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::clock::{HEARTBEAT_EVERY, now};

#[derive(Debug, thiserror::Error)]
pub(crate) enum TrailError {
    #[error("cannot {action} `{}`", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot encode {what} as JSON")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> TrailError {
    let path = path.to_path_buf();
    move |source| TrailError::Io {
        action,
        path,
        source,
    }
}

/// One line of `events.jsonl`: an [`Event`](crate::run::event::Event)'s name and detail, with
/// when, in which run, task and attempt.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Line {
    pub(crate) time: String,
    pub(crate) run: String,
    pub(crate) task: Option<String>,
    pub(crate) attempt: Option<u32>,
    pub(crate) event: String,
    pub(crate) detail: Value,
}

/// The writer of one run's trail.
#[derive(Debug)]
pub(crate) struct Trail {
    mvk_dir: PathBuf,
    run_dir: PathBuf,
    run: String,
    events: Mutex<File>,
    events_path: PathBuf,
}

impl Trail {
    /// Creates `.mvk/runs/<run>/` under `mvk_dir` and opens its event log for appending.
    pub(crate) fn create(mvk_dir: &Path, run: &str) -> Result<Trail, TrailError> {
        let run_dir = mvk_dir.join("runs").join(run);
        fs::create_dir_all(&run_dir).map_err(io_err("create run directory", &run_dir))?;
        let events_path = run_dir.join("events.jsonl");
        let events = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&events_path)
            .map_err(io_err("open event log", &events_path))?;
        Ok(Trail {
            mvk_dir: mvk_dir.to_path_buf(),
            run_dir,
            run: run.to_string(),
            events: Mutex::new(events),
            events_path,
        })
    }

    pub(crate) fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    #[cfg(test)]
    pub(crate) fn events_path(&self) -> &Path {
        &self.events_path
    }

    /// Appends one event and returns it as written.
    pub(crate) fn event(
        &self,
        task: Option<&str>,
        attempt: Option<u32>,
        event: &str,
        detail: Value,
    ) -> Result<Line, TrailError> {
        let (time, _) = now();
        let record = Line {
            time,
            run: self.run.clone(),
            task: task.map(str::to_string),
            attempt,
            event: event.to_string(),
            detail,
        };
        let mut line = serde_json::to_vec(&record).map_err(|source| TrailError::Json {
            what: "an event",
            source,
        })?;
        line.push(b'\n');
        // A poisoned lock only means another thread panicked mid-write; the file is still usable.
        let mut file = self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&line)
            .and_then(|()| file.flush())
            .map_err(io_err("append to event log", &self.events_path))?;
        Ok(record)
    }

    /// Rewrites `.mvk/loop_state.json` and `.mvk/STATUS.md` from `state`.
    pub(crate) fn write_state(&self, state: &LoopState) -> Result<(), TrailError> {
        let json = serde_json::to_vec_pretty(state).map_err(|source| TrailError::Json {
            what: "the loop state",
            source,
        })?;
        // Rewritten at every step of every task (a wide flow: thousands of times), and only a
        // view of the ledger, which is what a crash is recovered from: replaced by rename, so a
        // reader never sees half a file, but not synced to disk each time.
        write_replacing(&self.mvk_dir.join("loop_state.json"), &json, false)?;
        write_replacing(
            &self.mvk_dir.join("STATUS.md"),
            render_status(state).as_bytes(),
            false,
        )
    }

    /// Writes TEXT as the handoff of the task whose directory (under the run's) is TASK_DIR,
    /// `TASK_DIR/HANDOFF.md`, then `HANDOFF.md` in the run's directory as every task's handoff
    /// in turn (by directory name): in a flow, several tasks may stop for a person, and none of
    /// theirs may hide another's. Returns the run's file.
    pub(crate) fn write_handoff(&self, task_dir: &str, text: &str) -> Result<PathBuf, TrailError> {
        let own = self.run_dir.join(task_dir).join("HANDOFF.md");
        if let Some(dir) = own.parent() {
            std::fs::create_dir_all(dir).map_err(|source| TrailError::Io {
                action: "create the task's directory",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        write_atomic(&own, text.as_bytes())?;
        let mut parts: Vec<PathBuf> = std::fs::read_dir(&self.run_dir)
            .map_err(|source| TrailError::Io {
                action: "list the run's directory",
                path: self.run_dir.clone(),
                source,
            })?
            .flatten()
            .map(|e| e.path().join("HANDOFF.md"))
            .filter(|p| p.is_file())
            .collect();
        parts.sort();
        let mut all = String::new();
        for part in &parts {
            let text = std::fs::read_to_string(part).map_err(|source| TrailError::Io {
                action: "read a task's handoff",
                path: part.clone(),
                source,
            })?;
            if !all.is_empty() {
                all.push_str("\n---\n\n");
            }
            all.push_str(&text);
        }
        let path = self.run_dir.join("HANDOFF.md");
        write_atomic(&path, all.as_bytes())?;
        Ok(path)
    }

    /// Starts touching `heartbeat` every [`HEARTBEAT_EVERY`] until the returned guard is dropped.
    /// The file holds the pid and the time, so a reader can tell a live run from a dead one.
    pub(crate) fn heartbeat(&self) -> Heartbeat {
        let path = self.run_dir.join("heartbeat");
        let stop = Arc::new(tokio::sync::Notify::new());
        let notified = Arc::clone(&stop);
        let handle = tokio::spawn(async move {
            loop {
                let (time, _) = now();
                let text = format!("{{\"pid\":{},\"time\":\"{time}\"}}\n", std::process::id());
                // A missed beat is harmless; the next one retries.
                let _ = write_atomic(&path, text.as_bytes());
                tokio::select! {
                    () = notified.notified() => break,
                    () = tokio::time::sleep(HEARTBEAT_EVERY) => {}
                }
            }
        });
        Heartbeat { stop, handle }
    }
}

/// Stops the heartbeat when dropped.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    stop: Arc<tokio::sync::Notify>,
    handle: tokio::task::JoinHandle<()>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.notify_one();
        self.handle.abort();
    }
}

/// Writes `bytes` to a sibling temporary file, syncs it, and renames it over `path`.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), TrailError> {
    write_replacing(path, bytes, true)
}

/// Writes `bytes` to a sibling temporary file (synced to disk first when SYNC) and renames it
/// over `path`.
fn write_replacing(path: &Path, bytes: &[u8], sync: bool) -> Result<(), TrailError> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let write = || -> io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        if sync {
            f.sync_data()?;
        }
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io_err("write", path)(e)
    })
}

/// What `loop_state.json` holds: where the run stands, for programs.
#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct LoopState {
    pub(crate) schema: &'static str,
    pub(crate) run: String,
    pub(crate) file: String,
    pub(crate) program: String,
    /// starting, agent, seal, gates, merging, waiting-human, finished, stopped.
    pub(crate) phase: String,
    pub(crate) started: String,
    pub(crate) updated: String,
    /// The task being worked on, if any.
    pub(crate) task: Option<String>,
    /// The attempt being made, 1-based over the whole ladder.
    pub(crate) iteration: u32,
    pub(crate) last_green_commit: Option<String>,
    pub(crate) open_failures: Vec<OpenFailure>,
    pub(crate) budget_spent: Spent,
    pub(crate) tasks: Vec<TaskState>,
    /// The run's outcome once it has one.
    pub(crate) outcome: Option<String>,
    pub(crate) exit_code: Option<u8>,
}

#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct OpenFailure {
    pub(crate) task: String,
    pub(crate) attempt: u32,
    pub(crate) kind: String,
    pub(crate) criterion: String,
}

#[derive(Debug, Clone, Copy, Serialize, Default, PartialEq, Eq)]
pub(crate) struct Spent {
    pub(crate) attempts: u32,
    pub(crate) tokens: u64,
    pub(crate) usd_micros: u64,
    pub(crate) wall_ms: u64,
}

#[derive(Debug, Clone, Serialize, Default)]
pub(crate) struct TaskState {
    pub(crate) name: String,
    /// pending, running, accepted, rejected, stuck, unknown, budget, human, skipped.
    pub(crate) state: String,
    pub(crate) attempt: u32,
    pub(crate) rung: u32,
    pub(crate) agent: Option<String>,
    pub(crate) branch: Option<String>,
    pub(crate) merged: Option<String>,
    pub(crate) spent: Spent,
    pub(crate) limits: Limits,
    /// The last failure or the reason for the state, in one line.
    pub(crate) note: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Default)]
pub(crate) struct Limits {
    pub(crate) iterations: u32,
    pub(crate) tokens: Option<u64>,
    pub(crate) usd_micros: Option<u64>,
    pub(crate) wall_ms: Option<u64>,
}

impl LoopState {
    pub(crate) const SCHEMA: &'static str = "mvk.loop_state.v1";
}

fn render_status(s: &LoopState) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "# mvk run {}\n", s.run);
    let _ = writeln!(out, "- loop: `{}` ({})", s.program, s.file);
    let _ = writeln!(out, "- phase: **{}**", s.phase);
    if let Some(outcome) = &s.outcome {
        let code = s
            .exit_code
            .map_or(String::new(), |c| format!(" (exit {c})"));
        let _ = writeln!(out, "- outcome: **{outcome}**{code}");
    }
    let _ = writeln!(out, "- started: {}; updated: {}", s.started, s.updated);
    if let Some(commit) = &s.last_green_commit {
        let _ = writeln!(out, "- last green commit: `{commit}`");
    }
    let _ = writeln!(out, "\n| task | state | attempt | rung | spent | note |");
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for t in &s.tasks {
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {} | {} | {} |",
            t.name,
            t.state,
            t.attempt,
            t.limits.iterations,
            match &t.agent {
                Some(a) => format!("{} {a}", t.rung),
                None => t.rung.to_string(),
            },
            spent_text(&t.spent, &t.limits),
            t.note.as_deref().unwrap_or("").replace('|', "\\|"),
        );
    }
    if !s.open_failures.is_empty() {
        let _ = writeln!(out, "\n## Open failures");
        for f in &s.open_failures {
            let _ = writeln!(
                out,
                "- {} attempt {} ({}): {}",
                f.task, f.attempt, f.kind, f.criterion
            );
        }
    }
    out
}

fn spent_text(spent: &Spent, limits: &Limits) -> String {
    let of = |v: String, limit: Option<String>| match limit {
        Some(l) => format!("{v}/{l}"),
        None => v,
    };
    format!(
        "{} · {} tok · {}",
        of(
            crate::plan::format_usd(spent.usd_micros),
            limits.usd_micros.map(crate::plan::format_usd)
        ),
        of(
            spent.tokens.to_string(),
            limits.tokens.map(|t| t.to_string())
        ),
        of(
            crate::plan::format_duration(Duration::from_millis(spent.wall_ms)),
            limits
                .wall_ms
                .map(|w| crate::plan::format_duration(Duration::from_millis(w)))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_json_lines_and_state_files_are_whole() {
        let dir = tempfile::tempdir().unwrap();
        let trail = Trail::create(dir.path(), "r1").unwrap();
        trail
            .event(
                Some("t"),
                Some(1),
                "attempt.started",
                serde_json::json!({"rung": 1}),
            )
            .unwrap();
        trail
            .event(
                None,
                None,
                "run.finished",
                serde_json::json!({"exit_code": 0}),
            )
            .unwrap();
        let text = fs::read_to_string(trail.events_path()).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "attempt.started");
        assert_eq!(lines[0]["task"], "t");
        assert_eq!(lines[1]["attempt"], Value::Null);

        let state = LoopState {
            schema: LoopState::SCHEMA,
            run: "r1".into(),
            phase: "gates".into(),
            tasks: vec![TaskState {
                name: "t".into(),
                state: "running".into(),
                note: Some("a | b".into()),
                ..TaskState::default()
            }],
            ..LoopState::default()
        };
        trail.write_state(&state).unwrap();
        let json: Value =
            serde_json::from_slice(&fs::read(dir.path().join("loop_state.json")).unwrap()).unwrap();
        assert_eq!(json["phase"], "gates");
        let md = fs::read_to_string(dir.path().join("STATUS.md")).unwrap();
        assert!(md.contains("| t | running |"), "{md}");
        assert!(md.contains("a \\| b"), "{md}");
        let leftovers: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
            .collect();
        assert!(leftovers.is_empty());
    }
}
