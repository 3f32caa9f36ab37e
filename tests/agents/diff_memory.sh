#!/bin/sh
# Can finish only by seeing what its previous attempt changed. The first attempt fixes the bug
# and writes a fresh random token to src/token.txt, but not src/confirm.txt, which the gate
# wants equal to it. A later attempt (a clean checkout from the base: the token is gone) writes
# both files only if its prompt shows the token as the previous diff's added line; it keeps no
# state of its own. $1: a directory where it keeps a copy of each prompt.
set -eu
cp "$MVK_PROMPT_FILE" "$1/prompt-$MVK_ATTEMPT.md"
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
if [ "$MVK_ATTEMPT" -eq 1 ]; then
    echo "token-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" > src/token.txt
    exit 0
fi
token=$(sed -n 's/^+\(token-[0-9a-f]*\)$/\1/p' "$MVK_PROMPT_FILE" | head -n 1)
if [ -n "$token" ]; then
    echo "$token" > src/token.txt
    echo "$token" > src/confirm.txt
fi
