#!/bin/sh
# A gate that, until $1/go exists, records its process group in $1/gate.pgid, says it started
# ($1/gate-started) and hangs; then it runs the project's sealed test. Counts its runs in
# $1/gate-calls.
set -eu
echo call >> "$1/gate-calls"
if [ ! -f "$1/go" ]; then
    cut -d' ' -f5 /proc/$$/stat > "$1/gate.pgid"
    touch "$1/gate-started"
    sleep 300 &
    wait
fi
exec sh tests/test_calc.sh
