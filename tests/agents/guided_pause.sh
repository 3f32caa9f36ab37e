#!/bin/sh
# guided.sh that, once told the advice, first says so ($1/started) and hangs until $1/go
# exists, so a test can kill mvk while the attempt a person's rejection bought runs.
set -eu
if grep -q 'use + in add' "$MVK_PROMPT_FILE"; then
    if [ ! -f "$1/go" ]; then
        touch "$1/started"
        while [ ! -f "$1/go" ]; do sleep 0.05; done
    fi
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
fi
