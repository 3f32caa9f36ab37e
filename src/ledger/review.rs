//! A reviewer's verdict in; the rows `reviews`, `followups` and its `costs` (kind `review`) out,
//! and what the driver asks of them: how many rejections a task has had, and the blockers of the
//! last one (which the next reviewer checks first).

use rusqlite::{OptionalExtension, params};

use super::{Cost, Ledger, LedgerError, insert_cost};

/// One reviewer's verdict on an attempt, as mvk made it out.
#[derive(Debug)]
pub struct ReviewRow<'a> {
    pub attempt_id: i64,
    pub agent: &'a str,
    /// `approve`, `reject` or `unknown`.
    pub verdict: &'a str,
    /// A JSON array of blockers.
    pub blockers_json: &'a str,
    pub notes: &'a [String],
    pub reason: &'a str,
    pub exit_code: Option<i32>,
    pub output: &'a str,
    /// What the reviewer spent, when its output said.
    pub usage: Option<Cost>,
}

/// A follow-up a reviewer noted.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FollowupRow {
    pub run: String,
    pub task: String,
    pub attempt: u32,
    pub verdict: String,
    pub note: String,
    pub recorded_at: i64,
}

impl Ledger {
    /// Records a verdict with its notes and its cost, in one transaction; returns its id.
    pub fn record_review(&mut self, r: &ReviewRow<'_>) -> Result<i64, LedgerError> {
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

    /// How many times reviewers rejected attempts of one epoch of a task.
    pub fn review_rejections(&self, run: &str, task: &str, epoch: u32) -> Result<u32, LedgerError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM reviews r JOIN attempts a ON a.id = r.attempt_id
                 WHERE a.run = ?1 AND a.task = ?2 AND a.epoch = ?3 AND r.verdict = 'reject'",
                params![run, task, epoch],
                |r| r.get(0),
            )
            .map_err(|source| LedgerError::Read {
                what: format!("the reviews of task `{task}`"),
                source,
            })
    }

    /// The blockers (a JSON array) of the last rejection in one epoch of a task.
    pub fn last_blockers(
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
}
