#!/bin/sh
# Fixes the bug in src/calc.sh at once and leaves the change uncommitted.
set -eu
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
