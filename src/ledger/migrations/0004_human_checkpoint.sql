-- Version 4: the `human` rung is a checkpoint too ('human': the ladder climbed to `rung human`
-- after the attempt; approving judges the attempt's branch as it then stands, rejecting gives
-- one more attempt). SQLite cannot change a CHECK constraint in place, so the table is rebuilt
-- with the same columns and rows; nothing references it.
CREATE TABLE checkpoints_v4 (
    id          INTEGER PRIMARY KEY,
    run         TEXT    NOT NULL REFERENCES runs (id),
    task        TEXT    NOT NULL,
    attempt_id  INTEGER NOT NULL REFERENCES attempts (id),
    kind        TEXT    NOT NULL CHECK (kind IN ('review', 'step', 'batch', 'human')),
    lands       INTEGER NOT NULL CHECK (lands IN (0, 1)),
    question    TEXT    NOT NULL,
    since       INTEGER NOT NULL,
    decision    TEXT CHECK (decision IN ('approve', 'reject')),
    reason      TEXT,
    decided_at  INTEGER,
    CHECK ((decision IS NULL) = (decided_at IS NULL)),
    CHECK (decision IS NOT 'reject' OR (reason IS NOT NULL AND reason <> ''))
);

INSERT INTO checkpoints_v4 (id, run, task, attempt_id, kind, lands, question, since, decision,
                            reason, decided_at)
    SELECT id, run, task, attempt_id, kind, lands, question, since, decision, reason, decided_at
    FROM checkpoints;

DROP TABLE checkpoints;
ALTER TABLE checkpoints_v4 RENAME TO checkpoints;
CREATE INDEX checkpoints_by_run ON checkpoints (run, task, id);
