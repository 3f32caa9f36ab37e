#!/bin/sh
# Fixes the bug, then leaves a process behind that joins the process group of mvk's parent (the
# shell or CI runner that started mvk: the same session), hoping that mvk's sweep of escaped
# processes kills that whole group. It writes $1/joined once it has joined.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
python3 - "$PPID" "$1" <<'PY' >/dev/null 2>&1
import os, sys, time
mvk, state = int(sys.argv[1]), sys.argv[2]
with open("/proc/%d/stat" % mvk) as f:
    parent = int(f.read().rsplit(")", 1)[1].split()[1])
group = os.getpgid(parent)
if os.fork():
    os._exit(0)
try:
    os.setpgid(0, group)
    open(state + "/joined", "w").close()
except OSError as e:
    open(state + "/refused", "w").write(str(e))
time.sleep(5)
PY
while [ ! -e "$1/joined" ] && [ ! -e "$1/refused" ]; do sleep 0.05; done
