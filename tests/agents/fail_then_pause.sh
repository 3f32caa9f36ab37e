#!/bin/sh
# Call 1: a harmless change that leaves the test failing. Call 2 (until $1/go exists): records
# its process group in $1/agent.pgid, says it started ($1/started) and hangs. Later calls fix
# the bug. Counts its calls in $1/calls.
set -eu
echo call >> "$1/calls"
n=$(wc -l < "$1/calls")
if [ "$n" -eq 1 ]; then
    printf '%s\n' '# calc: tiny arithmetic helpers (reviewed)' 'add() { echo $(($1 - $2)); }' > src/calc.sh
    exit 0
fi
if [ ! -f "$1/go" ]; then
    cut -d' ' -f5 /proc/$$/stat > "$1/agent.pgid"
    touch "$1/started"
    sleep 300 &
    wait
fi
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
