-- Migration 9: lessons, the short durable notes a maker or a reviewer writes to
-- `$MVK_LESSONS_FILE`, shown to later attempts of the task, later runs of the same loop and tasks
-- whose scope overlaps. Applied once, in one transaction with `PRAGMA user_version = 9`. Never
-- edit once shipped.

CREATE TABLE lessons (
    id           INTEGER PRIMARY KEY,
    run          TEXT    NOT NULL REFERENCES runs (id),
    task         TEXT    NOT NULL,
    attempt      INTEGER NOT NULL CHECK (attempt >= 1),
    author       TEXT    NOT NULL CHECK (author IN ('maker', 'reviewer')),
    -- The task's scope globs (a JSON array) when it was learnt: what "related work" overlaps.
    scope_json   TEXT    NOT NULL CHECK (json_valid(scope_json)),
    text         TEXT    NOT NULL CHECK (text <> ''),
    created_at   INTEGER NOT NULL,
    -- Set by `mvk lessons forget`: kept for the record, never shown to an agent again.
    forgotten_at INTEGER,
    -- Set by `mvk lessons pin`: the repository file it was written into, which shows it from
    -- then on (so the ledger's copy is not shown twice).
    pinned_to    TEXT
);

-- A prompt reads the newest lessons first.
CREATE INDEX lessons_by_age ON lessons (created_at);
