#!/bin/sh
# An agent whose worker dies under it: it writes the fix, reports $0.10 and 1000 tokens more
# three times, 0.5 s apart (each line cumulative), then waits without end.
set -eu
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
for n in 1 2 3; do
    echo "MVK_USAGE={\"input_tokens\":$((n * 600)),\"output_tokens\":$((n * 400)),\"usd\":0.$n}"
    sleep 0.5
done
while :; do sleep 1; done
