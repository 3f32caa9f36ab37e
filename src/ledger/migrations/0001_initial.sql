-- Migration 1: the first ledger schema.
-- Applied once, in one transaction with `PRAGMA user_version = 1`. Never edit this file once it
-- has shipped: change the schema by appending a new migration (see `MIGRATIONS` in mod.rs).
-- Times are INTEGER milliseconds since the Unix epoch (UTC). Commits are 40-digit hex text.

-- A compiled program, stored once per program digest, so that a resume knows what a run was
-- promised without the original files (digests see meaning only, so equal digests mean
-- equal programs; the first run's IR and sources are the ones kept).
CREATE TABLE programs (
    digest     TEXT    NOT NULL PRIMARY KEY,
    ir_json    TEXT    NOT NULL CHECK (json_valid(ir_json)),
    created_at INTEGER NOT NULL
);

-- Every file a program was compiled from (loop file, imports, templates), in the compiler's file
-- order: `file_id` is the position the IR's spans refer to, so stored spans resolve to this text.
CREATE TABLE program_sources (
    program_digest TEXT    NOT NULL REFERENCES programs (digest),
    file_id        INTEGER NOT NULL CHECK (file_id >= 0),
    path           TEXT    NOT NULL,
    text           TEXT    NOT NULL,
    PRIMARY KEY (program_digest, file_id)
);

-- One `mvk apply` of a loop or flow. `pid`, `host` and `heartbeat_at` tell a live run from one
-- whose process died; `state` is where it stands, `outcome`/`exit_code` how it ended.
CREATE TABLE runs (
    id             TEXT    NOT NULL PRIMARY KEY,
    file           TEXT    NOT NULL,
    program        TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('loop', 'flow')),
    program_digest TEXT    NOT NULL REFERENCES programs (digest),
    repo_root      TEXT    NOT NULL,
    base_commit    TEXT    NOT NULL,
    target_branch  TEXT    NOT NULL,
    mode           TEXT    NOT NULL CHECK (mode IN ('auto', 'batch', 'step')),
    pid            INTEGER NOT NULL CHECK (pid >= 0),
    host           TEXT    NOT NULL,
    -- 'paused' is for a run stopped at a checkpoint that `mvk resume` continues.
    state          TEXT    NOT NULL CHECK (state IN ('running', 'paused', 'finished')),
    -- 'drift' and 'error' are for runs that stop on drift (exit 5) or on mvk's own error (70).
    outcome        TEXT CHECK (outcome IN ('accepted', 'rejected', 'stuck', 'unknown', 'budget',
                                           'human', 'skipped', 'drift', 'error')),
    exit_code      INTEGER CHECK (exit_code BETWEEN 0 AND 255),
    started_at     INTEGER NOT NULL,
    heartbeat_at   INTEGER NOT NULL,
    finished_at    INTEGER,
    CHECK ((state = 'finished') = (outcome IS NOT NULL)),
    CHECK ((state = 'finished') = (exit_code IS NOT NULL)),
    CHECK ((state = 'finished') = (finished_at IS NOT NULL))
);

-- `mvk runs` and "the latest run" read runs newest first.
CREATE INDEX runs_by_start ON runs (started_at);

-- One task of a run (a loop is a one-task program) with its content digest at the start.
CREATE TABLE tasks (
    run         TEXT    NOT NULL REFERENCES runs (id),
    name        TEXT    NOT NULL,
    digest      TEXT    NOT NULL,
    -- 'pending' is for a task listed before it starts (status of a waiting flow).
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'running', 'finished')),
    outcome     TEXT CHECK (outcome IN ('accepted', 'rejected', 'stuck', 'unknown', 'budget',
                                        'human', 'skipped', 'drift', 'error')),
    -- The commit the accepted change landed as, when it landed one.
    merged      TEXT,
    started_at  INTEGER,
    finished_at INTEGER,
    PRIMARY KEY (run, name),
    CHECK ((state = 'finished') = (outcome IS NOT NULL)),
    CHECK ((state = 'finished') = (finished_at IS NOT NULL)),
    CHECK (merged IS NULL OR outcome = 'accepted')
);

-- A task's component digest per field (`goal`, `gate.NAME`, `ladder`, …): drift detection
-- compares these field by field.
CREATE TABLE task_fields (
    run    TEXT NOT NULL,
    task   TEXT NOT NULL,
    field  TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (run, task, field),
    FOREIGN KEY (run, task) REFERENCES tasks (run, name)
);

-- The tasks a task waits for (`after`), by name: drift names the downstream tasks a change
-- invalidates. `after` may name a task this run did not start (`--task`), so it has no key.
CREATE TABLE task_deps (
    run   TEXT NOT NULL,
    task  TEXT NOT NULL,
    after TEXT NOT NULL,
    PRIMARY KEY (run, task, after),
    FOREIGN KEY (run, task) REFERENCES tasks (run, name)
);

-- One attempt at a task: one agent call (rate-limit retries included) on its own branch and
-- worktree, then its seal and gates. States in order: 'running' (written before the agent
-- starts), 'agent-done' (the agent's result and captured `head` are durable, so a resume can
-- carry on from the seal check), 'finished'; 'abandoned' is an attempt a resume found in flight
-- and restarted under the same number.
CREATE TABLE attempts (
    id             INTEGER PRIMARY KEY,
    run            TEXT    NOT NULL,
    task           TEXT    NOT NULL,
    -- 1-based over the task's whole ladder (MVK_ATTEMPT); `rung` is the 1-based rung.
    number         INTEGER NOT NULL CHECK (number >= 1),
    rung           INTEGER NOT NULL CHECK (rung >= 1),
    agent          TEXT    NOT NULL,
    branch         TEXT    NOT NULL,
    worktree       TEXT    NOT NULL,
    base           TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('running', 'agent-done', 'finished',
                                                     'abandoned')),
    started_at     INTEGER NOT NULL,
    -- The agent's result (set at 'agent-done').
    exit_code      INTEGER,
    timed_out      INTEGER CHECK (timed_out IN (0, 1)),
    agent_ms       INTEGER CHECK (agent_ms >= 0),
    head           TEXT,
    rate_limited   INTEGER NOT NULL DEFAULT 0 CHECK (rate_limited >= 0),
    agent_done_at  INTEGER,
    -- The verdict (set at 'finished').
    outcome        TEXT CHECK (outcome IN ('passed', 'failed')),
    failure_kind   TEXT CHECK (failure_kind IN ('agent', 'seal', 'gate', 'unknown', 'merge',
                                                'review')),
    signature      TEXT,
    criterion      TEXT,
    failure_json   TEXT CHECK (failure_json IS NULL OR json_valid(failure_json)),
    finished_at    INTEGER,
    FOREIGN KEY (run, task) REFERENCES tasks (run, name),
    -- Lets a merge name its attempt together with the attempt's run and task.
    UNIQUE (id, run, task),
    CHECK ((state = 'finished') = (outcome IS NOT NULL)),
    CHECK ((state IN ('finished', 'abandoned')) = (finished_at IS NOT NULL)),
    CHECK (outcome = 'failed' OR failure_kind IS NULL)
);

-- An attempt number is used once per task, not counting abandoned tries; `mvk status` reads a
-- task's attempts in order through it.
CREATE UNIQUE INDEX attempts_by_task ON attempts (run, task, number) WHERE state <> 'abandoned';

-- `mvk stats` groups attempts by agent and rung.
CREATE INDEX attempts_by_agent ON attempts (agent, rung);

-- One gate run for an attempt: its own gates ('gate') and those run on the merged result
-- ('after-merge', which may repeat when the target moved). `counts` come from the evidence.
CREATE TABLE gate_results (
    id          INTEGER PRIMARY KEY,
    attempt_id  INTEGER NOT NULL REFERENCES attempts (id),
    phase       TEXT    NOT NULL CHECK (phase IN ('gate', 'after-merge')),
    ordinal     INTEGER NOT NULL CHECK (ordinal >= 0),
    name        TEXT    NOT NULL,
    verdict     TEXT    NOT NULL CHECK (verdict IN ('pass', 'fail', 'unknown')),
    exit_code   INTEGER,
    executed    INTEGER CHECK (executed >= 0),
    passed      INTEGER CHECK (passed >= 0),
    failed      INTEGER CHECK (failed >= 0),
    skipped     INTEGER CHECK (skipped >= 0),
    evidence    TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    log         TEXT    NOT NULL,
    duration_ms INTEGER NOT NULL CHECK (duration_ms >= 0),
    recorded_at INTEGER NOT NULL,
    CHECK ((executed IS NULL) = (passed IS NULL)
       AND (executed IS NULL) = (failed IS NULL)
       AND (executed IS NULL) = (skipped IS NULL))
);

-- An attempt's gates in the order they ran.
CREATE INDEX gate_results_by_attempt ON gate_results (attempt_id, phase, ordinal);

-- `mvk stats`: the share of attempts each gate stopped.
CREATE INDEX gate_results_by_name ON gate_results (name, verdict);

-- What an attempt spent, as read from its agent's output ('agent'; the reviewer's calls will be
-- 'review'). Budgets and `mvk stats` sum these.
CREATE TABLE costs (
    id            INTEGER PRIMARY KEY,
    attempt_id    INTEGER NOT NULL REFERENCES attempts (id),
    kind          TEXT    NOT NULL CHECK (kind IN ('agent', 'review')),
    input_tokens  INTEGER NOT NULL CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL CHECK (output_tokens >= 0),
    usd_micros    INTEGER NOT NULL CHECK (usd_micros >= 0),
    recorded_at   INTEGER NOT NULL
);

-- An attempt's costs.
CREATE INDEX costs_by_attempt ON costs (attempt_id);

-- The run's events, as `events.jsonl` has them, in the order written (`id`). `task` is a name
-- without a key: a task that never started (`task.skipped`) still has events. `attempt` is the
-- attempt's number, as in the trail.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    run         TEXT    NOT NULL REFERENCES runs (id),
    task        TEXT,
    attempt     INTEGER CHECK (attempt >= 1),
    time_ms     INTEGER NOT NULL,
    event       TEXT    NOT NULL,
    detail_json TEXT    NOT NULL CHECK (json_valid(detail_json))
);

-- `mvk log [--follow]`: a run's events from a given id on.
CREATE INDEX events_by_run ON events (run, id);

-- A merge of an accepted attempt into its target. The row is written as 'intent' BEFORE the
-- target ref moves (with the tip it expects and the commit it will set), then marked; a resume
-- that finds an 'intent' checks git for `new_commit` on `into_branch` and never merges twice.
CREATE TABLE merges (
    id          INTEGER PRIMARY KEY,
    run         TEXT    NOT NULL,
    task        TEXT    NOT NULL,
    attempt_id  INTEGER NOT NULL,
    into_branch TEXT    NOT NULL,
    strategy    TEXT    NOT NULL CHECK (strategy IN ('ff', 'merge', 'squash')),
    old_tip     TEXT    NOT NULL,
    new_commit  TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('intent', 'done', 'conflict', 'failed',
                                                  'aborted')),
    -- The commit the target was set to ('done').
    commit_id   TEXT,
    detail      TEXT    NOT NULL DEFAULT '',
    started_at  INTEGER NOT NULL,
    finished_at INTEGER,
    FOREIGN KEY (attempt_id, run, task) REFERENCES attempts (id, run, task),
    CHECK ((state = 'intent') = (finished_at IS NULL)),
    CHECK (state <> 'done' OR commit_id IS NOT NULL)
);

-- A task's merges, and the open intents a resume must settle.
CREATE INDEX merges_by_task ON merges (run, task);
CREATE INDEX merges_open ON merges (run) WHERE state = 'intent';
