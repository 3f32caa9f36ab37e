#!/bin/sh
# Fixes the bug and commits the fix itself, so merge strategies can be told apart by history.
set -eu
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add src/calc.sh
git commit -q -m "agent: fix add"
