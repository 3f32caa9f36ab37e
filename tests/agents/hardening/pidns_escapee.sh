#!/bin/sh
# Two sandboxed tasks side by side. The attacker ($2 = attack) leaves a process in a session of
# its own whose MVK_TASK names the honest task ($3), which is still going, hoping its own task's
# sweep spares it as the honest task's escapee; the process writes its pid as /proc shows it
# (the host's pids) to $1/escapee.pid. The honest agent ($2 = honest) stays until the attacker's
# gate `gone`, which checks the escapee, has finished (its `gate.finished` event in the run's
# events, under the repository $3): the honest task is going all along, and no sweep of its own
# (it would not spare an escapee naming it) can end the escapee first. Each writes
# out/$MVK_TASK.txt.
STATE=$1
if [ "$2" = attack ]; then
    MVK_TASK="$3" setsid sh -c 'cut -d" " -f4 /proc/self/stat > "$1/escapee.pid.tmp" &&
        mv "$1/escapee.pid.tmp" "$1/escapee.pid"; exec sleep 1000' escapee "$STATE" \
        </dev/null >/dev/null 2>&1 &
    while [ ! -s "$STATE/escapee.pid" ]; do sleep 0.05; done
else
    events="$3/.mvk/runs/$MVK_RUN/events.jsonl"
    i=0
    while ! grep '"gate.finished"' "$events" 2>/dev/null | grep '"task":"a"' |
        grep -q '"gate":"gone"' &&
        [ $i -lt 600 ]; do
        sleep 0.05
        i=$((i + 1))
    done
fi
mkdir -p out
echo done > "out/$MVK_TASK.txt"
