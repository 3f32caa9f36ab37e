//! A run id in, what `mvk resume` and `mvk why` need out: the run, its tasks, attempts and
//! merges as rows, the program it was compiled from; and the transitions of a resume (the run
//! taken over by a new process, an attempt caught in flight abandoned, a task re-planned).

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use super::{Ledger, LedgerError, TaskStart, insert_fields, store_program, transition};

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskRowState {
    Pending,
    Running,
    Finished,
}

/// A task of a run.
#[derive(Debug, Clone)]
pub(crate) struct TaskRow {
    pub(crate) name: String,
    pub(crate) digest: String,
    pub(crate) state: TaskRowState,
    pub(crate) outcome: Option<String>,
    pub(crate) merged: Option<String>,
    pub(crate) started_at: Option<i64>,
    #[allow(dead_code)]
    pub(crate) finished_at: Option<i64>,
    pub(crate) base: Option<String>,
    pub(crate) seal_digest: Option<String>,
    pub(crate) epoch: u32,
    /// Field name → component digest (hex).
    pub(crate) fields: BTreeMap<String, String>,
}

/// An attempt of a task.
#[derive(Debug, Clone)]
pub(crate) struct AttemptRow {
    pub(crate) id: i64,
    pub(crate) number: u32,
    pub(crate) rung: u32,
    pub(crate) agent: String,
    pub(crate) branch: String,
    /// Where its worktree was (a failure's output names files there).
    pub(crate) worktree: String,
    pub(crate) base: String,
    /// `running`, `agent-done`, `finished` or `abandoned`.
    pub(crate) state: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) timed_out: Option<bool>,
    pub(crate) head: Option<String>,
    pub(crate) rate_limited: u32,
    pub(crate) outcome: Option<String>,
    #[allow(dead_code)]
    pub(crate) failure_kind: Option<String>,
    #[allow(dead_code)]
    pub(crate) signature: Option<String>,
    pub(crate) failure_json: Option<String>,
    #[allow(dead_code)]
    pub(crate) started_at: i64,
    #[allow(dead_code)]
    pub(crate) agent_done_at: Option<i64>,
    #[allow(dead_code)]
    pub(crate) finished_at: Option<i64>,
    pub(crate) epoch: u32,
}

/// A merge of a task's accepted attempt.
#[derive(Debug, Clone)]
pub(crate) struct MergeRow {
    pub(crate) id: i64,
    pub(crate) attempt_id: i64,
    pub(crate) into: String,
    #[allow(dead_code)]
    pub(crate) strategy: String,
    pub(crate) old_tip: String,
    pub(crate) new_commit: String,
    /// `intent`, `done`, `conflict`, `failed` or `aborted`.
    pub(crate) state: String,
    pub(crate) commit: Option<String>,
    /// The file through which the landing takes the main checkout's index lock (none for
    /// intents recorded before migration 8).
    pub(crate) index_lock: Option<String>,
}

/// A program as stored with a run: its IR as JSON and the sources it was compiled from.
#[derive(Debug, Clone)]
pub(crate) struct StoredProgram {
    pub(crate) ir_json: String,
    /// `(path, text)` in the compiler's file order (the IR's spans index into it).
    pub(crate) sources: Vec<(String, String)>,
}

/// A run taken over by a new process.
pub(crate) struct ResumeStart<'a> {
    pub(crate) run: &'a str,
    pub(crate) pid: u32,
    pub(crate) host: &'a str,
    /// `interrupted` or `paused`.
    pub(crate) found: &'a str,
    pub(crate) old_program_digest: &'a str,
    /// The program the run goes on with (the old one unless drift was accepted).
    pub(crate) new_program_digest: &'a str,
    pub(crate) ir_json: &'a str,
    pub(crate) sources: &'a [(String, String)],
    /// The accepted drift report, when there was drift.
    pub(crate) drift_json: Option<&'a str>,
}

impl Ledger {
    fn read_err(what: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> LedgerError {
        let what = what.into();
        move |source| LedgerError::Read { what, source }
    }

    /// The program stored under `digest`.
    pub(crate) fn stored_program(
        &self,
        digest: &str,
    ) -> Result<Option<StoredProgram>, LedgerError> {
        let read = || Self::read_err(format!("program `{digest}`"));
        let Some(ir_json) = self
            .conn
            .query_row(
                "SELECT ir_json FROM programs WHERE digest = ?1",
                [digest],
                |r| r.get::<_, String>(0),
            )
            .optional()
            .map_err(read())?
        else {
            return Ok(None);
        };
        let mut stmt = self
            .conn
            .prepare(
                "SELECT path, text FROM program_sources WHERE program_digest = ?1 ORDER BY file_id",
            )
            .map_err(read())?;
        let sources = stmt
            .query_map([digest], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read())?;
        Ok(Some(StoredProgram { ir_json, sources }))
    }

    /// The tasks of a run that have rows (started, finished or skipped), with their fields.
    pub(crate) fn task_rows(&self, run: &str) -> Result<Vec<TaskRow>, LedgerError> {
        let read = || Self::read_err(format!("the tasks of run `{run}`"));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT name, digest, state, outcome, merged, started_at, finished_at, base,
                    seal_digest, epoch
                 FROM tasks WHERE run = ?1 ORDER BY started_at, name",
            )
            .map_err(read())?;
        let mut tasks = stmt
            .query_map([run], |r| {
                let state: String = r.get(2)?;
                Ok(TaskRow {
                    name: r.get(0)?,
                    digest: r.get(1)?,
                    state: match state.as_str() {
                        "pending" => TaskRowState::Pending,
                        "running" => TaskRowState::Running,
                        _ => TaskRowState::Finished,
                    },
                    outcome: r.get(3)?,
                    merged: r.get(4)?,
                    started_at: r.get(5)?,
                    finished_at: r.get(6)?,
                    base: r.get(7)?,
                    seal_digest: r.get(8)?,
                    epoch: r.get(9)?,
                    fields: BTreeMap::new(),
                })
            })
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read())?;
        let mut fields = self
            .conn
            .prepare("SELECT task, field, digest FROM task_fields WHERE run = ?1")
            .map_err(read())?;
        let rows = fields
            .query_map([run], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(read())?;
        for row in rows {
            let (task, field, digest) = row.map_err(read())?;
            if let Some(t) = tasks.iter_mut().find(|t| t.name == task) {
                t.fields.insert(field, digest);
            }
        }
        Ok(tasks)
    }

    /// A task's attempts, in the order they were made (abandoned ones included).
    pub(crate) fn attempt_rows(
        &self,
        run: &str,
        task: &str,
    ) -> Result<Vec<AttemptRow>, LedgerError> {
        let read = || Self::read_err(format!("the attempts of task `{task}` of run `{run}`"));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, number, rung, agent, branch, base, state, exit_code, timed_out, head,
                    rate_limited, outcome, failure_kind, signature, failure_json, started_at,
                    agent_done_at, finished_at, epoch, worktree
                 FROM attempts WHERE run = ?1 AND task = ?2 ORDER BY id",
            )
            .map_err(read())?;
        let rows = stmt
            .query_map([run, task], |r| {
                Ok(AttemptRow {
                    id: r.get(0)?,
                    number: r.get(1)?,
                    rung: r.get(2)?,
                    agent: r.get(3)?,
                    branch: r.get(4)?,
                    base: r.get(5)?,
                    state: r.get(6)?,
                    exit_code: r.get(7)?,
                    timed_out: r.get(8)?,
                    head: r.get(9)?,
                    rate_limited: r.get(10)?,
                    outcome: r.get(11)?,
                    failure_kind: r.get(12)?,
                    signature: r.get(13)?,
                    failure_json: r.get(14)?,
                    started_at: r.get(15)?,
                    agent_done_at: r.get(16)?,
                    finished_at: r.get(17)?,
                    epoch: r.get(18)?,
                    worktree: r.get(19)?,
                })
            })
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read())?;
        Ok(rows)
    }

    /// The gate results (phase `gate`) of a task's attempts, in the order they were recorded.
    pub(crate) fn task_gate_results(
        &self,
        run: &str,
        task: &str,
    ) -> Result<Vec<super::read::GateResultRow>, LedgerError> {
        let read = || Self::read_err(format!("the gate results of task `{task}` of run `{run}`"));
        let mut stmt = self
            .conn
            .prepare(&format!(
                "{} JOIN attempts a ON a.id = g.attempt_id
                 WHERE a.run = ?1 AND a.task = ?2 AND g.phase = 'gate' ORDER BY g.id",
                super::read::GATE_RESULT_SELECT
            ))
            .map_err(read())?;
        let rows = stmt
            .query_map([run, task], super::read::gate_result_row)
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read())?;
        Ok(rows)
    }

    /// A task's merges, in the order they were begun.
    pub(crate) fn merge_rows(&self, run: &str, task: &str) -> Result<Vec<MergeRow>, LedgerError> {
        let read = || Self::read_err(format!("the merges of task `{task}` of run `{run}`"));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT id, attempt_id, into_branch, strategy, old_tip, new_commit, state, commit_id,
                    index_lock
                 FROM merges WHERE run = ?1 AND task = ?2 ORDER BY id",
            )
            .map_err(read())?;
        let rows = stmt
            .query_map([run, task], |r| {
                Ok(MergeRow {
                    id: r.get(0)?,
                    attempt_id: r.get(1)?,
                    into: r.get(2)?,
                    strategy: r.get(3)?,
                    old_tip: r.get(4)?,
                    new_commit: r.get(5)?,
                    state: r.get(6)?,
                    commit: r.get(7)?,
                    index_lock: r.get(8)?,
                })
            })
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(read())?;
        Ok(rows)
    }

    /// The run whose landing recorded `lock` as its index lock's file, if any did.
    pub(crate) fn run_of_index_lock(&self, lock: &str) -> Result<Option<String>, LedgerError> {
        self.conn
            .query_row(
                "SELECT run FROM merges WHERE index_lock = ?1 ORDER BY id LIMIT 1",
                [lock],
                |r| r.get(0),
            )
            .optional()
            .map_err(Self::read_err(format!("the landing that took `{lock}`")))
    }

    /// The time of the last event recorded for a run (or one of its tasks), in ms.
    pub(crate) fn last_event_ms(
        &self,
        run: &str,
        task: Option<&str>,
    ) -> Result<Option<i64>, LedgerError> {
        self.conn
            .query_row(
                "SELECT MAX(time_ms) FROM events WHERE run = ?1 AND (?2 IS NULL OR task = ?2)",
                params![run, task],
                |r| r.get(0),
            )
            .map_err(Self::read_err(format!("the events of run `{run}`")))
    }

    /// Tokens and micro-dollars spent by one epoch of a task: what its budgets count.
    pub(crate) fn spent_in_epoch(
        &self,
        run: &str,
        task: &str,
        epoch: u32,
    ) -> Result<(u64, u64), LedgerError> {
        let (tokens, usd): (i64, i64) = self
            .conn
            .query_row(
                "SELECT COALESCE(SUM(c.input_tokens + c.output_tokens), 0),
                    COALESCE(SUM(c.usd_micros), 0)
                 FROM costs c JOIN attempts a ON a.id = c.attempt_id
                 WHERE a.run = ?1 AND a.task = ?2 AND a.epoch = ?3",
                params![run, task, epoch],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(Self::read_err(format!("what task `{task}` spent")))?;
        // The columns are CHECKed non-negative, so a sum below zero is a damaged ledger.
        let unsigned = |column: usize, v: i64| {
            u64::try_from(v).map_err(|_| {
                Self::read_err(format!("what task `{task}` spent"))(
                    rusqlite::Error::IntegralValueOutOfRange(column, v),
                )
            })
        };
        Ok((unsigned(0, tokens)?, unsigned(1, usd)?))
    }

    /// Hands a `running` (its process gone) or `paused` run to this process, recording the
    /// resumption and, when drift was accepted, the program it goes on with.
    pub(crate) fn resume_run(&mut self, r: &ResumeStart<'_>) -> Result<(), LedgerError> {
        let what = || format!("the resumption of run `{}`", r.run);
        self.write(&what, |tx, now| {
            let sql = |source| LedgerError::Write {
                what: what(),
                source,
            };
            store_program(tx, &what, r.new_program_digest, r.ir_json, r.sources, now)?;
            transition(
                tx,
                &what,
                "UPDATE runs SET state = 'running', pid = ?2, host = ?3, heartbeat_at = ?4,
                        program_digest = ?5, stopped_by = NULL
                     WHERE id = ?1 AND state IN ('running', 'paused')",
                params![r.run, r.pid, r.host, now, r.new_program_digest],
                &format!("run `{}`", r.run),
                "`running` or `paused`",
                "SELECT state FROM runs WHERE id = ?1",
                [r.run],
            )?;
            tx.execute(
                "INSERT INTO resumptions (run, at, pid, host, found, old_program_digest,
                    new_program_digest, drift_json)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    r.run,
                    now,
                    r.pid,
                    r.host,
                    r.found,
                    r.old_program_digest,
                    r.new_program_digest,
                    r.drift_json
                ],
            )
            .map_err(sql)?;
            Ok(())
        })
    }

    /// Takes run `run`, recorded finished on mvk's own error (`error`) while some of its tasks
    /// had not ended, back to `running`, for `mvk resume` to continue like an interrupted run
    /// (see `run::driver::resume::stopped_on_error`, which decides it may).
    pub(crate) fn reopen_stopped_run(&mut self, run: &str) -> Result<(), LedgerError> {
        let what = || format!("the reopening of run `{run}`");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE runs SET state = 'running', outcome = NULL, exit_code = NULL,
                        finished_at = NULL, heartbeat_at = ?2
                     WHERE id = ?1 AND state = 'finished' AND outcome = 'error'",
                params![run, now],
                &format!("run `{run}`"),
                "`finished` on an error",
                "SELECT state FROM runs WHERE id = ?1",
                [run],
            )
        })
    }

    /// Marks an attempt caught in flight (`running`, its process gone) `abandoned`: a resume
    /// restarts it under the same number.
    pub(crate) fn abandon_attempt(&mut self, attempt: i64) -> Result<(), LedgerError> {
        self.abandon(attempt, false)
    }

    /// Marks an attempt whose recording was cut short (`running` or `agent-done`: a worker's
    /// attempt the coordinator was writing down when it died) `abandoned`, so that the
    /// recording, asked again, writes it whole under the same number. The costs it had recorded
    /// go with it, in the same transaction: the recording asked again records them again, and
    /// they would count twice.
    #[cfg(feature = "temporal")]
    pub(crate) fn abandon_half_recorded(&mut self, attempt: i64) -> Result<(), LedgerError> {
        self.abandon(attempt, true)
    }

    fn abandon(&mut self, attempt: i64, half_recorded: bool) -> Result<(), LedgerError> {
        let what = || format!("attempt #{attempt} as abandoned");
        let (states, expected) = if half_recorded {
            ("('running', 'agent-done')", "`running` or `agent-done`")
        } else {
            ("('running')", "`running`")
        };
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                &format!(
                    "UPDATE attempts SET state = 'abandoned', finished_at = ?2
                         WHERE id = ?1 AND state IN {states}"
                ),
                params![attempt, now],
                &format!("attempt #{attempt}"),
                expected,
                "SELECT state FROM attempts WHERE id = ?1",
                [attempt],
            )?;
            if half_recorded {
                tx.execute("DELETE FROM costs WHERE attempt_id = ?1", [attempt])
                    .map_err(|source| LedgerError::Write {
                        what: what(),
                        source,
                    })?;
            }
            Ok(())
        })
    }

    /// Records the coordinator's answer to the landing of attempt `attempt` (JSON), before it is
    /// given; an answer already recorded stands (see migration 7).
    pub(crate) fn record_landing_answer(
        &mut self,
        attempt: i64,
        answer: &str,
    ) -> Result<(), LedgerError> {
        let what = || format!("the landing answer of attempt #{attempt}");
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO landing_answers (attempt_id, answer_json, recorded_at)
                     VALUES (?1, ?2, ?3) ON CONFLICT (attempt_id) DO NOTHING",
                params![attempt, answer, now],
            )
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })?;
            Ok(())
        })
    }

    /// The recorded landing answers of task `task`'s attempts: `(attempt id, JSON)`, in order.
    #[cfg(feature = "temporal")]
    pub(crate) fn landing_answers(
        &self,
        run: &str,
        task: &str,
    ) -> Result<Vec<(i64, String)>, LedgerError> {
        let what = format!("the landing answers of task `{task}` of run `{run}`");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT l.attempt_id, l.answer_json FROM landing_answers l
                     JOIN attempts a ON a.id = l.attempt_id
                     WHERE a.run = ?1 AND a.task = ?2 ORDER BY l.attempt_id",
            )
            .map_err(Self::read_err(what.clone()))?;
        let rows = stmt
            .query_map([run, task], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(Self::read_err(what.clone()))?;
        rows.collect::<Result<Vec<_>, _>>()
            .map_err(Self::read_err(what))
    }

    /// Closes a `running` run whose process died and that nothing will continue (an `mvk
    /// attempt`): its attempts in flight `abandoned`, its unfinished tasks and the run itself
    /// `finished` as `interrupted` with `exit_code`, all at once. False when the run was no longer
    /// `running` (another process closed it first).
    pub(crate) fn close_interrupted(
        &mut self,
        run: &str,
        exit_code: i32,
    ) -> Result<bool, LedgerError> {
        let what = || format!("the close of interrupted run `{run}`");
        self.write(&what, |tx, now| {
            let sql = |source| LedgerError::Write {
                what: what(),
                source,
            };
            let closed = tx
                .execute(
                    "UPDATE runs SET state = 'finished', outcome = 'interrupted', exit_code = ?2,
                            finished_at = ?3
                         WHERE id = ?1 AND state = 'running'",
                    params![run, exit_code, now],
                )
                .map_err(sql)?;
            if closed == 0 {
                return Ok(false);
            }
            tx.execute(
                "UPDATE attempts SET state = 'abandoned', finished_at = ?2
                     WHERE run = ?1 AND state IN ('running', 'agent-done')",
                params![run, now],
            )
            .map_err(sql)?;
            tx.execute(
                "UPDATE tasks SET state = 'finished', outcome = 'interrupted', finished_at = ?2
                     WHERE run = ?1 AND state <> 'finished'",
                params![run, now],
            )
            .map_err(sql)?;
            Ok(true)
        })
    }

    /// Re-plans a task after accepted drift: it runs again under its new digest, in a new
    /// epoch (fresh budgets and ladder); its earlier attempts and merges stay as they were.
    pub(crate) fn reset_task(&mut self, t: &TaskStart<'_>, epoch: u32) -> Result<(), LedgerError> {
        let what = || format!("the re-planning of task `{}` of run `{}`", t.name, t.run);
        self.write(&what, |tx, now| {
            let sql = |source| LedgerError::Write {
                what: what(),
                source,
            };
            transition(
                tx,
                &what,
                "UPDATE tasks SET state = 'running', outcome = NULL, merged = NULL,
                        finished_at = NULL, started_at = ?3, digest = ?4, base = ?5,
                        seal_digest = ?6, epoch = ?7
                     WHERE run = ?1 AND name = ?2",
                params![t.run, t.name, now, t.digest, t.base, t.seal_digest, epoch],
                &format!("task `{}`", t.name),
                "any",
                "SELECT state FROM tasks WHERE run = ?1 AND name = ?2",
                [t.run, t.name],
            )?;
            tx.execute(
                "DELETE FROM task_fields WHERE run = ?1 AND task = ?2",
                [t.run, t.name],
            )
            .map_err(sql)?;
            tx.execute(
                "DELETE FROM task_deps WHERE run = ?1 AND task = ?2",
                [t.run, t.name],
            )
            .map_err(sql)?;
            insert_fields(tx, t).map_err(sql)
        })
    }
}

impl Ledger {
    /// The details (JSON) of a task's events called `event` for attempt `attempt`, in order.
    pub(crate) fn event_details(
        &self,
        run: &str,
        task: &str,
        attempt: u32,
        event: &str,
    ) -> Result<Vec<String>, LedgerError> {
        let read = || Self::read_err(format!("events `{event}` of task `{task}`"));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT detail_json FROM events
                 WHERE run = ?1 AND task = ?2 AND attempt = ?3 AND event = ?4 ORDER BY id",
            )
            .map_err(read())?;
        let rows = stmt
            .query_map(params![run, task, attempt, event], |r| r.get(0))
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(read())?;
        Ok(rows)
    }

    /// The task (if any) and detail (JSON) of each `event` of a run, in order.
    pub(crate) fn run_event_details(
        &self,
        run: &str,
        event: &str,
    ) -> Result<Vec<(Option<String>, String)>, LedgerError> {
        let read = || Self::read_err(format!("events `{event}` of run `{run}`"));
        let mut stmt = self
            .conn
            .prepare(
                "SELECT task, detail_json FROM events WHERE run = ?1 AND event = ?2 ORDER BY id",
            )
            .map_err(read())?;
        let rows = stmt
            .query_map(params![run, event], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(read())?
            .collect::<rusqlite::Result<Vec<(Option<String>, String)>>>()
            .map_err(read())?;
        Ok(rows)
    }

    /// The detail (JSON) of the first `event` of a run, such as its `run.started`.
    pub(crate) fn first_event_detail(
        &self,
        run: &str,
        event: &str,
    ) -> Result<Option<String>, LedgerError> {
        self.conn
            .query_row(
                "SELECT detail_json FROM events WHERE run = ?1 AND event = ?2 ORDER BY id LIMIT 1",
                [run, event],
                |r| r.get(0),
            )
            .optional()
            .map_err(Self::read_err(format!("event `{event}` of run `{run}`")))
    }
}
