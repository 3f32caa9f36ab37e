#!/bin/sh
# The crash campaign's agent (tests/integration/crash_campaign.rs): works SECS seconds, then
# appends a line naming its task to out/$MVK_TASK.txt, or, with `item`, to the file its task was
# fanned out over (`NAME[ITEM]`). It appends rather than writes, so that an attempt made on a
# worktree an earlier one left dirty shows as a doubled line. With `fail-first`, attempt 1
# appends `draft` instead, which the task's gate refuses, and the next attempt passes.
set -eu
secs="$1"; mode="${2:-}"
sleep "$secs"
case "$mode" in
    item) file=$(printf '%s' "$MVK_TASK" | sed 's/^[^[]*\[\(.*\)\]$/\1/') ;;
    *) file="out/$MVK_TASK.txt" ;;
esac
line="$MVK_TASK"
if [ "$mode" = fail-first ] && [ "$MVK_ATTEMPT" = 1 ]; then
    line=draft
fi
mkdir -p "$(dirname "$file")"
echo "$line" >> "$file"
