#!/bin/sh
# Fixes the bug only when its prompt shows the line the failure names, as an excerpt of the file
# (`>2 | add() …`, with the code in it), not just the file's name; otherwise it makes a
# harmless change that leaves the test failing. It never reads the file itself. $1: a directory
# where it keeps a copy of each prompt (`prompt-N.md`).
set -eu
cp "$MVK_PROMPT_FILE" "$1/prompt-$MVK_ATTEMPT.md"
if grep -qF '>2 | add() { echo $(($1 - $2)); }' "$MVK_PROMPT_FILE"; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
else
    printf '%s\n' '# calc: tiny arithmetic helpers (looked at)' 'add() { echo $(($1 - $2)); }' > src/calc.sh
fi
