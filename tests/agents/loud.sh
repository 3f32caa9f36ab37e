#!/bin/sh
# Prints $1 MiB of 1 KiB lines on stdout, then fixes the bug.
set -eu
line=$(printf '%01023d' 0)
yes "$line" | head -c $(($1 * 1024 * 1024))
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
