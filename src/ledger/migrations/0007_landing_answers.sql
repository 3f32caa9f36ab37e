-- Migration 7: the coordinator's answer to each landing request of a run made by workers
-- (`--executor temporal`). Applied once, in one transaction with `PRAGMA user_version = 7`. Never
-- edit once shipped.

-- A landing request is asked again when the coordinator died before its answer reached the
-- workflow, or when a heartbeat came late: the second asking gets the first answer, whatever it
-- was (a rejection stands, a change sent back is sent back from the same base, an empty change
-- is known to have landed as nothing). Written before the answer is given; the first one stands.
CREATE TABLE landing_answers (
    attempt_id  INTEGER NOT NULL PRIMARY KEY REFERENCES attempts (id),
    answer_json TEXT    NOT NULL,
    recorded_at INTEGER NOT NULL
);
