-- Migration 5: which command started a run.
-- Applied once, in one transaction with `PRAGMA user_version = 5`. Never edit once shipped.

-- 'apply' for a run that lands what passes (`mvk apply`, the MCP `apply` tool); 'attempt' for
-- one attempt of one task that lands nothing (`mvk attempt`, the MCP `run_attempt` tool).
-- `mvk resume` continues only 'apply' runs: continuing an interrupted attempt as a run would
-- land work nobody asked to land.
ALTER TABLE runs ADD COLUMN command TEXT NOT NULL DEFAULT 'apply'
    CHECK (command IN ('apply', 'attempt'));

-- Runs recorded before this migration: an attempt said so in its `run.started` event.
UPDATE runs SET command = 'attempt'
 WHERE id IN (SELECT run FROM events
               WHERE event = 'run.started'
                 AND json_extract(detail_json, '$.attempt_only') = 1);
