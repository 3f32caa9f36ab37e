//! Pull requests in the ledger. In: the intent to push an accepted change as a branch, then
//! that it was pushed, then the pull request's URL; out: where a task's pull request stands,
//! so that a resume pushes and opens each at most once, and `mvk status` shows its URL.

use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::{Ledger, LedgerError};

/// One pull request as the ledger keeps it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct PullRequestRow {
    pub(crate) id: i64,
    pub(crate) task: String,
    pub(crate) attempt_id: i64,
    pub(crate) remote: String,
    pub(crate) branch: String,
    pub(crate) base_branch: String,
    pub(crate) commit: String,
    /// `intent`, `pushed` or `opened`.
    pub(crate) state: String,
    pub(crate) url: Option<String>,
    pub(crate) detail: Option<String>,
}

/// A pull request about to be pushed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PullRequestStart<'a> {
    pub(crate) run: &'a str,
    pub(crate) task: &'a str,
    pub(crate) attempt_id: i64,
    pub(crate) remote: &'a str,
    pub(crate) branch: &'a str,
    pub(crate) base_branch: &'a str,
    pub(crate) commit: &'a str,
}

const COLUMNS: &str = "id, task, attempt_id, remote, branch, base_branch, commit_id, state, url,
    detail FROM pull_requests";

fn row(r: &Row<'_>) -> rusqlite::Result<PullRequestRow> {
    Ok(PullRequestRow {
        id: r.get(0)?,
        task: r.get(1)?,
        attempt_id: r.get(2)?,
        remote: r.get(3)?,
        branch: r.get(4)?,
        base_branch: r.get(5)?,
        commit: r.get(6)?,
        state: r.get(7)?,
        url: r.get(8)?,
        detail: r.get(9)?,
    })
}

fn of_run(conn: &rusqlite::Connection, run: &str) -> Result<Vec<PullRequestRow>, LedgerError> {
    let read = |source| LedgerError::Read {
        what: format!("the pull requests of run `{run}`"),
        source,
    };
    let mut stmt = conn
        .prepare(&format!("SELECT {COLUMNS} WHERE run = ?1 ORDER BY id"))
        .map_err(read)?;
    let rows = stmt.query_map(params![run], row).map_err(read)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(read)
}

impl Ledger {
    /// The run's pull requests, in the order they were begun.
    pub(crate) fn pull_requests(&self, run: &str) -> Result<Vec<PullRequestRow>, LedgerError> {
        of_run(&self.conn, run)
    }

    /// The pull request of `attempt_id`, begun now unless it was begun before (by a run that
    /// died on the way): the row as it stands.
    pub(crate) fn begin_pull_request(
        &mut self,
        p: &PullRequestStart<'_>,
    ) -> Result<PullRequestRow, LedgerError> {
        let what = || format!("the pull request of task `{}`", p.task);
        let sql = |source| LedgerError::Write {
            what: what(),
            source,
        };
        self.write(&what, |tx, now| {
            tx.execute(
                "INSERT INTO pull_requests (run, task, attempt_id, remote, branch, base_branch,
                    commit_id, state, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'intent', ?8, ?8)
                 ON CONFLICT (attempt_id) DO NOTHING",
                params![
                    p.run,
                    p.task,
                    p.attempt_id,
                    p.remote,
                    p.branch,
                    p.base_branch,
                    p.commit,
                    now
                ],
            )
            .map_err(sql)?;
            tx.query_row(
                &format!("SELECT {COLUMNS} WHERE attempt_id = ?1"),
                params![p.attempt_id],
                row,
            )
            .optional()
            .map_err(sql)?
            .ok_or_else(|| LedgerError::Write {
                what: what(),
                source: rusqlite::Error::QueryReturnedNoRows,
            })
        })
    }

    /// Moves pull request `id` on to `state` (`pushed` or `opened`, with its `url`), or, with
    /// `state` `None`, records why a step was refused (`detail`) where it stands.
    pub(crate) fn update_pull_request(
        &mut self,
        id: i64,
        state: Option<&str>,
        url: Option<&str>,
        detail: Option<&str>,
    ) -> Result<(), LedgerError> {
        let what = || format!("pull request #{id}");
        self.write(&what, |tx, now| {
            tx.execute(
                "UPDATE pull_requests SET state = COALESCE(?2, state), url = COALESCE(?3, url),
                    detail = ?4, updated_at = ?5 WHERE id = ?1",
                params![id, state, url, detail, now],
            )
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })?;
            Ok(())
        })
    }
}
