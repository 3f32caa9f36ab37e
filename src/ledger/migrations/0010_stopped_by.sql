-- Migration 10: who stopped a run's process. Applied once, in one transaction with
-- `PRAGMA user_version = 10`. Never edit once shipped.

-- A stop signal from outside the run (a person's Ctrl-C, a `kill`, a CI cancel, a closed
-- terminal) ends mvk's process but leaves the run for `mvk resume`: its state stays 'running'.
-- `stopped_by` says which signal it was (`SIGINT (Ctrl-C)`, …), set when the stop arrives, so
-- that `mvk status` names a person's stop rather than diagnosing a silent death; a resume
-- clears it. NULL for runs no signal stopped, and for runs before this migration.
ALTER TABLE runs ADD COLUMN stopped_by TEXT;
