#!/bin/sh
# Counts its calls in $1/calls. Until $1/go exists it records its process group in $1/agent.pgid,
# starts a writer that leaves the worktree and keeps appending to it from outside (its pid in
# $1/writer.pid), says it started ($1/started) and hangs, so a test can kill mvk while the
# agent runs; once $1/go exists it fixes the bug.
set -eu
echo call >> "$1/calls"
if [ ! -f "$1/go" ]; then
    cut -d' ' -f5 /proc/$$/stat > "$1/agent.pgid"
    wt=$PWD
    (cd /tmp && while :; do echo junk >> "$wt/junk.txt"; sleep 0.05; done) &
    echo $! > "$1/writer.pid"
    touch "$1/started"
    sleep 300 &
    wait
fi
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
