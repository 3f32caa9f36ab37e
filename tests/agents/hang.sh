#!/bin/sh
# Never finishes: records its own pid and its child's in $1 (outside the worktree), then waits.
set -eu
echo $$ > "$1/agent.pid"
sleep 300 &
echo $! > "$1/child.pid"
wait
