#!/bin/sh
# Runs the checks its prompt names before it stops, as a careful engineer would: it tries a
# wrong fix first, runs the `tests` check's command line from its prompt, and tries the right
# fix when that fails. Without the command in its prompt it stops at the wrong fix. $1: a
# directory where it writes what it ran (`ran`) and each command's exit code (`ran-codes`).
set -eu
state=$1
line=$(grep -m1 '^- `tests`: ' "$MVK_PROMPT_FILE" || true)
cmd=${line#- \`tests\`: }
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 * $2)); }' > src/calc.sh
[ -n "$line" ] || exit 0
echo "$cmd" > "$state/ran"
if sh -c "$cmd" > /dev/null 2>&1; then code=0; else code=$?; fi
echo "$code" >> "$state/ran-codes"
if [ "$code" -ne 0 ]; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
    if sh -c "$cmd" > /dev/null 2>&1; then code=0; else code=$?; fi
    echo "$code" >> "$state/ran-codes"
fi
