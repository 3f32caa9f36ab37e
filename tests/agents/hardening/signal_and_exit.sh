#!/bin/sh
# Fixes the bug; on its first call it then has a short-lived child send SIGTERM to mvk's process
# group (found from its parent) and exits at once, so that the sender is gone when mvk looks.
STATE=$1
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
if [ ! -e "$STATE/signalled" ]; then
    touch "$STATE/signalled"
    sh -c "kill -TERM -$(cut -d' ' -f5 /proc/$PPID/stat)"
fi
