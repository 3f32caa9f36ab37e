#!/bin/sh
# Fixes the bug, then leaves a nest of 80 processes behind, each in a session of its own and
# waiting for the next: killing one hands only its child to mvk, so a sweep that gives up after
# a fixed number of rounds leaves the deepest alive. The deepest appends to $1/chain until $1/stop
# exists. The agent waits for the whole nest before it ends.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
cat > "$1/nest.sh" <<'SH'
if [ "$1" -gt 0 ]; then
    setsid sh "$0" $(($1 - 1)) "$2" </dev/null >/dev/null 2>&1 &
    wait
else
    while [ ! -e "$2/stop" ]; do echo x >> "$2/chain"; sleep 0.1; done
fi
SH
setsid sh "$1/nest.sh" 80 "$1" </dev/null >/dev/null 2>&1 &
while [ ! -s "$1/chain" ]; do sleep 0.05; done
