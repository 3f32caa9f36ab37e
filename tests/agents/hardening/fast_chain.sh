#!/bin/sh
# Fixes the bug, then leaves a chain of processes behind, each in a session of its own, that
# starts the next and exits at once, so that a scan of mvk's children keeps finding a new one.
# Each generation appends to $1/chain; the chain ends once $1/stop exists.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
cat > "$1/link.sh" <<'SH'
[ -e "$1/stop" ] && exit 0
echo x >> "$1/chain"
setsid sh "$0" "$1" </dev/null >/dev/null 2>&1 &
SH
setsid sh "$1/link.sh" "$1" </dev/null >/dev/null 2>&1 &
while [ ! -s "$1/chain" ]; do sleep 0.05; done
