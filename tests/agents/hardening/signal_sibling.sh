#!/bin/sh
# Two tasks side by side. The attacker ($2 = attack) waits until the honest task's agent runs,
# then has a process outside its own group (`setsid`, orphaned: mvk adopts it) send SIGTERM to
# mvk's process group, so mvk cannot place the sender; the honest one ($2 = honest) waits until
# that signal was sent. Each then writes out/$MVK_TASK.txt.
STATE=$1
wait_for() {
    i=0
    while [ ! -e "$1" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
}
if [ "$2" = attack ]; then
    wait_for "$STATE/honest-running"
    group=$(cut -d' ' -f5 /proc/$PPID/stat)
    setsid sh -c "sh -c 'sleep 0.3; kill -TERM -$group; touch \"$STATE/sent\"; sleep 2' &"
    wait_for "$STATE/sent"
else
    touch "$STATE/honest-running"
    wait_for "$STATE/sent"
fi
mkdir -p out
echo done > "out/$MVK_TASK.txt"
