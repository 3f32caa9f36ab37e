#!/bin/sh
# Fixes the bug only when its prompt shows the line the failure names, as an excerpt of the file
# as the failing attempt left it (`>5 | add() …`, with the code in it), not just the file's name;
# otherwise it adds three comment lines above the code (so that the failing line moves from 2 to
# 5, as a real maker's edit moves lines) and leaves the bug. It never reads the file itself.
# $1: a directory where it keeps a copy of each prompt (`prompt-N.md`).
set -eu
cp "$MVK_PROMPT_FILE" "$1/prompt-$MVK_ATTEMPT.md"
if grep -qF '>5 | add() { echo $(($1 - $2)); }' "$MVK_PROMPT_FILE"; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
else
    printf '%s\n' '# calc: tiny arithmetic helpers' '# (looked at)' '# (twice)' '# (thrice)' 'add() { echo $(($1 - $2)); }' > src/calc.sh
fi
