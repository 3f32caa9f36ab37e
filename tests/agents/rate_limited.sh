#!/bin/sh
# Hits a rate limit on its first run (state in $1, outside the worktree), then fixes the bug.
# Every run appends its MVK_ATTEMPT to $1/attempts.
set -eu
echo "$MVK_ATTEMPT" >> "$1/attempts"
if [ ! -e "$1/limited" ]; then
    : > "$1/limited"
    echo "RATE LIMITED, retry after 1 seconds"
    exit 1
fi
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
