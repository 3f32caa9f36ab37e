#!/bin/sh
# Says what it is doing on stdout, says it started ($1/agent-started), waits until $1/go exists
# (a minute at most), then fixes the bug as fix.sh does: a long step a test can watch.
set -eu
echo "reading src/calc.sh: add() subtracts"
touch "$1/agent-started"
i=0
while [ ! -f "$1/go" ] && [ "$i" -lt 600 ]; do
    sleep 0.1
    i=$((i + 1))
done
exec sh "$(dirname "$0")/fix.sh"
