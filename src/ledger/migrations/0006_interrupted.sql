-- Migration 6: 'interrupted', the outcome of a run whose process died and that nothing continues.
-- Applied once, in one transaction with `PRAGMA user_version = 6`. Never edit once shipped.

-- An `mvk attempt` killed before it ended (SIGKILL, its MCP server gone) cannot be resumed: it
-- would go on as a run and land work nobody asked to land. The next `mvk resume` or `mvk
-- attempt` that finds it dead kills what it left running and closes it, its task and its run
-- as 'interrupted' (exit 130), so that it no longer looks alive and `mvk gc` removes its
-- branches. SQLite cannot change a CHECK in place: `runs` and `tasks` are rebuilt with the new
-- outcome, their rows copied as they are. The rows of other tables that reference them are
-- checked before the commit ([`schema`] migrates with foreign keys off, as SQLite requires for
-- a rebuild, and runs `PRAGMA foreign_key_check`).

CREATE TABLE runs_new (
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
    state          TEXT    NOT NULL CHECK (state IN ('running', 'paused', 'finished')),
    outcome        TEXT CHECK (outcome IN ('accepted', 'rejected', 'stuck', 'unknown', 'budget',
                                           'human', 'skipped', 'drift', 'error',
                                           'interrupted')),
    exit_code      INTEGER CHECK (exit_code BETWEEN 0 AND 255),
    started_at     INTEGER NOT NULL,
    heartbeat_at   INTEGER NOT NULL,
    finished_at    INTEGER,
    command        TEXT    NOT NULL DEFAULT 'apply' CHECK (command IN ('apply', 'attempt')),
    CHECK ((state = 'finished') = (outcome IS NOT NULL)),
    CHECK ((state = 'finished') = (exit_code IS NOT NULL)),
    CHECK ((state = 'finished') = (finished_at IS NOT NULL))
);
INSERT INTO runs_new (id, file, program, kind, program_digest, repo_root, base_commit,
                      target_branch, mode, pid, host, state, outcome, exit_code, started_at,
                      heartbeat_at, finished_at, command)
     SELECT id, file, program, kind, program_digest, repo_root, base_commit, target_branch,
            mode, pid, host, state, outcome, exit_code, started_at, heartbeat_at, finished_at,
            command
       FROM runs;

CREATE TABLE tasks_new (
    run         TEXT    NOT NULL REFERENCES runs (id),
    name        TEXT    NOT NULL,
    digest      TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'running', 'finished')),
    outcome     TEXT CHECK (outcome IN ('accepted', 'rejected', 'stuck', 'unknown', 'budget',
                                        'human', 'skipped', 'drift', 'error', 'interrupted')),
    merged      TEXT,
    started_at  INTEGER,
    finished_at INTEGER,
    base        TEXT,
    seal_digest TEXT,
    epoch       INTEGER NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    PRIMARY KEY (run, name),
    CHECK ((state = 'finished') = (outcome IS NOT NULL)),
    CHECK ((state = 'finished') = (finished_at IS NOT NULL)),
    CHECK (merged IS NULL OR outcome = 'accepted')
);
INSERT INTO tasks_new (run, name, digest, state, outcome, merged, started_at, finished_at, base,
                       seal_digest, epoch)
     SELECT run, name, digest, state, outcome, merged, started_at, finished_at, base,
            seal_digest, epoch
       FROM tasks;

DROP TABLE tasks;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
ALTER TABLE tasks_new RENAME TO tasks;
CREATE INDEX runs_by_start ON runs (started_at);
