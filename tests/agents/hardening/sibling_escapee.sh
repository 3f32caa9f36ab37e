#!/bin/sh
# Two tasks side by side. The first ($2 = leave) leaves a process outside its process group
# (`setsid`, double-forked: mvk adopts it at once), its own MVK_TASK inherited, and outlasts the
# other task's agent and that task's sweep (its `agent.finished` event is written after it), so
# that the escapee is the first task's to end, not the other's. The other ($2 = other) waits
# until the escapee is there. Each writes out/$MVK_TASK.txt.
STATE=$1
events="$3/.mvk/runs/$MVK_RUN/events.jsonl"
if [ "$2" = leave ]; then
    # Double-forked: its parent exits at once, so mvk adopts it while this agent still runs.
    (
        setsid sleep 30 </dev/null >/dev/null 2>&1 &
        echo $! > "$STATE/escapee.pid"
    )
    touch "$STATE/left"
    i=0
    while ! grep '"agent.finished"' "$events" 2>/dev/null | grep -q '"task":"other"' &&
        [ $i -lt 600 ]; do
        sleep 0.05
        i=$((i + 1))
    done
else
    i=0
    while [ ! -e "$STATE/left" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
fi
mkdir -p out
echo done > "out/$MVK_TASK.txt"
