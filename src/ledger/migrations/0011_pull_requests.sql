-- Migration 11: pull requests. Applied once, in one transaction with `PRAGMA user_version = 11`.
-- Never edit once shipped.

-- An accepted change landed as a pull request (`merge strategy="pr"`): its commit, made on the
-- attempt's base, is pushed as `branch` to `remote`, and a pull request opened from it against
-- `base_branch`. Written before each step it records, so that a resume pushes and opens each
-- at most once: 'intent' (the commit made, not known to be pushed), 'pushed' (the remote holds
-- it; a pull request is looked for before one is opened), 'opened' (`url` says where).
-- `detail` keeps the last refusal (a push the remote refused, a command that failed).
CREATE TABLE pull_requests (
    id INTEGER PRIMARY KEY,
    run TEXT NOT NULL REFERENCES runs(id),
    task TEXT NOT NULL,
    attempt_id INTEGER NOT NULL UNIQUE REFERENCES attempts(id),
    remote TEXT NOT NULL,
    branch TEXT NOT NULL,
    base_branch TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('intent', 'pushed', 'opened')),
    url TEXT,
    detail TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX pull_requests_by_task ON pull_requests (run, task);
