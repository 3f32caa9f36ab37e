-- Migration 8: the main checkout's index lock as a landing takes it, and the checkpoint a landing
-- stops at when someone else holds that lock. Applied once, in one transaction with
-- `PRAGMA user_version = 8`. Never edit once shipped.

-- The name of the file (in the main checkout's git directory) through which a landing takes
-- `index.lock`: written with the intent, before the lock is taken, so that a resume can tell a
-- lock mvk left from anyone else's (the two are one file) and finish or undo the landing. NULL
-- for intents recorded before this migration.
ALTER TABLE merges ADD COLUMN index_lock TEXT;

-- A landing the main checkout's index lock refused ('landing': another process held it): a person
-- removes the lock, then approving lands the change. SQLite cannot change a CHECK constraint in
-- place, so the table is rebuilt with the same columns and rows; nothing references it.
CREATE TABLE checkpoints_v8 (
    id          INTEGER PRIMARY KEY,
    run         TEXT    NOT NULL REFERENCES runs (id),
    task        TEXT    NOT NULL,
    attempt_id  INTEGER NOT NULL REFERENCES attempts (id),
    kind        TEXT    NOT NULL CHECK (kind IN ('review', 'step', 'batch', 'human', 'landing')),
    lands       INTEGER NOT NULL CHECK (lands IN (0, 1)),
    question    TEXT    NOT NULL,
    since       INTEGER NOT NULL,
    decision    TEXT CHECK (decision IN ('approve', 'reject')),
    reason      TEXT,
    decided_at  INTEGER,
    CHECK ((decision IS NULL) = (decided_at IS NULL)),
    CHECK (decision IS NOT 'reject' OR (reason IS NOT NULL AND reason <> ''))
);

INSERT INTO checkpoints_v8 (id, run, task, attempt_id, kind, lands, question, since, decision,
                            reason, decided_at)
    SELECT id, run, task, attempt_id, kind, lands, question, since, decision, reason, decided_at
    FROM checkpoints;

DROP TABLE checkpoints;
ALTER TABLE checkpoints_v8 RENAME TO checkpoints;
CREATE INDEX checkpoints_by_run ON checkpoints (run, task, id);
