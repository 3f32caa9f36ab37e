-- Migration 3: the independent reviewer and its follow-ups.
-- Applied once, in one transaction with `PRAGMA user_version = 3`. Never edit once shipped.

-- Each verdict of a reviewer on an attempt whose gates passed. `verdict` is what mvk made of
-- its answer: 'unknown' when no line parsed as a verdict, the verdict broke the contract's form
-- (a reject without blockers, a blocker without a known category or evidence), or the reviewer
-- did not exit 0. A reject blocks the merge; its blockers go into the next attempt's prompt.
CREATE TABLE reviews (
    id            INTEGER PRIMARY KEY,
    attempt_id    INTEGER NOT NULL REFERENCES attempts (id),
    agent         TEXT    NOT NULL,
    verdict       TEXT    NOT NULL CHECK (verdict IN ('approve', 'reject', 'unknown')),
    -- JSON array of {category, evidence, location}; empty unless the verdict is 'reject'.
    blockers_json TEXT    NOT NULL CHECK (json_valid(blockers_json)),
    -- Why the answer was unknown ('' otherwise).
    reason        TEXT    NOT NULL,
    exit_code     INTEGER,
    -- The reviewer's standard output, under `.mvk/runs/<run>/`.
    output        TEXT    NOT NULL,
    recorded_at   INTEGER NOT NULL,
    CHECK ((verdict = 'reject') = (json_array_length(blockers_json) > 0))
);

CREATE INDEX reviews_by_attempt ON reviews (attempt_id);

-- A reviewer's non-blocking notes: follow-up work `mvk followups` lists.
CREATE TABLE followups (
    id          INTEGER PRIMARY KEY,
    review_id   INTEGER NOT NULL REFERENCES reviews (id),
    note        TEXT    NOT NULL CHECK (note <> ''),
    recorded_at INTEGER NOT NULL
);

CREATE INDEX followups_by_review ON followups (review_id);
