#!/bin/sh
# Tasks one after the other. The attacker ($2 = attack) leaves a process outside its process
# group (`setsid`; orphaned, mvk adopts it) whose MVK_TASK names $3: a task that is not in the run,
# or one already over, hoping every sweep takes it for another task's escapee and spares it. Once
# the honest task's agent runs ($2 = honest), that process sends mvk SIGTERM: with that one
# attempt open, the signal would be counted against it. The honest agent waits for the signal a
# while, then does its work; any other role ($2 = first) just does its work. Each writes
# out/$MVK_TASK.txt.
STATE=$1
if [ "$2" = attack ]; then
    MVK_TASK="$3" setsid sh -c '
        touch "$1/escaped"
        i=0
        while [ ! -e "$1/honest-running" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
        [ -e "$1/honest-running" ] || exit 0
        kill -TERM "$2"
        touch "$1/sent"
        sleep 5' escapee "$STATE" "$PPID" </dev/null >/dev/null 2>&1 &
    echo $! > "$STATE/escapee.pid"
    # Out of the agent's group before the agent exits (`setsid` has run once the shell it starts
    # writes its mark): else the group kill after the agent takes it, as a straggler, first.
    i=0
    while [ ! -e "$STATE/escaped" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
elif [ "$2" = honest ]; then
    touch "$STATE/honest-running"
    i=0
    while [ ! -e "$STATE/sent" ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i + 1)); done
fi
mkdir -p out
echo done > "out/$MVK_TASK.txt"
