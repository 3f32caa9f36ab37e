#!/bin/sh
# An agent that spends as it works, as one looping on tool calls does: it writes its change
# (`fix`: the fix; `out`: out/$MVK_TASK.txt, a flow task's), then reports its usage every
# 0.2 s, each line cumulative and $0.10 and 1000 tokens more than the last. Args: the change,
# and how many reports it makes before it exits on its own (none, or empty: it never does).
# With SPENDERS_DIR and SPENDERS set, it first waits until that many agents have started
# (a file each in the directory), so that a flow's agents all spend side by side.
set -eu
if [ -n "${SPENDERS_DIR:-}" ]; then
    touch "$SPENDERS_DIR/$MVK_TASK"
    while [ "$(ls "$SPENDERS_DIR" | wc -l)" -lt "$SPENDERS" ]; do sleep 0.05; done
fi
if [ "$1" = fix ]; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
else
    mkdir -p out
    echo "$MVK_TASK" > "out/$MVK_TASK.txt"
fi
n=1
while [ -z "${2:-}" ] || [ "$n" -le "$2" ]; do
    echo "MVK_USAGE={\"input_tokens\":$((n * 600)),\"output_tokens\":$((n * 400)),\"usd\":$((n / 10)).$((n % 10))}"
    n=$((n + 1))
    sleep 0.2
done
