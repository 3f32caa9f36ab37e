#!/bin/sh
# A flow task's agent that edits a file other than its own: logs its start and end (epoch ms)
# to LOG, waits WAIT (seconds, or `file:PATH` to wait until PATH exists), then appends a line
# naming its task to FILE — or, with FILE `item`, to the file its task was fanned out over
# (`NAME[ITEM]`).
log="$1"; wait="$2"; file="$3"
now() { date +%s%3N; }
echo "start $MVK_TASK $(now)" >> "$log"
case "$wait" in
    file:*) while [ ! -e "${wait#file:}" ]; do sleep 0.05; done ;;
    *) sleep "$wait" ;;
esac
if [ "$file" = item ]; then
    file=$(printf '%s' "$MVK_TASK" | sed 's/^[^[]*\[\(.*\)\]$/\1/')
fi
mkdir -p "$(dirname "$file")"
echo "$MVK_TASK" >> "$file"
echo "end $MVK_TASK $(now)" >> "$log"
