//! A ledger's path in; typed rows (runs, tasks, attempts, gate results, costs, events, merges)
//! and a run's liveness out. Read only: a missing ledger is an error, never created.
//!
//! The reading commands (`mvk runs`, `status`, `log`, `stats`) go through [`Reader`]; it opens
//! the database read-only, so it can never take the write lock a running `mvk apply` needs, and
//! in WAL mode it never waits for one either.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use serde::Serialize;
use serde_json::Value;

use super::LedgerError;

/// A heartbeat older than this (five beats of [`crate::clock::HEARTBEAT_EVERY`]) has
/// stopped.
pub(crate) const HEARTBEAT_STALE: Duration = Duration::from_secs(10);

/// Why the ledger could not be read, or a run not found in it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("no runs in this repository yet (no ledger at `{}`)", path.display())]
    NoLedger { path: PathBuf },
    #[error("no runs in this repository yet")]
    NoRuns,
    #[error("no run matches `{given}`")]
    NoSuchRun {
        given: String,
        candidates: Vec<String>,
    },
    #[error("`{given}` matches {} runs", candidates.len())]
    Ambiguous {
        given: String,
        candidates: Vec<String>,
    },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// One `mvk apply`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunRow {
    pub(crate) id: String,
    pub(crate) file: String,
    pub(crate) program: String,
    pub(crate) kind: String,
    pub(crate) program_digest: String,
    pub(crate) repo_root: String,
    pub(crate) base_commit: String,
    pub(crate) target_branch: String,
    pub(crate) mode: String,
    pub(crate) pid: u32,
    pub(crate) host: String,
    /// `running`, `paused` or `finished`, as the ledger says (see [`liveness`]).
    pub(crate) state: String,
    pub(crate) outcome: Option<String>,
    pub(crate) exit_code: Option<i32>,
    pub(crate) started_at: i64,
    pub(crate) heartbeat_at: i64,
    pub(crate) finished_at: Option<i64>,
    /// The command that started it: `apply` (lands what passes) or `attempt` (one attempt,
    /// never landed; `mvk resume` does not continue it).
    pub(crate) command: String,
    /// The stop signal from outside that ended its process (`SIGINT (Ctrl-C)`), if one did
    /// since it last started.
    pub(crate) stopped_by: Option<String>,
}

/// One task of a run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TaskRow {
    pub(crate) run: String,
    pub(crate) name: String,
    pub(crate) digest: String,
    pub(crate) state: String,
    pub(crate) outcome: Option<String>,
    pub(crate) merged: Option<String>,
    pub(crate) started_at: Option<i64>,
    pub(crate) finished_at: Option<i64>,
    /// Raised each time `--accept-drift` re-planned the task: its budgets count this epoch only.
    pub(crate) epoch: u32,
}

/// One attempt at a task.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AttemptRow {
    pub(crate) id: i64,
    pub(crate) run: String,
    pub(crate) task: String,
    pub(crate) number: u32,
    pub(crate) rung: u32,
    pub(crate) agent: String,
    pub(crate) branch: String,
    /// The commit the attempt started from: its change is `base..head`.
    pub(crate) base: String,
    pub(crate) state: String,
    pub(crate) started_at: i64,
    pub(crate) exit_code: Option<i32>,
    pub(crate) timed_out: Option<bool>,
    pub(crate) agent_ms: Option<i64>,
    pub(crate) head: Option<String>,
    pub(crate) rate_limited: u32,
    pub(crate) outcome: Option<String>,
    pub(crate) failure_kind: Option<String>,
    pub(crate) signature: Option<String>,
    pub(crate) criterion: Option<String>,
    /// The gate that failed, from the stored failure.
    pub(crate) failed_gate: Option<String>,
    pub(crate) finished_at: Option<i64>,
    /// The task's epoch it was made in.
    pub(crate) epoch: u32,
}

/// One gate run of an attempt.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GateResultRow {
    pub(crate) attempt_id: i64,
    pub(crate) phase: String,
    pub(crate) ordinal: u32,
    pub(crate) name: String,
    pub(crate) verdict: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) executed: Option<i64>,
    pub(crate) passed: Option<i64>,
    pub(crate) failed: Option<i64>,
    pub(crate) skipped: Option<i64>,
    pub(crate) evidence: String,
    pub(crate) reason: String,
    pub(crate) duration_ms: i64,
    /// The gate's output, as a path (under `.mvk/runs/`).
    pub(crate) log: String,
}

/// The columns [`gate_result_row`] reads, from `gate_results g`.
pub(super) const GATE_RESULT_SELECT: &str =
    "SELECT g.attempt_id, g.phase, g.ordinal, g.name, g.verdict, g.exit_code, g.executed,
        g.passed, g.failed, g.skipped, g.evidence, g.reason, g.duration_ms, g.log
     FROM gate_results g";

/// One row of [`GATE_RESULT_SELECT`].
pub(super) fn gate_result_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GateResultRow> {
    Ok(GateResultRow {
        attempt_id: r.get(0)?,
        phase: r.get(1)?,
        ordinal: r.get(2)?,
        name: r.get(3)?,
        verdict: r.get(4)?,
        exit_code: r.get(5)?,
        executed: r.get(6)?,
        passed: r.get(7)?,
        failed: r.get(8)?,
        skipped: r.get(9)?,
        evidence: r.get(10)?,
        reason: r.get(11)?,
        duration_ms: r.get(12)?,
        log: r.get(13)?,
    })
}

/// What one agent (or reviewer) call spent.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CostRow {
    pub(crate) attempt_id: i64,
    pub(crate) kind: String,
    pub(crate) input_tokens: i64,
    pub(crate) output_tokens: i64,
    pub(crate) usd_micros: i64,
}

/// One event of a run's trail.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct EventRow {
    pub(crate) id: i64,
    pub(crate) run: String,
    pub(crate) task: Option<String>,
    pub(crate) attempt: Option<u32>,
    pub(crate) time_ms: i64,
    pub(crate) event: String,
    pub(crate) detail: Value,
}

/// One merge of an accepted attempt.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MergeRow {
    pub(crate) run: String,
    pub(crate) task: String,
    pub(crate) attempt_id: i64,
    pub(crate) into_branch: String,
    pub(crate) strategy: String,
    pub(crate) state: String,
    pub(crate) commit_id: Option<String>,
    pub(crate) detail: String,
    pub(crate) started_at: i64,
    pub(crate) finished_at: Option<i64>,
}

/// A ledger opened for reading.
pub(crate) struct Reader {
    pub(super) conn: Connection,
}

impl Reader {
    /// Opens the ledger at `path` read-only; a missing file is [`ReadError::NoLedger`].
    pub(crate) fn open(path: &Path) -> Result<Reader, ReadError> {
        if !path.is_file() {
            return Err(ReadError::NoLedger {
                path: path.to_path_buf(),
            });
        }
        let open_err = |source| LedgerError::Open {
            path: path.to_path_buf(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(open_err)?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(open_err)?;
        let found: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(open_err)?;
        let known = super::schema::known_version();
        if found > known {
            return Err(LedgerError::TooNew {
                path: path.to_path_buf(),
                found,
                known,
            }
            .into());
        }
        if found < known {
            // A ledger an older mvk wrote: migrate it (as any writer would on opening it), then
            // read it; the file exists, so nothing is created.
            drop(conn);
            drop(super::schema::open(path)?);
            return Self::open(path);
        }
        Ok(Reader { conn })
    }

    /// The rows `sql` selects with `args`, each mapped by `map`.
    fn rows<T>(
        &self,
        what: &str,
        sql: &str,
        args: impl rusqlite::Params,
        map: impl FnMut(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, LedgerError> {
        let read = |source| LedgerError::Read {
            what: what.to_string(),
            source,
        };
        let mut stmt = self.conn.prepare(sql).map_err(read)?;
        let rows = stmt.query_map(args, map).map_err(read)?;
        rows.collect::<rusqlite::Result<Vec<T>>>().map_err(read)
    }

    /// Every run, newest first.
    pub(crate) fn runs(&self) -> Result<Vec<RunRow>, LedgerError> {
        self.rows(
            "the runs",
            &format!("{RUN_SELECT} ORDER BY started_at DESC, id DESC"),
            [],
            run_row,
        )
    }

    /// The run `given` names (a whole id or a unique prefix of one), or the latest run.
    pub(crate) fn find_run(&self, given: Option<&str>) -> Result<RunRow, ReadError> {
        let runs = self.runs()?;
        let Some(given) = given else {
            return runs.into_iter().next().ok_or(ReadError::NoRuns);
        };
        if let Some(exact) = runs.iter().find(|r| r.id == given) {
            return Ok(exact.clone());
        }
        let mut matching: Vec<RunRow> = runs
            .iter()
            .filter(|r| r.id.starts_with(given))
            .cloned()
            .collect();
        match matching.len() {
            1 => Ok(matching.remove(0)),
            0 => Err(ReadError::NoSuchRun {
                given: given.to_string(),
                candidates: runs.iter().take(5).map(|r| r.id.clone()).collect(),
            }),
            _ => Err(ReadError::Ambiguous {
                given: given.to_string(),
                candidates: matching.into_iter().map(|r| r.id).collect(),
            }),
        }
    }

    /// The run with this exact id.
    pub(crate) fn run(&self, id: &str) -> Result<Option<RunRow>, LedgerError> {
        self.conn
            .query_row(&format!("{RUN_SELECT} WHERE id = ?1"), [id], run_row)
            .optional()
            .map_err(|source| LedgerError::Read {
                what: format!("run `{id}`"),
                source,
            })
    }

    /// The tasks of `run` (of every run with `None`), in the order they started.
    pub(crate) fn tasks(&self, run: Option<&str>) -> Result<Vec<TaskRow>, LedgerError> {
        self.rows(
            "the tasks",
            "SELECT run, name, digest, state, outcome, merged, started_at, finished_at, epoch
             FROM tasks
             WHERE ?1 IS NULL OR run = ?1 ORDER BY run, started_at, name",
            [run],
            |r| {
                Ok(TaskRow {
                    run: r.get(0)?,
                    name: r.get(1)?,
                    digest: r.get(2)?,
                    state: r.get(3)?,
                    outcome: r.get(4)?,
                    merged: r.get(5)?,
                    started_at: r.get(6)?,
                    finished_at: r.get(7)?,
                    epoch: r.get(8)?,
                })
            },
        )
    }

    /// The attempts of `run` (of every run with `None`) not abandoned, in order.
    pub(crate) fn attempts(&self, run: Option<&str>) -> Result<Vec<AttemptRow>, LedgerError> {
        self.rows(
            "the attempts",
            "SELECT id, run, task, number, rung, agent, branch, state, started_at, exit_code,
                timed_out, agent_ms, head, rate_limited, outcome, failure_kind, signature,
                criterion, json_extract(failure_json, '$.gate'), finished_at, epoch, base
             FROM attempts WHERE (?1 IS NULL OR run = ?1) AND state <> 'abandoned'
             ORDER BY run, task, number",
            [run],
            |r| {
                Ok(AttemptRow {
                    id: r.get(0)?,
                    run: r.get(1)?,
                    task: r.get(2)?,
                    number: r.get(3)?,
                    rung: r.get(4)?,
                    agent: r.get(5)?,
                    branch: r.get(6)?,
                    state: r.get(7)?,
                    started_at: r.get(8)?,
                    exit_code: r.get(9)?,
                    timed_out: r.get(10)?,
                    agent_ms: r.get(11)?,
                    head: r.get(12)?,
                    rate_limited: r.get(13)?,
                    outcome: r.get(14)?,
                    failure_kind: r.get(15)?,
                    signature: r.get(16)?,
                    criterion: r.get(17)?,
                    failed_gate: r.get(18)?,
                    finished_at: r.get(19)?,
                    epoch: r.get(20)?,
                    base: r.get(21)?,
                })
            },
        )
    }

    /// The gate results of the attempts of `run` (of every run with `None`), in order.
    pub(crate) fn gate_results(
        &self,
        run: Option<&str>,
    ) -> Result<Vec<GateResultRow>, LedgerError> {
        self.rows(
            "the gate results",
            &format!(
                "{GATE_RESULT_SELECT} JOIN attempts a ON a.id = g.attempt_id
                 WHERE ?1 IS NULL OR a.run = ?1 ORDER BY g.id"
            ),
            [run],
            gate_result_row,
        )
    }

    /// What the attempts of `run` (of every run with `None`) spent, one row per call.
    pub(crate) fn costs(&self, run: Option<&str>) -> Result<Vec<CostRow>, LedgerError> {
        self.rows(
            "the costs",
            "SELECT c.attempt_id, c.kind, c.input_tokens, c.output_tokens, c.usd_micros
             FROM costs c JOIN attempts a ON a.id = c.attempt_id
             WHERE ?1 IS NULL OR a.run = ?1 ORDER BY c.id",
            [run],
            |r| {
                Ok(CostRow {
                    attempt_id: r.get(0)?,
                    kind: r.get(1)?,
                    input_tokens: r.get(2)?,
                    output_tokens: r.get(3)?,
                    usd_micros: r.get(4)?,
                })
            },
        )
    }

    /// The checkpoints of `run` (stops for a person and their decisions), in order.
    pub(crate) fn checkpoints(&self, run: &str) -> Result<Vec<super::CheckpointRow>, LedgerError> {
        super::review::checkpoint_rows(&self.conn, run)
    }

    /// The follow-ups reviewers noted on `run` (on every run with `None`), oldest first.
    pub(crate) fn followups(
        &self,
        run: Option<&str>,
    ) -> Result<Vec<super::FollowupRow>, LedgerError> {
        self.rows(
            "the follow-ups",
            "SELECT a.run, a.task, a.number, r.verdict, f.note, f.recorded_at
             FROM followups f JOIN reviews r ON r.id = f.review_id
             JOIN attempts a ON a.id = r.attempt_id
             WHERE ?1 IS NULL OR a.run = ?1 ORDER BY f.id",
            [run],
            |r| {
                Ok(super::FollowupRow {
                    run: r.get(0)?,
                    task: r.get(1)?,
                    attempt: r.get(2)?,
                    verdict: r.get(3)?,
                    note: r.get(4)?,
                    recorded_at: r.get(5)?,
                })
            },
        )
    }

    /// The events of `run` with an id above `after`, in the order written.
    pub(crate) fn events(&self, run: &str, after: i64) -> Result<Vec<EventRow>, LedgerError> {
        self.rows(
            "the events",
            "SELECT id, run, task, attempt, time_ms, event, detail_json FROM events
             WHERE run = ?1 AND id > ?2 ORDER BY id",
            params![run, after],
            |r| {
                let detail: String = r.get(6)?;
                Ok(EventRow {
                    id: r.get(0)?,
                    run: r.get(1)?,
                    task: r.get(2)?,
                    attempt: r.get(3)?,
                    time_ms: r.get(4)?,
                    event: r.get(5)?,
                    // The column is CHECKed to be JSON.
                    detail: serde_json::from_str(&detail).unwrap_or(Value::String(detail)),
                })
            },
        )
    }

    /// The merges of `run`, in order.
    pub(crate) fn merges(&self, run: &str) -> Result<Vec<MergeRow>, LedgerError> {
        self.rows(
            "the merges",
            "SELECT run, task, attempt_id, into_branch, strategy, state, commit_id, detail,
                started_at, finished_at
             FROM merges WHERE run = ?1 ORDER BY id",
            [run],
            |r| {
                Ok(MergeRow {
                    run: r.get(0)?,
                    task: r.get(1)?,
                    attempt_id: r.get(2)?,
                    into_branch: r.get(3)?,
                    strategy: r.get(4)?,
                    state: r.get(5)?,
                    commit_id: r.get(6)?,
                    detail: r.get(7)?,
                    started_at: r.get(8)?,
                    finished_at: r.get(9)?,
                })
            },
        )
    }

    /// The stored IR of the program with this digest, as JSON.
    pub(crate) fn program_ir(&self, digest: &str) -> Result<Option<Value>, LedgerError> {
        let text: Option<String> = self
            .conn
            .query_row(
                "SELECT ir_json FROM programs WHERE digest = ?1",
                [digest],
                |r| r.get(0),
            )
            .optional()
            .map_err(|source| LedgerError::Read {
                what: format!("program `{digest}`"),
                source,
            })?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }
}

pub(crate) const RUN_SELECT: &str =
    "SELECT id, file, program, kind, program_digest, repo_root, base_commit,
    target_branch, mode, pid, host, state, outcome, exit_code, started_at, heartbeat_at,
    finished_at, command, stopped_by FROM runs";

pub(crate) fn run_row(r: &Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: r.get(0)?,
        file: r.get(1)?,
        program: r.get(2)?,
        kind: r.get(3)?,
        program_digest: r.get(4)?,
        repo_root: r.get(5)?,
        base_commit: r.get(6)?,
        target_branch: r.get(7)?,
        mode: r.get(8)?,
        pid: r.get(9)?,
        host: r.get(10)?,
        state: r.get(11)?,
        outcome: r.get(12)?,
        exit_code: r.get(13)?,
        started_at: r.get(14)?,
        heartbeat_at: r.get(15)?,
        finished_at: r.get(16)?,
        command: r.get(17)?,
        stopped_by: r.get(18)?,
    })
}

/// Whether a run is alive, decided from its pid, host and heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub(crate) enum Liveness {
    /// The ledger says it ended.
    Finished,
    /// Stopped at a checkpoint, for `mvk resume`.
    Paused,
    /// Its process is alive (or, on another host, its heartbeat is fresh).
    Running {
        /// The last heartbeat, ms since the epoch.
        heartbeat_ms: i64,
    },
    /// The ledger says running, but its process is gone: it died without finishing.
    Interrupted {
        pid: u32,
        heartbeat_ms: i64,
        reason: String,
        hint: String,
        /// The stop signal that ended it, when one from outside did (a person's stop, not a
        /// death).
        #[serde(skip_serializing_if = "Option::is_none")]
        stopped_by: Option<String>,
    },
    /// Another host holds it and its heartbeat has stopped: it may be dead, or cut off.
    Unknown {
        host: String,
        heartbeat_ms: i64,
        reason: String,
    },
}

impl Liveness {
    /// `finished`, `paused`, `running`, `interrupted` or `unknown`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Liveness::Finished => "finished",
            Liveness::Paused => "paused",
            Liveness::Running { .. } => "running",
            Liveness::Interrupted { .. } => "interrupted",
            Liveness::Unknown { .. } => "unknown",
        }
    }
}

/// Decides whether `run` (as the ledger in `mvk_dir` has it) is alive: a `running` run on this
/// host is alive while its process is; on another host, while its heartbeat file is fresher
/// than [`HEARTBEAT_STALE`].
pub(crate) fn liveness(mvk_dir: &Path, run: &RunRow) -> Liveness {
    match run.state.as_str() {
        "finished" => return Liveness::Finished,
        "paused" => return Liveness::Paused,
        _ => {}
    }
    let heartbeat_ms = last_heartbeat(mvk_dir, run);
    let now = ms_since_epoch(SystemTime::now());
    let stale = now.saturating_sub(heartbeat_ms) > millis(HEARTBEAT_STALE);
    let beat = rfc3339(heartbeat_ms);
    let hint = if run.command == "attempt" {
        // An attempt lands nothing, so it is not resumed as a run: another attempt goes on.
        format!("make another attempt with `mvk attempt {}`", run.file)
    } else {
        format!("continue with `mvk resume {}`", run.id)
    };
    if run.host == this_host() {
        // The run lock is the surest sign: the kernel drops it when its holder dies, and a
        // `mvk resume` holds it before the ledger names its pid.
        let lock = crate::run_lock::path(mvk_dir, &run.program);
        let held = crate::run_lock::is_held(&lock).unwrap_or(true)
            && crate::run_lock::holder(&lock).run == run.id;
        let gone = if held {
            None
        } else if !process_alive(run.pid) {
            Some(format!("process {} is gone", run.pid))
        } else if stale && !process_is_mvk(run.pid) {
            // The pid was reused by another program after mvk died.
            Some(format!("process {} is no longer mvk", run.pid))
        } else {
            Some(format!(
                "no process holds its lock `{}` (process {} is another program's now)",
                lock.display(),
                run.pid
            ))
        };
        return match gone {
            Some(why) => Liveness::Interrupted {
                pid: run.pid,
                heartbeat_ms,
                reason: match &run.stopped_by {
                    Some(by) => format!("stopped by {by} at {beat}"),
                    None => format!("{why}; the heartbeat stopped at {beat}"),
                },
                hint,
                stopped_by: run.stopped_by.clone(),
            },
            None => Liveness::Running { heartbeat_ms },
        };
    }
    if stale {
        Liveness::Unknown {
            host: run.host.clone(),
            heartbeat_ms,
            reason: format!(
                "host `{}` holds the run and its heartbeat stopped at {beat}",
                run.host
            ),
        }
    } else {
        Liveness::Running { heartbeat_ms }
    }
}

/// The later of the heartbeat file's time and the ledger's `heartbeat_at`.
fn last_heartbeat(mvk_dir: &Path, run: &RunRow) -> i64 {
    let path = mvk_dir.join("runs").join(&run.id).join("heartbeat");
    let from_text = std::fs::read_to_string(&path).ok().and_then(|text| {
        let v: Value = serde_json::from_str(&text).ok()?;
        let t = humantime::parse_rfc3339(v.get("time")?.as_str()?).ok()?;
        Some(ms_since_epoch(t))
    });
    let from_file = from_text.or_else(|| {
        let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
        Some(ms_since_epoch(modified))
    });
    from_file.map_or(run.heartbeat_at, |f| f.max(run.heartbeat_at))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn ms_since_epoch(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, millis)
}

/// `2026-01-01T00:00:00Z`: a time in ms since the epoch, to the second, UTC.
pub(crate) fn rfc3339(ms: i64) -> String {
    let t = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// This machine's host name, as runs record it.
pub(crate) fn this_host() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// Whether `pid` is a live process: a zombie is dead (it only waits to be reaped).
fn process_alive(pid: u32) -> bool {
    let Some(raw) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state letter follows the command name, which is in parentheses.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z' | 'X'))
        }
        Err(_) if Path::new("/proc/self/stat").exists() => false,
        // No /proc: ask the kernel; a process we may not signal is still alive.
        Err(_) => match rustix::process::test_kill_process(raw) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        },
    }
}

/// Whether `pid` runs an `mvk` binary (true when it cannot be told).
fn process_is_mvk(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => cmdline
            .split(|b| *b == 0)
            .next()
            .and_then(|argv0| Path::new(std::str::from_utf8(argv0).ok()?).file_name())
            .is_some_and(|name| name.to_string_lossy().starts_with("mvk")),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(state: &str, pid: u32, host: &str, heartbeat_at: i64) -> RunRow {
        RunRow {
            id: "20260101T000000Z-abcd".into(),
            file: "loops/t.kdl".into(),
            program: "t".into(),
            kind: "loop".into(),
            program_digest: "d".into(),
            repo_root: "/r".into(),
            base_commit: "0".repeat(40),
            target_branch: "main".into(),
            mode: "auto".into(),
            pid,
            host: host.into(),
            state: state.into(),
            outcome: None,
            exit_code: None,
            started_at: 0,
            heartbeat_at,
            finished_at: None,
            command: "apply".into(),
            stopped_by: None,
        }
    }

    #[test]
    fn a_run_whose_process_is_gone_is_interrupted_with_the_resume_hint() {
        let dir = tempfile::tempdir().unwrap();
        // A child that has exited and been reaped: its pid names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let r = run("running", pid, &this_host(), 0);
        let Liveness::Interrupted { reason, hint, .. } = liveness(dir.path(), &r) else {
            panic!("not interrupted: {:?}", liveness(dir.path(), &r));
        };
        assert!(
            reason.starts_with(&format!(
                "process {pid} is gone; the heartbeat stopped at 1970-01-01T00:00:00"
            )),
            "{reason}"
        );
        assert_eq!(hint, "continue with `mvk resume 20260101T000000Z-abcd`");
    }

    #[test]
    fn a_live_process_on_this_host_is_running_while_it_holds_the_run_lock() {
        let dir = tempfile::tempdir().unwrap();
        let now = ms_since_epoch(SystemTime::now());
        let r = run("running", std::process::id(), &this_host(), now);
        let holder = crate::run_lock::Holder {
            run: r.id.clone(),
            pid: r.pid,
            host: r.host.clone(),
            since: rfc3339(now),
            command: "apply".into(),
        };
        let lock =
            crate::run_lock::RunLock::acquire(dir.path(), &r.program, &holder, false, |_| {})
                .unwrap();
        assert_eq!(
            liveness(dir.path(), &r),
            Liveness::Running { heartbeat_ms: now }
        );
        // A resume holds the lock before the ledger names its pid: the old, dead pid with the
        // lock held by this run is still running.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let taken_over = RunRow {
            pid: dead,
            ..r.clone()
        };
        assert_eq!(liveness(dir.path(), &taken_over).name(), "running");
        // The same live pid without the lock: its mvk is gone (the pid is someone else's).
        drop(lock);
        assert_eq!(liveness(dir.path(), &r).name(), "interrupted");
    }

    #[test]
    fn another_host_is_judged_by_its_heartbeat_file() {
        let dir = tempfile::tempdir().unwrap();
        let r = run("running", 1, "elsewhere.invalid", 0);
        assert_eq!(liveness(dir.path(), &r).name(), "unknown");
        let beat_dir = dir.path().join("runs").join(&r.id);
        std::fs::create_dir_all(&beat_dir).unwrap();
        let (time, ms) = crate::clock::now();
        std::fs::write(
            beat_dir.join("heartbeat"),
            format!("{{\"pid\":1,\"time\":\"{time}\"}}\n"),
        )
        .unwrap();
        assert_eq!(
            liveness(dir.path(), &r),
            Liveness::Running { heartbeat_ms: ms }
        );
    }

    #[test]
    fn finished_and_paused_runs_are_what_the_ledger_says() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            liveness(dir.path(), &run("finished", 1, "h", 0)),
            Liveness::Finished
        );
        assert_eq!(
            liveness(dir.path(), &run("paused", 1, "h", 0)),
            Liveness::Paused
        );
    }

    #[test]
    fn a_missing_ledger_is_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".mvk/ledger.db");
        assert!(matches!(
            Reader::open(&path),
            Err(ReadError::NoLedger { .. })
        ));
        assert!(!path.exists());
        assert!(!dir.path().join(".mvk").exists());
    }

    #[test]
    fn a_run_is_found_by_a_unique_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut ledger = super::super::Ledger::open(&path).unwrap();
        for id in [
            "20260101T000000Z-aaaa",
            "20260101T000000Z-aabb",
            "20260102T000000Z-cccc",
        ] {
            ledger
                .begin_run(&super::super::RunStart {
                    id,
                    file: "loops/t.kdl",
                    program: "t",
                    kind: "loop",
                    program_digest: "d",
                    ir_json: "{}",
                    sources: &[],
                    repo_root: "/r",
                    base_commit: "b",
                    target_branch: "main",
                    pid: 1,
                    host: "h",
                    mode: "auto",
                })
                .unwrap();
        }
        let reader = Reader::open(&path).unwrap();
        assert_eq!(
            reader.find_run(Some("20260102")).unwrap().id,
            "20260102T000000Z-cccc"
        );
        assert_eq!(
            reader.find_run(Some("20260101T000000Z-aaaa")).unwrap().id,
            "20260101T000000Z-aaaa"
        );
        match reader.find_run(Some("20260101T000000Z-aa")) {
            Err(ReadError::Ambiguous { candidates, .. }) => assert_eq!(candidates.len(), 2),
            other => panic!("not ambiguous: {:?}", other.map(|r| r.id)),
        }
        assert!(matches!(
            reader.find_run(Some("2027")),
            Err(ReadError::NoSuchRun { .. })
        ));
    }
}
