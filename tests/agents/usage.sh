#!/bin/sh
# Reports 1200 tokens and $0.60 per run, and changes the code without fixing the bug.
set -eu
echo 'MVK_USAGE={"input_tokens":600,"output_tokens":600,"usd":0.6}'
printf '%s\n' '# calc: tiny arithmetic helpers (touched)' 'add() { echo $(($1 - $2)); }' > src/calc.sh
