-- Migration 2: what `mvk resume` and `--accept-drift` need.
-- Applied once, in one transaction with `PRAGMA user_version = 2`. Never edit once shipped.

-- The commit a task started from, and the content digest of its sealed paths there: a sealed
-- file changed in the base since the run began is drift. NULL for tasks started before this
-- migration (their base is in the `task.started` event).
ALTER TABLE tasks ADD COLUMN base TEXT;
ALTER TABLE tasks ADD COLUMN seal_digest TEXT;

-- A task re-planned by `mvk resume --accept-drift` starts a new epoch: its budgets, ladder and
-- same-failure count start again, and only the attempts of its current epoch count for them.
-- Attempt numbers go on counting across epochs (MVK_ATTEMPT stays unique within the task).
ALTER TABLE tasks ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0);
ALTER TABLE attempts ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0);

-- Each time a run was continued by `mvk resume`: by which process, and, when the definition had
-- drifted and `--accept-drift` was given, the program it moved from and to, and the drift report
-- (JSON) it accepted.
CREATE TABLE resumptions (
    id                  INTEGER PRIMARY KEY,
    run                 TEXT    NOT NULL REFERENCES runs (id),
    at                  INTEGER NOT NULL,
    pid                 INTEGER NOT NULL CHECK (pid >= 0),
    host                TEXT    NOT NULL,
    -- Why the run needed resuming: 'interrupted' (its process died) or 'paused'.
    found               TEXT    NOT NULL CHECK (found IN ('interrupted', 'paused')),
    old_program_digest  TEXT    NOT NULL REFERENCES programs (digest),
    new_program_digest  TEXT    NOT NULL REFERENCES programs (digest),
    -- A sealed file's content can drift while the program stays the same, so the digests may
    -- be equal with a report.
    drift_json          TEXT CHECK (drift_json IS NULL OR json_valid(drift_json))
);

CREATE INDEX resumptions_by_run ON resumptions (run, id);
