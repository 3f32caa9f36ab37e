#!/bin/sh
# Fixes the bug at once, counting its calls in $1/$2 (default $1/calls).
set -eu
echo call >> "$1/${2:-calls}"
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
