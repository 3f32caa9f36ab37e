//! The SQLite ledger (`.mvk/ledger.db`): runs, tasks, attempts, gate results, costs, events and
//! merges in; durable rows, each transition written before its effect, out.
//!
//! Every write method is one transaction, so a transition is recorded whole or not at all, and
//! it is committed before the method returns, so before the caller acts on it (a merge's intent
//! is recorded before the ref moves). A transition from the wrong state (finishing an attempt
//! twice, finishing a merge that is not an intent) is an error, never a silent no-op. The schema
//! grows by appending migrations ([`schema`]); `PRAGMA user_version` says how many have been
//! applied, and a database from a newer mvk is refused, never silently downgraded. The tables
//! and their columns are documented in the book (`book/src/ledger.md`).

mod lessons;
mod pull_requests;
pub(crate) mod read;
mod resume;
mod review;
mod schema;

pub(crate) use lessons::{LessonRow, LessonSource};
pub(crate) use pull_requests::{PullRequestRow, PullRequestStart};
pub(crate) use read::RunRow;
pub(crate) use resume::{AttemptRow, MergeRow, ResumeStart, TaskRow, TaskRowState};
pub(crate) use review::{CheckpointRow, CheckpointStart, FollowupRow, ReviewRow};

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

#[derive(Debug, thiserror::Error)]
pub(crate) enum LedgerError {
    #[error("cannot create the directory of the ledger `{}`", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open the ledger `{}`", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the ledger `{}` cannot use WAL journaling (SQLite kept `{mode}`); put the repository on a local file system",
        path.display()
    )]
    NoWal { path: PathBuf, mode: String },
    #[error(
        "the ledger `{}` has schema version {found}, newer than this mvk knows ({known}); upgrade mvk to use it",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("the ledger `{}` has schema version {found}, which no mvk writes", path.display())]
    BadVersion { path: PathBuf, found: i64 },
    #[error("cannot migrate the ledger `{}` to schema version {version}", path.display())]
    Migrate {
        path: PathBuf,
        version: i64,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot record {what} in the ledger")]
    Write {
        what: String,
        #[source]
        source: rusqlite::Error,
    },
    /// The row to change is missing or not in a state the transition starts from.
    #[error("cannot record {what} in the ledger: {problem}")]
    State { what: String, problem: String },
    #[error("cannot record {what} in the ledger: `{field}` is {value}, more than SQLite holds")]
    TooLarge {
        what: String,
        field: &'static str,
        value: u64,
    },
    #[error("cannot read {what} from the ledger")]
    Read {
        what: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot record {what} in the ledger: the system clock is before 1970")]
    Clock { what: String },
}

/// The start of a run, recorded before any task starts.
pub(crate) struct RunStart<'a> {
    pub(crate) id: &'a str,
    /// The loop file as given, repository-relative if it is inside the repository.
    pub(crate) file: &'a str,
    /// The loop or flow name.
    pub(crate) program: &'a str,
    /// `loop` or `flow`.
    pub(crate) kind: &'a str,
    /// The program digest, hex.
    pub(crate) program_digest: &'a str,
    /// The compiled IR, stored content-addressed by `program_digest` (kept if already there).
    pub(crate) ir_json: &'a str,
    /// `(path, text)` of every file compiled, in the compiler's file order, stored with the
    /// program.
    pub(crate) sources: &'a [(String, String)],
    pub(crate) repo_root: &'a str,
    pub(crate) base_commit: &'a str,
    pub(crate) target_branch: &'a str,
    pub(crate) pid: u32,
    pub(crate) host: &'a str,
    /// `auto`, `batch` or `step`.
    pub(crate) mode: &'a str,
}

/// The command that started a run (`runs.command`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunCommand {
    /// `mvk apply`: attempts go on and what passes lands; `mvk resume` continues it.
    Apply,
    /// `mvk attempt`: one attempt of one task, never landed; nothing continues it.
    Attempt,
}

impl RunCommand {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunCommand::Apply => "apply",
            RunCommand::Attempt => "attempt",
        }
    }
}

/// The start of a task, with the digests a resume compares for drift.
pub(crate) struct TaskStart<'a> {
    pub(crate) run: &'a str,
    pub(crate) name: &'a str,
    pub(crate) digest: &'a str,
    /// Per-field component digests `(field, hex)`.
    pub(crate) fields: &'a [(String, String)],
    /// The names of the tasks it waits for.
    pub(crate) after: &'a [String],
    /// The commit it starts from.
    pub(crate) base: &'a str,
    /// The digest of its sealed paths' contents in `base` (see `run::git::seal::content_digest`).
    pub(crate) seal_digest: &'a str,
}

/// The start of an attempt, recorded before its agent runs.
pub(crate) struct AttemptStart<'a> {
    pub(crate) run: &'a str,
    pub(crate) task: &'a str,
    /// 1-based over the task's whole ladder.
    pub(crate) number: u32,
    /// 1-based.
    pub(crate) rung: u32,
    /// The agent's label.
    pub(crate) agent: &'a str,
    pub(crate) branch: &'a str,
    pub(crate) worktree: &'a str,
    pub(crate) base: &'a str,
    /// The task's epoch (see [`Ledger::reset_task`]).
    pub(crate) epoch: u32,
}

/// The agent's result.
pub(crate) struct AgentEnd<'a> {
    pub(crate) exit_code: Option<i32>,
    pub(crate) timed_out: bool,
    pub(crate) duration_ms: u64,
    /// The commit that captured the attempt's change.
    pub(crate) head: Option<&'a str>,
    pub(crate) usage: Option<Cost>,
    /// Rate-limit retries before this result.
    pub(crate) rate_limited: u32,
}

/// What one agent call spent, as read from its output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) usd_micros: u64,
}

/// One gate run.
pub(crate) struct GateRow<'a> {
    /// `gate` or `after-merge`.
    pub(crate) phase: &'a str,
    pub(crate) ordinal: u32,
    pub(crate) name: &'a str,
    /// `pass`, `fail` or `unknown`.
    pub(crate) verdict: &'a str,
    pub(crate) exit_code: Option<i32>,
    /// Executed, passed, failed, skipped, from the evidence.
    pub(crate) counts: Option<(u64, u64, u64, u64)>,
    /// Where the verdict's evidence came from: `nonce`, `cargo-test summary`, `none`, `unknown`.
    pub(crate) evidence: &'a str,
    pub(crate) reason: &'a str,
    /// The gate's log file.
    pub(crate) log: &'a str,
    pub(crate) duration_ms: u64,
}

/// An attempt's verdict.
pub(crate) struct AttemptEnd<'a> {
    /// `passed` or `failed`.
    pub(crate) outcome: &'a str,
    /// `agent`, `seal`, `gate`, `unknown`, `merge` (or `review`), for a failure.
    pub(crate) failure_kind: Option<&'a str>,
    pub(crate) signature: Option<&'a str>,
    pub(crate) criterion: Option<&'a str>,
    /// The whole failure as JSON, as the next attempt's prompt sees it.
    pub(crate) failure_json: Option<&'a str>,
}

/// A merge about to land `new_commit` on `into`: its parent `old_tip` is the target's tip, or
/// the commit of the change before it in the same landing batch.
pub(crate) struct MergeStart<'a> {
    pub(crate) run: &'a str,
    pub(crate) task: &'a str,
    pub(crate) attempt_id: i64,
    pub(crate) into: &'a str,
    /// `ff`, `merge` or `squash`.
    pub(crate) strategy: &'a str,
    pub(crate) old_tip: &'a str,
    pub(crate) new_commit: &'a str,
    /// The file through which the landing takes the main checkout's index lock
    /// (`run::git::land::lock_name`), recorded before it is taken.
    pub(crate) index_lock: Option<&'a str>,
}

/// What a run (or one of its tasks) has spent so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spent {
    pub(crate) attempts: u32,
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) usd_micros: u64,
}

/// Where a run stands, for telling a live run from a dead one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunStatus {
    /// `running`, `paused` or `finished`.
    pub(crate) state: String,
    pub(crate) pid: u32,
    pub(crate) host: String,
    pub(crate) heartbeat_ms: Option<i64>,
    pub(crate) outcome: Option<String>,
    pub(crate) exit_code: Option<i32>,
}

/// An open ledger: one SQLite connection with mvk's settings.
pub(crate) struct Ledger {
    conn: Connection,
    #[cfg_attr(not(test), allow(dead_code))]
    path: PathBuf,
}

/// Milliseconds since the Unix epoch, for `what` is being recorded.
fn now_ms(what: impl FnOnce() -> String) -> Result<i64, LedgerError> {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| LedgerError::Clock { what: what() })?;
    // i64 milliseconds reach the year 292 million.
    Ok(i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
}

/// A count as an SQLite integer (signed): one beyond `i64::MAX` is an error, never clamped.
fn int(what: &dyn Fn() -> String, field: &'static str, value: u64) -> Result<i64, LedgerError> {
    i64::try_from(value).map_err(|_| LedgerError::TooLarge {
        what: what(),
        field,
        value,
    })
}

/// Checks that an UPDATE changed exactly the one row it names; otherwise says why not, from
/// the row's current state (`state`), so a transition from the wrong state is never silent.
fn changed_one(
    changed: usize,
    what: &dyn Fn() -> String,
    row: &str,
    expected: &str,
    state: impl FnOnce() -> rusqlite::Result<Option<String>>,
) -> Result<(), LedgerError> {
    if changed == 1 {
        return Ok(());
    }
    let problem = match state().map_err(|source| LedgerError::Write {
        what: what(),
        source,
    })? {
        None => format!("the ledger has no {row}"),
        Some(s) => format!("{row} is `{s}`, not {expected}"),
    };
    Err(LedgerError::State {
        what: what(),
        problem,
    })
}

/// Runs `update`, a transition that must change exactly the one row it names (`row`, from
/// state `expected`); when it changes none, says why from the `state` the row has now
/// (`state_sql` with `key`).
#[expect(
    clippy::too_many_arguments,
    reason = "an UPDATE and the query that explains its failure, each with its parameters"
)]
fn transition(
    tx: &Transaction<'_>,
    what: &dyn Fn() -> String,
    update: &str,
    params: impl rusqlite::Params,
    row: &str,
    expected: &str,
    state_sql: &str,
    key: impl rusqlite::Params,
) -> Result<(), LedgerError> {
    let n = tx
        .execute(update, params)
        .map_err(|source| LedgerError::Write {
            what: what(),
            source,
        })?;
    changed_one(n, what, row, expected, || state_of(tx, state_sql, key))
}

/// The `state` column of the row `sql` selects, if there is one.
fn state_of(
    tx: &Transaction<'_>,
    sql: &str,
    key: impl rusqlite::Params,
) -> rusqlite::Result<Option<String>> {
    tx.query_row(sql, key, |r| r.get(0)).optional()
}

impl Ledger {
    /// Opens the ledger at `path`, creating it and its directory if needed, and migrates it.
    pub(crate) fn open(path: &Path) -> Result<Ledger, LedgerError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| LedgerError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = schema::open(path)?;
        Ok(Ledger {
            conn,
            path: path.to_path_buf(),
        })
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one transaction and commits it. IMMEDIATE takes the write lock at the start,
    /// so a busy database is waited for (busy_timeout) instead of failing midway in WAL mode.
    fn write<T>(
        &mut self,
        what: &dyn Fn() -> String,
        f: impl FnOnce(&Transaction<'_>, i64) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let now = now_ms(what)?;
        let err = |source| LedgerError::Write {
            what: what(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(err)?;
        let out = f(&tx, now)?;
        tx.commit().map_err(err)?;
        Ok(out)
    }

    /// Records a run of `mvk apply` as `running`, with its program (IR and sources) if the
    /// ledger has not got it.
    #[cfg(test)]
    pub(crate) fn begin_run(&mut self, r: &RunStart<'_>) -> Result<(), LedgerError> {
        self.begin_run_of(r, RunCommand::Apply)
    }

    /// Records a run started by `command` as `running` (see [`begin_run`](Self::begin_run)).
    pub(crate) fn begin_run_of(
        &mut self,
        r: &RunStart<'_>,
        command: RunCommand,
    ) -> Result<(), LedgerError> {
        let what = || format!("the start of run `{}`", r.id);
        let sql = |source| LedgerError::Write {
            what: what(),
            source,
        };
        self.write(&what, |tx, now| {
            store_program(tx, &what, r.program_digest, r.ir_json, r.sources, now)?;
            tx.execute(
                "INSERT INTO runs (id, file, program, kind, program_digest, repo_root, base_commit,
                    target_branch, mode, pid, host, state, started_at, heartbeat_at, command)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 'running', ?12, ?12, ?13)",
                params![
                    r.id,
                    r.file,
                    r.program,
                    r.kind,
                    r.program_digest,
                    r.repo_root,
                    r.base_commit,
                    r.target_branch,
                    r.mode,
                    r.pid,
                    r.host,
                    now,
                    command.as_str()
                ],
            )
            .map_err(sql)?;
            Ok(())
        })
    }

    /// Sets the run's `heartbeat_at` to now.
    pub(crate) fn heartbeat(&mut self, run: &str) -> Result<(), LedgerError> {
        let what = || format!("a heartbeat of run `{run}`");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE runs SET heartbeat_at = ?2 WHERE id = ?1",
                params![run, now],
                &format!("run `{run}`"),
                "any",
                "SELECT state FROM runs WHERE id = ?1",
                [run],
            )
        })
    }

    /// Marks a `running` run `finished` with its outcome and exit code.
    pub(crate) fn finish_run(
        &mut self,
        run: &str,
        outcome: &str,
        exit_code: i32,
    ) -> Result<(), LedgerError> {
        let what = || format!("the end of run `{run}`");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE runs SET state = 'finished', outcome = ?2, exit_code = ?3,
                        finished_at = ?4, heartbeat_at = ?4
                     WHERE id = ?1 AND state = 'running'",
                params![run, outcome, exit_code, now],
                &format!("run `{run}`"),
                "`running`",
                "SELECT state FROM runs WHERE id = ?1",
                [run],
            )
        })
    }

    /// Records a task as `running`, with its digest per field and what it waits for.
    pub(crate) fn begin_task(&mut self, t: &TaskStart<'_>) -> Result<(), LedgerError> {
        let what = || format!("the start of task `{}` of run `{}`", t.name, t.run);
        let sql = |source| LedgerError::Write {
            what: what(),
            source,
        };
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO tasks (run, name, digest, state, started_at, base, seal_digest)
                 VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6)",
                params![t.run, t.name, t.digest, now, t.base, t.seal_digest],
            )
            .map_err(sql)?;
            insert_fields(tx, t).map_err(sql)
        })
    }

    /// Marks a `running` task `finished` with its outcome and the commit it landed as.
    pub(crate) fn finish_task(
        &mut self,
        run: &str,
        task: &str,
        outcome: &str,
        merged: Option<&str>,
    ) -> Result<(), LedgerError> {
        let what = || format!("the end of task `{task}` of run `{run}`");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE tasks SET state = 'finished', outcome = ?3, merged = ?4, finished_at = ?5
                     WHERE run = ?1 AND name = ?2 AND state = 'running'",
                params![run, task, outcome, merged, now],
                &format!("task `{task}`"),
                "`running`",
                "SELECT state FROM tasks WHERE run = ?1 AND name = ?2",
                [run, task],
            )
        })
    }

    /// Records an attempt as `running`, before its agent starts; returns its id.
    pub(crate) fn begin_attempt(&mut self, a: &AttemptStart<'_>) -> Result<i64, LedgerError> {
        let what = || format!("the start of attempt {} of task `{}`", a.number, a.task);
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO attempts (run, task, number, rung, agent, branch, worktree, base, state,
                    started_at, epoch)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running', ?9, ?10)",
                params![
                    a.run, a.task, a.number, a.rung, a.agent, a.branch, a.worktree, a.base, now,
                    a.epoch
                ],
            )
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })?;
            Ok(tx.last_insert_rowid())
        })
    }

    /// Records the agent's result (`agent-done`), and what it spent when it was read.
    pub(crate) fn agent_done(&mut self, attempt: i64, e: &AgentEnd<'_>) -> Result<(), LedgerError> {
        let what = || format!("the agent's result for attempt #{attempt}");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE attempts SET state = 'agent-done', exit_code = ?2, timed_out = ?3,
                        agent_ms = ?4, head = ?5, rate_limited = ?6, agent_done_at = ?7
                     WHERE id = ?1 AND state = 'running'",
                params![
                    attempt,
                    e.exit_code,
                    e.timed_out,
                    int(&what, "duration_ms", e.duration_ms)?,
                    e.head,
                    e.rate_limited,
                    now
                ],
                &format!("attempt #{attempt}"),
                "`running`",
                "SELECT state FROM attempts WHERE id = ?1",
                [attempt],
            )?;
            if let Some(c) = e.usage {
                insert_cost(tx, &what, attempt, "agent", c, now)?;
            }
            Ok(())
        })
    }

    /// Records one gate run of an attempt (its own gates, or after-merge ones, any number of
    /// times).
    pub(crate) fn record_gate(&mut self, attempt: i64, g: &GateRow<'_>) -> Result<(), LedgerError> {
        let what = || format!("gate `{}` of attempt #{attempt}", g.name);
        let counts = match g.counts {
            Some((e, p, f, s)) => [
                Some(int(&what, "executed", e)?),
                Some(int(&what, "passed", p)?),
                Some(int(&what, "failed", f)?),
                Some(int(&what, "skipped", s)?),
            ],
            None => [None; 4],
        };
        let duration = int(&what, "duration_ms", g.duration_ms)?;
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO gate_results (attempt_id, phase, ordinal, name, verdict, exit_code,
                    executed, passed, failed, skipped, evidence, reason, log, duration_ms,
                    recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                params![
                    attempt,
                    g.phase,
                    g.ordinal,
                    g.name,
                    g.verdict,
                    g.exit_code,
                    counts[0],
                    counts[1],
                    counts[2],
                    counts[3],
                    g.evidence,
                    g.reason,
                    g.log,
                    duration,
                    now
                ],
            )
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })?;
            Ok(())
        })
    }

    /// Marks an attempt `finished` with its verdict (from `running` when the agent never
    /// reported, e.g. the wall budget ran out).
    pub(crate) fn finish_attempt(
        &mut self,
        attempt: i64,
        e: &AttemptEnd<'_>,
    ) -> Result<(), LedgerError> {
        let what = || format!("the end of attempt #{attempt}");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE attempts SET state = 'finished', outcome = ?2, failure_kind = ?3,
                    signature = ?4, criterion = ?5, failure_json = ?6, finished_at = ?7
                 WHERE id = ?1 AND state IN ('running', 'agent-done')",
                params![
                    attempt,
                    e.outcome,
                    e.failure_kind,
                    e.signature,
                    e.criterion,
                    e.failure_json,
                    now
                ],
                &format!("attempt #{attempt}"),
                "`running` or `agent-done`",
                "SELECT state FROM attempts WHERE id = ?1",
                [attempt],
            )
        })
    }

    /// Records the intent to land `new_commit` (made on `old_tip`) on `into`, before it happens;
    /// returns the merge's id.
    pub(crate) fn begin_merge(&mut self, m: &MergeStart<'_>) -> Result<i64, LedgerError> {
        let what = || format!("the intent to merge task `{}` into `{}`", m.task, m.into);
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO merges (run, task, attempt_id, into_branch, strategy, old_tip,
                    new_commit, state, started_at, index_lock)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'intent', ?8, ?9)",
                params![
                    m.run,
                    m.task,
                    m.attempt_id,
                    m.into,
                    m.strategy,
                    m.old_tip,
                    m.new_commit,
                    now,
                    m.index_lock
                ],
            )
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })?;
            Ok(tx.last_insert_rowid())
        })
    }

    /// Settles a merge intent: `done` (with the commit the target now points at), `conflict`,
    /// `failed` or `aborted`.
    pub(crate) fn finish_merge(
        &mut self,
        merge: i64,
        state: &str,
        commit: Option<&str>,
        detail: &str,
    ) -> Result<(), LedgerError> {
        let what = || format!("the end of merge #{merge}");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE merges SET state = ?2, commit_id = ?3, detail = ?4, finished_at = ?5
                     WHERE id = ?1 AND state = 'intent'",
                params![merge, state, commit, detail, now],
                &format!("merge #{merge}"),
                "`intent`",
                "SELECT state FROM merges WHERE id = ?1",
                [merge],
            )
        })
    }

    /// Appends one event of the run's trail (`detail_json` must be JSON).
    pub(crate) fn event(
        &mut self,
        run: &str,
        task: Option<&str>,
        attempt: Option<u32>,
        time_ms: i64,
        event: &str,
        detail_json: &str,
    ) -> Result<(), LedgerError> {
        let what = || format!("event `{event}` of run `{run}`");
        self.write(&what, |tx, _| {
            tx.execute(
                "INSERT INTO events (run, task, attempt, time_ms, event, detail_json)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![run, task, attempt, time_ms, event, detail_json],
            )
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })?;
            Ok(())
        })
    }

    /// Records that a stop signal from outside (`by`, as `SIGINT (Ctrl-C)`) ended the process of
    /// run `run`, which stays `running` for `mvk resume`: `stopped_by`, the heartbeat (the run's
    /// clock stops here) and the event, in one transaction. False when the run is not running.
    pub(crate) fn record_stop(
        &mut self,
        run: &str,
        by: &str,
        detail_json: &str,
    ) -> Result<bool, LedgerError> {
        let what = || format!("the stop of run `{run}`");
        self.write(&what, |tx, now| {
            let sql = |source| LedgerError::Write {
                what: what(),
                source,
            };
            let stopped = tx
                .execute(
                    "UPDATE runs SET stopped_by = ?2, heartbeat_at = ?3
                     WHERE id = ?1 AND state = 'running'",
                    params![run, by, now],
                )
                .map_err(sql)?;
            if stopped == 0 {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO events (run, task, attempt, time_ms, event, detail_json)
                 VALUES (?1, NULL, NULL, ?2, 'run.interrupted', ?3)",
                params![run, now, detail_json],
            )
            .map_err(sql)?;
            Ok(true)
        })
    }

    /// Attempts (not counting abandoned ones), tokens and micro-dollars of a run, or of one of
    /// its tasks.
    pub(crate) fn spent(&self, run: &str, task: Option<&str>) -> Result<Spent, LedgerError> {
        let what = || match task {
            None => format!("what run `{run}` spent"),
            Some(t) => format!("what task `{t}` of run `{run}` spent"),
        };
        let read = |source| LedgerError::Read {
            what: what(),
            source,
        };
        // Two sums, since one join of attempts with their costs would count an attempt per cost.
        let attempts: u32 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM attempts
                 WHERE run = ?1 AND (?2 IS NULL OR task = ?2) AND state <> 'abandoned'",
                params![run, task],
                |r| r.get(0),
            )
            .map_err(read)?;
        let (input, output, usd): (i64, i64, i64) = self
            .conn
            .query_row(
                "SELECT COALESCE(SUM(c.input_tokens), 0), COALESCE(SUM(c.output_tokens), 0),
                    COALESCE(SUM(c.usd_micros), 0)
                 FROM costs c JOIN attempts a ON a.id = c.attempt_id
                 WHERE a.run = ?1 AND (?2 IS NULL OR a.task = ?2)",
                params![run, task],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .map_err(read)?;
        // The columns are CHECKed non-negative, so a sum below zero is a damaged ledger.
        let unsigned = |column: usize, v: i64| {
            u64::try_from(v).map_err(|_| read(rusqlite::Error::IntegralValueOutOfRange(column, v)))
        };
        Ok(Spent {
            attempts,
            input_tokens: unsigned(0, input)?,
            output_tokens: unsigned(1, output)?,
            usd_micros: unsigned(2, usd)?,
        })
    }

    /// The state of a run, or `None` when the ledger has no such run.
    pub(crate) fn run_status(&self, run: &str) -> Result<Option<RunStatus>, LedgerError> {
        self.conn
            .query_row(
                "SELECT state, pid, host, heartbeat_at, outcome, exit_code FROM runs WHERE id = ?1",
                params![run],
                |r| {
                    Ok(RunStatus {
                        state: r.get(0)?,
                        pid: r.get(1)?,
                        host: r.get(2)?,
                        heartbeat_ms: r.get(3)?,
                        outcome: r.get(4)?,
                        exit_code: r.get(5)?,
                    })
                },
            )
            .optional()
            .map_err(|source| LedgerError::Read {
                what: format!("the state of run `{run}`"),
                source,
            })
    }
}

/// Stores a compiled program (IR and sources) under its digest, unless the ledger has it.
fn store_program(
    tx: &Transaction<'_>,
    what: &dyn Fn() -> String,
    digest: &str,
    ir_json: &str,
    sources: &[(String, String)],
    now: i64,
) -> Result<(), LedgerError> {
    let sql = |source| LedgerError::Write {
        what: what(),
        source,
    };
    // ON CONFLICT, not OR IGNORE: only an existing digest is skipped; IR that is not
    // JSON still fails its CHECK.
    let fresh = tx
        .execute(
            "INSERT INTO programs (digest, ir_json, created_at) VALUES (?1, ?2, ?3)
                     ON CONFLICT (digest) DO NOTHING",
            params![digest, ir_json, now],
        )
        .map_err(sql)?;
    // The sources belong with the IR they were compiled into (its spans point into
    // them), so they are stored only with a new program.
    if fresh == 1 {
        let mut insert = tx
            .prepare(
                "INSERT INTO program_sources (program_digest, file_id, path, text)
                         VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(sql)?;
        for (file_id, (path, text)) in sources.iter().enumerate() {
            let file_id = int(what, "file_id", file_id as u64)?;
            insert
                .execute(params![digest, file_id, path, text])
                .map_err(sql)?;
        }
    }
    Ok(())
}

/// Records what one call of attempt `attempt`'s agent (`kind` `agent`) or reviewer (`review`)
/// spent.
fn insert_cost(
    tx: &Transaction<'_>,
    what: &dyn Fn() -> String,
    attempt: i64,
    kind: &str,
    c: Cost,
    now: i64,
) -> Result<(), LedgerError> {
    tx.execute(
        "INSERT INTO costs (attempt_id, kind, input_tokens, output_tokens, usd_micros, recorded_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            attempt,
            kind,
            int(what, "input_tokens", c.input_tokens)?,
            int(what, "output_tokens", c.output_tokens)?,
            int(what, "usd_micros", c.usd_micros)?,
            now
        ],
    )
    .map_err(|source| LedgerError::Write {
        what: what(),
        source,
    })?;
    Ok(())
}

/// Inserts a task's field digests and dependencies (after its row).
fn insert_fields(tx: &Transaction<'_>, t: &TaskStart<'_>) -> rusqlite::Result<()> {
    let mut field =
        tx.prepare("INSERT INTO task_fields (run, task, field, digest) VALUES (?1, ?2, ?3, ?4)")?;
    for (name, digest) in t.fields {
        field.execute(params![t.run, t.name, name, digest])?;
    }
    let mut dep = tx.prepare(
        "INSERT INTO task_deps (run, task, after) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
    )?;
    for after in t.after {
        dep.execute(params![t.run, t.name, after])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
