#!/bin/sh
# Fixes the bug only when its prompt carries a person's advice to use `+`; otherwise it
# changes nothing (and the sealed test keeps failing).
set -eu
if grep -q 'use + in add' "$MVK_PROMPT_FILE"; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
fi
