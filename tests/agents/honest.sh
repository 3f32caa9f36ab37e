#!/bin/sh
# Fixes the bug only when its prompt quotes the first attempt's failing test; otherwise it
# makes a harmless change that leaves the test failing. Given a directory ($1), it keeps a copy
# of each prompt there (`prompt-N.md`, N the attempt) for the test to read.
set -eu
if [ -n "${1:-}" ] && [ -d "$1" ]; then
    cp "$MVK_PROMPT_FILE" "$1/prompt-$MVK_ATTEMPT.md"
fi
if grep -q 'FAIL: add 2 3: expected 5, got -1' "$MVK_PROMPT_FILE"; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
else
    printf '%s\n' '# calc: tiny arithmetic helpers (reviewed)' 'add() { echo $(($1 - $2)); }' > src/calc.sh
fi
