#!/bin/sh
# Two tasks side by side, unsandboxed; $1 is the state directory, $2 the part played.
# hold (the honest task's gate): writes its process group to $1/gate.pgid, then runs until
#   $1/done exists (30 s at most).
# honest (the honest task's agent): writes out/$MVK_TASK.txt.
# attack (the attacker's agent): once that gate runs, leaves a process behind (a double fork,
#   still in mvk's session) that joins the gate's process group, hoping its own task's sweeps
#   spare it as a part of that gate; its pid goes to $1/escapee.pid. Then writes out/$MVK_TASK.txt.
# gone (the attacker's gate, after its capture): passes when that process is dead, and lets the
#   honest gate end.
STATE=$1
case $2 in
hold)
    cut -d" " -f5 /proc/self/stat > "$STATE/gate.pgid.tmp" && mv "$STATE/gate.pgid.tmp" "$STATE/gate.pgid"
    i=0
    while [ ! -e "$STATE/done" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    ;;
attack)
    i=0
    while [ ! -s "$STATE/gate.pgid" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    python3 - "$STATE" <<'PY' >/dev/null 2>&1
import os, sys
state = sys.argv[1]
group = int(open(state + "/gate.pgid").read())
if os.fork():
    os._exit(0)
os.setpgid(0, group)
with open(state + "/escapee.pid.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(state + "/escapee.pid.tmp", state + "/escapee.pid")
os.execvp("sleep", ["sleep", "1000"])
PY
    while [ ! -s "$STATE/escapee.pid" ]; do sleep 0.05; done
    mkdir -p out && echo done > "out/$MVK_TASK.txt"
    ;;
honest)
    mkdir -p out && echo done > "out/$MVK_TASK.txt"
    ;;
gone)
    pid=$(cat "$STATE/escapee.pid" 2>/dev/null)
    touch "$STATE/done"
    [ -n "$pid" ] && ! test -d /proc/"$pid"
    ;;
esac
