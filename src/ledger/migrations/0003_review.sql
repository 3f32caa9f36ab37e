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

-- A stop for a person: the run paused (`runs.state = 'paused'`) at attempt `attempt_id` of
-- `task`, because review rounds ran out ('review'), or the run's mode stops after each attempt
-- ('step') or before each landing ('batch'). `mvk approve` / `mvk reject` record the decision;
-- the run goes on from it. `lands`: whether approving lands the attempt (its gates passed).
CREATE TABLE checkpoints (
    id          INTEGER PRIMARY KEY,
    run         TEXT    NOT NULL REFERENCES runs (id),
    task        TEXT    NOT NULL,
    attempt_id  INTEGER NOT NULL REFERENCES attempts (id),
    kind        TEXT    NOT NULL CHECK (kind IN ('review', 'step', 'batch')),
    lands       INTEGER NOT NULL CHECK (lands IN (0, 1)),
    -- What the person is asked, in one line.
    question    TEXT    NOT NULL,
    since       INTEGER NOT NULL,
    decision    TEXT CHECK (decision IN ('approve', 'reject')),
    -- The reason a rejection gives; it goes into the next attempt's prompt.
    reason      TEXT,
    decided_at  INTEGER,
    CHECK ((decision IS NULL) = (decided_at IS NULL)),
    CHECK (decision IS NOT 'reject' OR (reason IS NOT NULL AND reason <> ''))
);

CREATE INDEX checkpoints_by_run ON checkpoints (run, task, id);
