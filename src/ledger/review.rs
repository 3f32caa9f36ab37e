//! A reviewer's verdict or a person's decision in; the rows `reviews`, `followups`, `costs`
//! (kind `review`) and `checkpoints` out, and what the driver asks of them: how many rejections
//! a task has had, the blockers of the last one (which the next reviewer checks first), where a
//! paused run waits and what a person decided there.

use std::collections::BTreeSet;

use rusqlite::{Connection, OptionalExtension, params};

use super::{Cost, Ledger, LedgerError, insert_cost, transition};

/// A stop for a person, as the driver opens it.
#[derive(Debug)]
pub(crate) struct CheckpointStart<'a> {
    pub(crate) run: &'a str,
    pub(crate) task: &'a str,
    pub(crate) attempt_id: i64,
    /// `review`, `step`, `batch` or `human`.
    pub(crate) kind: &'a str,
    /// Whether approving lands the attempt.
    pub(crate) lands: bool,
    pub(crate) question: &'a str,
}

/// A stop for a person and what was decided there.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct CheckpointRow {
    pub(crate) id: i64,
    pub(crate) run: String,
    pub(crate) task: String,
    pub(crate) attempt_id: i64,
    pub(crate) attempt: u32,
    pub(crate) kind: String,
    pub(crate) lands: bool,
    pub(crate) question: String,
    pub(crate) since: i64,
    pub(crate) decision: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) decided_at: Option<i64>,
}

/// The checkpoints of `run`, in order.
pub(crate) fn checkpoint_rows(
    conn: &Connection,
    run: &str,
) -> Result<Vec<CheckpointRow>, LedgerError> {
    let read = |source| LedgerError::Read {
        what: format!("the checkpoints of run `{run}`"),
        source,
    };
    let mut stmt = conn
        .prepare(
            "SELECT c.id, c.run, c.task, c.attempt_id, a.number, c.kind, c.lands, c.question,
                c.since, c.decision, c.reason, c.decided_at
             FROM checkpoints c JOIN attempts a ON a.id = c.attempt_id
             WHERE c.run = ?1 ORDER BY c.id",
        )
        .map_err(read)?;
    let rows = stmt
        .query_map([run], |r| {
            Ok(CheckpointRow {
                id: r.get(0)?,
                run: r.get(1)?,
                task: r.get(2)?,
                attempt_id: r.get(3)?,
                attempt: r.get(4)?,
                kind: r.get(5)?,
                lands: r.get(6)?,
                question: r.get(7)?,
                since: r.get(8)?,
                decision: r.get(9)?,
                reason: r.get(10)?,
                decided_at: r.get(11)?,
            })
        })
        .map_err(read)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(read)
}

/// One reviewer's verdict on an attempt, as mvk made it out.
#[derive(Debug)]
pub(crate) struct ReviewRow<'a> {
    pub(crate) attempt_id: i64,
    pub(crate) agent: &'a str,
    /// `approve`, `reject` or `unknown`.
    pub(crate) verdict: &'a str,
    /// A JSON array of blockers.
    pub(crate) blockers_json: &'a str,
    pub(crate) notes: &'a [String],
    pub(crate) reason: &'a str,
    pub(crate) exit_code: Option<i32>,
    pub(crate) output: &'a str,
    /// What the reviewer spent, when its output said.
    pub(crate) usage: Option<Cost>,
}

/// A follow-up a reviewer noted.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct FollowupRow {
    pub(crate) run: String,
    pub(crate) task: String,
    pub(crate) attempt: u32,
    pub(crate) verdict: String,
    pub(crate) note: String,
    pub(crate) recorded_at: i64,
}

impl Ledger {
    /// Records a verdict with its notes and its cost, in one transaction; returns its id.
    pub(crate) fn record_review(&mut self, r: &ReviewRow<'_>) -> Result<i64, LedgerError> {
        let what = || format!("the review of attempt #{}", r.attempt_id);
        let sql = |source| LedgerError::Write {
            what: what(),
            source,
        };
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO reviews (attempt_id, agent, verdict, blockers_json, reason, exit_code,
                    output, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    r.attempt_id,
                    r.agent,
                    r.verdict,
                    r.blockers_json,
                    r.reason,
                    r.exit_code,
                    r.output,
                    now
                ],
            )
            .map_err(sql)?;
            let id = tx.last_insert_rowid();
            for note in r.notes.iter().filter(|n| !n.trim().is_empty()) {
                tx.execute(
                    "INSERT INTO followups (review_id, note, recorded_at) VALUES (?1, ?2, ?3)",
                    params![id, note, now],
                )
                .map_err(sql)?;
            }
            if let Some(c) = r.usage {
                insert_cost(tx, &what, r.attempt_id, "review", c, now)?;
            }
            Ok(id)
        })
    }

    /// How many attempts of one epoch of a task reviewers rejected (an attempt reviewed again
    /// after a crash counts once).
    pub(crate) fn review_rejections(
        &self,
        run: &str,
        task: &str,
        epoch: u32,
    ) -> Result<u32, LedgerError> {
        self.conn
            .query_row(
                "SELECT COUNT(DISTINCT r.attempt_id) FROM reviews r JOIN attempts a ON a.id = r.attempt_id
                 WHERE a.run = ?1 AND a.task = ?2 AND a.epoch = ?3 AND r.verdict = 'reject'",
                params![run, task, epoch],
                |r| r.get(0),
            )
            .map_err(|source| LedgerError::Read {
                what: format!("the reviews of task `{task}`"),
                source,
            })
    }

    /// The first verdict recorded on an attempt, `(verdict, blockers_json, reason)`: a resume
    /// that judges the attempt again keeps it rather than asking again.
    pub(crate) fn recorded_review(
        &self,
        attempt_id: i64,
    ) -> Result<Option<(String, String, String)>, LedgerError> {
        self.conn
            .query_row(
                "SELECT verdict, blockers_json, reason FROM reviews WHERE attempt_id = ?1
                 ORDER BY id LIMIT 1",
                params![attempt_id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|source| LedgerError::Read {
                what: format!("the review of attempt #{attempt_id}"),
                source,
            })
    }

    /// The blockers (a JSON array) of the last rejection in one epoch of a task.
    pub(crate) fn last_blockers(
        &self,
        run: &str,
        task: &str,
        epoch: u32,
    ) -> Result<Option<String>, LedgerError> {
        self.conn
            .query_row(
                "SELECT r.blockers_json FROM reviews r JOIN attempts a ON a.id = r.attempt_id
                 WHERE a.run = ?1 AND a.task = ?2 AND a.epoch = ?3 AND r.verdict = 'reject'
                 ORDER BY r.id DESC LIMIT 1",
                params![run, task, epoch],
                |r| r.get(0),
            )
            .optional()
            .map_err(|source| LedgerError::Read {
                what: format!("the last review of task `{task}`"),
                source,
            })
    }

    /// Opens a checkpoint: a task of the run waits for a person. The run goes on with its other
    /// tasks; [`Ledger::pause_run`] pauses it when nothing else can run.
    pub(crate) fn open_checkpoint(&mut self, c: &CheckpointStart<'_>) -> Result<i64, LedgerError> {
        let what = || {
            format!(
                "the stop for a person in task `{}` of run `{}`",
                c.task, c.run
            )
        };
        let sql = |source| LedgerError::Write {
            what: what(),
            source,
        };
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO checkpoints (run, task, attempt_id, kind, lands, question, since)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    c.run,
                    c.task,
                    c.attempt_id,
                    c.kind,
                    c.lands,
                    c.question,
                    now
                ],
            )
            .map_err(sql)?;
            Ok(tx.last_insert_rowid())
        })
    }

    /// Pauses a running run: it waits for a person's answer at its open checkpoints.
    pub(crate) fn pause_run(&mut self, run: &str) -> Result<(), LedgerError> {
        let what = || format!("the pause of run `{run}`");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE runs SET state = 'paused', heartbeat_at = ?2
                     WHERE id = ?1 AND state = 'running'",
                params![run, now],
                &format!("run `{run}`"),
                "`running`",
                "SELECT state FROM runs WHERE id = ?1",
                [run],
            )
        })
    }

    /// Records a person's decision at an open checkpoint; a checkpoint is decided once.
    pub(crate) fn decide(
        &mut self,
        checkpoint: i64,
        decision: &str,
        reason: Option<&str>,
    ) -> Result<(), LedgerError> {
        let what = || format!("the decision at checkpoint #{checkpoint}");
        self.write(&what, |tx, now| {
            transition(
                tx,
                &what,
                "UPDATE checkpoints SET decision = ?2, reason = ?3, decided_at = ?4
                     WHERE id = ?1 AND decision IS NULL",
                params![checkpoint, decision, reason, now],
                &format!("checkpoint #{checkpoint}"),
                "undecided",
                "SELECT COALESCE(decision, 'undecided') FROM checkpoints WHERE id = ?1",
                [checkpoint],
            )
        })
    }

    /// The checkpoints of `run` whose answer a resume has acted on (its `checkpoint.answered`
    /// event is written): a decided checkpoint not among them is an answer still to act on.
    pub(crate) fn answered_checkpoints(&self, run: &str) -> Result<BTreeSet<i64>, LedgerError> {
        let read = |source| LedgerError::Read {
            what: format!("the answered checkpoints of run `{run}`"),
            source,
        };
        let mut stmt = self
            .conn
            .prepare(
                "SELECT json_extract(detail_json, '$.checkpoint') FROM events
                 WHERE run = ?1 AND event = 'checkpoint.answered'",
            )
            .map_err(read)?;
        let ids = stmt
            .query_map([run], |r| r.get::<_, Option<i64>>(0))
            .map_err(read)?
            .collect::<rusqlite::Result<Vec<Option<i64>>>>()
            .map_err(read)?;
        Ok(ids.into_iter().flatten().collect())
    }

    /// The checkpoints of `run`, in order.
    pub(crate) fn checkpoints(&self, run: &str) -> Result<Vec<CheckpointRow>, LedgerError> {
        checkpoint_rows(&self.conn, run)
    }
}
