#!/bin/sh
# A flow task's agent: logs its start and end (epoch ms) to LOG, works SLEEP seconds (or, with
# `file:PATH`, until PATH exists), then
# writes out/$MVK_TASK.txt, but only when every file named after SLEEP is in its worktree
# (what the tasks it starts after landed).
log="$1"; sleep_s="$2"; shift 2
now() { date +%s%3N; }
echo "start $MVK_TASK $(now)" >> "$log"
case "$sleep_s" in
    file:*) while [ ! -e "${sleep_s#file:}" ]; do sleep 0.05; done ;;
    *) sleep "$sleep_s" ;;
esac
for need in "$@"; do
    if [ ! -f "$need" ]; then
        echo "end $MVK_TASK $(now)" >> "$log"
        echo "missing $need" >&2
        exit 0
    fi
done
mkdir -p out
echo "$MVK_TASK" > "out/$MVK_TASK.txt"
echo "end $MVK_TASK $(now)" >> "$log"
