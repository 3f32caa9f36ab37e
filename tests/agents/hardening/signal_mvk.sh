#!/bin/sh
# On its first call, sends SIGTERM to mvk's process group (found from its parent); then fixes the bug.
STATE=$1
if [ ! -e "$STATE/signalled" ]; then
    touch "$STATE/signalled"
    kill -TERM -"$(cut -d' ' -f5 /proc/$PPID/stat)"
    sleep 5
fi
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
