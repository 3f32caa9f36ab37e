//! Lessons in the ledger. In: the notes an attempt's maker or reviewer wrote (with the run, task,
//! attempt and the task's scope); out: the lessons a later prompt shows (those of the same loop
//! file and task, or of a task whose scope overlaps), the list `mvk lessons` prints, and a
//! lesson forgotten or marked pinned.

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use super::read::Reader;
use super::{Ledger, LedgerError};

/// One lesson as the ledger keeps it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct LessonRow {
    pub(crate) id: i64,
    pub(crate) run: String,
    /// The run's loop file, as the run named it.
    pub(crate) file: String,
    pub(crate) task: String,
    pub(crate) attempt: u32,
    /// `maker` or `reviewer`.
    pub(crate) author: String,
    pub(crate) scope: Vec<String>,
    pub(crate) text: String,
    pub(crate) created_at: i64,
    pub(crate) forgotten_at: Option<i64>,
    pub(crate) pinned_to: Option<String>,
}

/// Where lessons were learnt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LessonSource<'a> {
    pub(crate) run: &'a str,
    pub(crate) task: &'a str,
    pub(crate) attempt: u32,
    pub(crate) author: &'a str,
    pub(crate) scope: &'a [String],
}

const COLUMNS: &str = "l.id, l.run, r.file, l.task, l.attempt, l.author, l.scope_json, l.text,
    l.created_at, l.forgotten_at, l.pinned_to FROM lessons l JOIN runs r ON r.id = l.run";

fn row(r: &Row<'_>) -> rusqlite::Result<LessonRow> {
    let scope: String = r.get(6)?;
    Ok(LessonRow {
        id: r.get(0)?,
        run: r.get(1)?,
        file: r.get(2)?,
        task: r.get(3)?,
        attempt: r.get(4)?,
        author: r.get(5)?,
        // Written by this module from a list of strings; anything else reads as no scope.
        scope: serde_json::from_str(&scope).unwrap_or_default(),
        text: r.get(7)?,
        created_at: r.get(8)?,
        forgotten_at: r.get(9)?,
        pinned_to: r.get(10)?,
    })
}

fn select(
    conn: &Connection,
    what: &str,
    filter: &str,
    args: impl rusqlite::Params,
) -> Result<Vec<LessonRow>, LedgerError> {
    let read = |source| LedgerError::Read {
        what: what.to_string(),
        source,
    };
    let mut stmt = conn
        .prepare(&format!("SELECT {COLUMNS} {filter}"))
        .map_err(read)?;
    let rows = stmt.query_map(args, row).map_err(read)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(read)
}

/// Every lesson, newest first; forgotten ones too with `forgotten`.
fn list(conn: &Connection, forgotten: bool) -> Result<Vec<LessonRow>, LedgerError> {
    select(
        conn,
        "the lessons",
        "WHERE (?1 OR l.forgotten_at IS NULL) ORDER BY l.id DESC",
        params![forgotten],
    )
}

fn one(conn: &Connection, id: i64) -> Result<Option<LessonRow>, LedgerError> {
    Ok(select(conn, "a lesson", "WHERE l.id = ?1", params![id])?
        .into_iter()
        .next())
}

impl Reader {
    /// Every lesson, newest first; forgotten ones too with `forgotten`.
    pub(crate) fn lessons(&self, forgotten: bool) -> Result<Vec<LessonRow>, LedgerError> {
        list(&self.conn, forgotten)
    }
}

impl Ledger {
    /// Records the lessons `texts` learnt at `from`, in one transaction, leaving out a text the
    /// same loop file's task already has as a live lesson; their ids.
    pub(crate) fn record_lessons(
        &mut self,
        from: &LessonSource<'_>,
        texts: &[String],
    ) -> Result<Vec<i64>, LedgerError> {
        let what = || {
            format!(
                "the lessons of attempt {} of task `{}`",
                from.attempt, from.task
            )
        };
        let sql = |source| LedgerError::Write {
            what: what(),
            source,
        };
        let scope = serde_json::to_string(from.scope).unwrap_or_else(|_| "[]".to_string());
        self.write(&what, |tx, now| {
            let mut ids = Vec::new();
            for text in texts {
                let known: Option<i64> = tx
                    .query_row(
                        "SELECT l.id FROM lessons l JOIN runs r ON r.id = l.run
                         WHERE r.file = (SELECT file FROM runs WHERE id = ?1) AND l.task = ?2
                           AND l.text = ?3 AND l.forgotten_at IS NULL LIMIT 1",
                        params![from.run, from.task, text],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(sql)?;
                if known.is_some() {
                    continue;
                }
                tx.execute(
                    "INSERT INTO lessons (run, task, attempt, author, scope_json, text, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        from.run,
                        from.task,
                        from.attempt,
                        from.author,
                        scope,
                        text,
                        now
                    ],
                )
                .map_err(sql)?;
                ids.push(tx.last_insert_rowid());
            }
            Ok(ids)
        })
    }

    /// The live lessons task `task` of run `run` (whose scope is `scope`) is shown, newest first,
    /// at most `limit`: those of the same loop file and task, and those of any task whose scope
    /// overlaps its own (see [`scopes_overlap`]). Pinned ones are shown from their file instead.
    pub(crate) fn related_lessons(
        &self,
        run: &str,
        task: &str,
        scope: &[String],
        limit: usize,
    ) -> Result<Vec<LessonRow>, LedgerError> {
        let file: Option<String> = self
            .conn
            .query_row("SELECT file FROM runs WHERE id = ?1", params![run], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|source| LedgerError::Read {
                what: format!("run `{run}`"),
                source,
            })?;
        let live = select(
            &self.conn,
            "the lessons",
            "WHERE l.forgotten_at IS NULL AND l.pinned_to IS NULL ORDER BY l.id DESC",
            [],
        )?;
        Ok(live
            .into_iter()
            .filter(|l| {
                (Some(&l.file) == file.as_ref() && l.task == task)
                    || scopes_overlap(&l.scope, scope)
            })
            .take(limit)
            .collect())
    }

    /// Lesson `id`, forgotten or not.
    pub(crate) fn lesson(&self, id: i64) -> Result<Option<LessonRow>, LedgerError> {
        one(&self.conn, id)
    }

    /// Marks lesson `id` forgotten; whether it was live.
    pub(crate) fn forget_lesson(&mut self, id: i64) -> Result<bool, LedgerError> {
        let what = || format!("forgetting lesson {id}");
        self.write(&what, |tx, now| {
            tx.execute(
                "UPDATE lessons SET forgotten_at = ?2 WHERE id = ?1 AND forgotten_at IS NULL",
                params![id, now],
            )
            .map(|n| n == 1)
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })
        })
    }

    /// Marks lesson `id` as written into the repository file `file`; whether it was live.
    pub(crate) fn pin_lesson(&mut self, id: i64, file: &str) -> Result<bool, LedgerError> {
        let what = || format!("pinning lesson {id}");
        self.write(&what, |tx, _| {
            tx.execute(
                "UPDATE lessons SET pinned_to = ?2
                 WHERE id = ?1 AND forgotten_at IS NULL AND pinned_to IS NULL",
                params![id, file],
            )
            .map(|n| n == 1)
            .map_err(|source| LedgerError::Write {
                what: what(),
                source,
            })
        })
    }
}

/// Whether two tasks' scopes overlap, as far as the patterns' literal beginnings tell (the part
/// before the first wildcard): `src/api/**` and `src/**` do, `docs/**` and `src/**` do not. A
/// scope of every file overlaps nothing here: it would make every loop's lessons everyone's.
pub(crate) fn scopes_overlap(a: &[String], b: &[String]) -> bool {
    // The whole directories a pattern names before its first wildcard: `src/api` of
    // `src/api/**`, `src` of `src/ap*.rs`; none for `**/*.py` or `*.md`, which may match anywhere.
    let dirs = |p: &str| -> Vec<String> {
        let end = p.find(['*', '?', '[', '{']).unwrap_or(p.len());
        let literal = &p[..end];
        let whole = if end == p.len() {
            literal
        } else {
            literal.rsplit_once('/').map_or("", |(d, _)| d)
        };
        whole
            .split('/')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let every = |s: &[String]| s.is_empty() || s.iter().any(|p| dirs(p).is_empty());
    if every(a) || every(b) {
        return false;
    }
    a.iter().any(|x| {
        let x = dirs(x);
        b.iter().any(|y| {
            let y = dirs(y);
            // One is inside the other, component by component (`src` is not inside `srcx`).
            let n = x.len().min(y.len());
            x[..n] == y[..n]
        })
    })
}

#[cfg(test)]
mod tests {
    use super::scopes_overlap;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn scopes_overlap_by_their_literal_beginnings_and_every_file_overlaps_nothing() {
        assert!(scopes_overlap(&s(&["src/api/**"]), &s(&["src/**"])));
        assert!(scopes_overlap(&s(&["src/a.rs"]), &s(&["src/*.rs"])));
        assert!(scopes_overlap(
            &s(&["docs/**", "src/x.rs"]),
            &s(&["src/**"])
        ));
        assert!(!scopes_overlap(&s(&["docs/**"]), &s(&["src/**"])));
        assert!(!scopes_overlap(&s(&["**"]), &s(&["src/**"])));
        assert!(!scopes_overlap(&s(&[]), &s(&["src/**"])));
        // A pattern that may match anywhere shares with no one; a name is a whole component.
        assert!(!scopes_overlap(&s(&["**/*.py"]), &s(&["src/**"])));
        assert!(!scopes_overlap(&s(&["*.md"]), &s(&["docs/**"])));
        assert!(!scopes_overlap(&s(&["{src,lib}/**"]), &s(&["src/**"])));
        assert!(!scopes_overlap(&s(&["src"]), &s(&["srcx/**"])));
        assert!(scopes_overlap(&s(&["src/ap*.rs"]), &s(&["src/api/**"])));
    }
}
