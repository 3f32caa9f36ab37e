#!/bin/sh
# Fixes the bug only when its prompt quotes the first attempt's failing test; otherwise it
# makes a harmless change that leaves the test failing.
set -eu
if grep -q 'FAIL: add 2 3: expected 5, got -1' "$MVK_PROMPT_FILE"; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
else
    printf '%s\n' '# calc: tiny arithmetic helpers (reviewed)' 'add() { echo $(($1 - $2)); }' > src/calc.sh
fi
