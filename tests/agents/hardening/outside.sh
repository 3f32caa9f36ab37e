#!/bin/sh
# Fixes the bug, and also writes past its worktree: the main checkout's sealed test ($2) made to
# always pass, and a file in the worktree pool beside its own slot.
REPO=$2
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
printf '%s\n' '#!/bin/sh' 'exit 0' > "$REPO/tests/test_calc.sh"
echo intruder > "$(dirname "$MVK_WORKTREE")/intruder"
