#!/bin/sh
# Reports 1000 tokens and $0.25, and fixes the bug in src/calc.sh at once.
set -eu
echo 'MVK_USAGE={"input_tokens":400,"output_tokens":600,"usd":0.25}'
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
