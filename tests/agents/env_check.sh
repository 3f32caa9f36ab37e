#!/bin/sh
# Records whether it sees MY_API_TOKEN (in $1/agent_token, outside the worktree), then fixes the bug.
set -eu
echo "${MY_API_TOKEN:-unset}" > "$1/agent_token"
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
