//! A ledger file's path in, an open connection with mvk's settings and the current schema out:
//! the pragmas every connection needs and the append-only migrations under `user_version`.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use super::LedgerError;

/// The schema, one SQL script per version: migration N (1-based) takes `user_version` from N-1
/// to N. Append only: a shipped migration is never edited or removed, since ledgers in users'
/// repositories have already run it (the test `shipped_migrations_never_change` holds them).
pub(crate) const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_initial.sql"),
    include_str!("migrations/0002_resume.sql"),
    include_str!("migrations/0003_review.sql"),
    include_str!("migrations/0004_human_checkpoint.sql"),
    include_str!("migrations/0005_run_command.sql"),
    include_str!("migrations/0006_interrupted.sql"),
    include_str!("migrations/0007_landing_answers.sql"),
    include_str!("migrations/0008_landing_lock.sql"),
    include_str!("migrations/0009_lessons.sql"),
    include_str!("migrations/0010_stopped_by.sql"),
    include_str!("migrations/0011_pull_requests.sql"),
];

/// The schema version this binary writes: the number of migrations.
pub(crate) fn known_version() -> i64 {
    // A list of SQL scripts written by hand never reaches i64::MAX entries.
    i64::try_from(MIGRATIONS.len()).unwrap_or(i64::MAX)
}

/// How long a writer waits for another connection's write lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens (creating) the database at `path`, sets the connection's pragmas and migrates it.
pub(crate) fn open(path: &Path) -> Result<Connection, LedgerError> {
    let open_err = |source| LedgerError::Open {
        path: path.to_path_buf(),
        source,
    };
    let conn = Connection::open(path).map_err(open_err)?;
    // First, so that changing the journal mode and migrating wait for another mvk's lock.
    conn.busy_timeout(BUSY_TIMEOUT).map_err(open_err)?;
    // Per connection, off by default in SQLite: without it the schema's keys are decoration.
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(open_err)?;
    // WAL: readers (`mvk status`, `mvk log --follow`) never block the writer, nor it them, and a
    // process killed mid-write leaves the last committed transaction intact. Stored in the file.
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
        .map_err(open_err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(LedgerError::NoWal {
            path: path.to_path_buf(),
            mode,
        });
    }
    // NORMAL is safe in WAL mode: a commit is in the WAL file before it returns, so it survives
    // the mvk process dying at any point (SIGKILL, a panic); only a power loss or OS crash can
    // lose the last few commits, and it never corrupts the database. FULL would add an fsync per
    // transition for that case alone, and a resume checks git for what the ledger may have lost.
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(open_err)?;
    migrate(path, conn)
}

/// Applies the migrations this database has not seen, each in its own transaction together with
/// its `user_version`, so a crash leaves the database at one version or the next, never between.
fn migrate(path: &Path, mut conn: Connection) -> Result<Connection, LedgerError> {
    let known = known_version();
    let err = |version, source| LedgerError::Migrate {
        path: path.to_path_buf(),
        version,
        source,
    };
    // An up-to-date ledger (nearly every open) is only read: `mvk status` opening it while a run
    // holds the write lock must not wait for it.
    if check_version(path, &conn, known).map_err(|e| err(known, e))?? == known {
        return Ok(conn);
    }
    // Off while migrating, as SQLite requires for rebuilding a table others reference (a
    // transaction cannot change it); each migration's result is checked before its commit
    // instead, and the keys are on again before the connection is handed out.
    conn.pragma_update(None, "foreign_keys", false)
        .map_err(|e| err(known, e))?;
    let migrated = apply_migrations(path, &mut conn, known);
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(|e| err(known, e))?;
    migrated?;
    Ok(conn)
}

/// [`migrate`]'s loop: each migration in its own transaction, checked for broken keys.
fn apply_migrations(path: &Path, conn: &mut Connection, known: i64) -> Result<(), LedgerError> {
    let err = |version, source| LedgerError::Migrate {
        path: path.to_path_buf(),
        version,
        source,
    };
    loop {
        // IMMEDIATE takes the write lock before the version is read again: two mvk processes
        // opening a new ledger at once cannot both apply the same migration.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| err(known, e))?;
        let found = check_version(path, &tx, known).map_err(|e| err(known, e))??;
        if found == known {
            tx.commit().map_err(|e| err(known, e))?;
            return Ok(());
        }
        let next = found + 1;
        let script = usize::try_from(found)
            .ok()
            .and_then(|i| MIGRATIONS.get(i))
            .ok_or(LedgerError::BadVersion {
                path: path.to_path_buf(),
                found,
            })?;
        tx.execute_batch(script).map_err(|e| err(next, e))?;
        let broken: i64 = tx
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .map_err(|e| err(next, e))?;
        if broken > 0 {
            // Rolled back when `tx` drops: the ledger stays at the version before.
            return Err(err(
                next,
                rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY),
                    Some(format!("{broken} rows would break a foreign key")),
                ),
            ));
        }
        tx.pragma_update(None, "user_version", next)
            .map_err(|e| err(next, e))?;
        tx.commit().map_err(|e| err(next, e))?;
    }
}

/// The database's `user_version`, refused when it is newer than `known`.
fn check_version(
    path: &Path,
    conn: &Connection,
    known: i64,
) -> rusqlite::Result<Result<i64, LedgerError>> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > known {
        return Ok(Err(LedgerError::TooNew {
            path: path.to_path_buf(),
            found,
            known,
        }));
    }
    Ok(Ok(found))
}
