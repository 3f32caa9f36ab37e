#!/bin/sh
# Says it started ($1/started), waits (up to a minute) until $1/go exists, then fixes the bug:
# a run that is surely still going while a test does something to the processes around it.
set -eu
touch "$1/started"
i=0
while [ ! -f "$1/go" ]; do
    i=$((i + 1))
    [ "$i" -le 1200 ] || exit 1
    sleep 0.05
done
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
