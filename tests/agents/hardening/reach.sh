#!/bin/sh
# Tries to reach past its worktree: writes into the main checkout ($2), the state directory ($1)
# and the worktree pool, a signal to mvk, the network; prints what each did ("NAME: allowed" or
# "NAME: denied") and the names of its environment; then fixes the bug and commits it.
STATE=$1
REPO=$2
try() {
    if sh -c "$2" >/dev/null 2>&1; then echo "$1: allowed"; else echo "$1: denied"; fi
}
try main-checkout "echo pwned >> '$REPO/src/calc.sh'"
try main-git "echo pwned > '$REPO/.git/refs/heads/main'"
try state "echo x > '$STATE/escaped'"
try pool "touch \"\$(dirname \"\$MVK_WORKTREE\")/intruder\""
try tmpdir 'echo x > "$TMPDIR/scratch"'
# mvk: the first ancestor, read in /proc (the host's, where pids are the host's), that is mvk
# and not its sandbox's trampoline or init. In the sandbox's PID namespace that pid names no
# process; `$PPID` is the namespace's init.
mvk=$(cut -d' ' -f4 /proc/self/stat)
while [ "$mvk" -gt 1 ] && ! { [ "$(cat "/proc/$mvk/comm")" = mvk ] &&
    ! tr '\0' ' ' < "/proc/$mvk/cmdline" | grep -q __sandbox; }; do
    mvk=$(cut -d' ' -f4 "/proc/$mvk/stat")
done
if [ "$mvk" -le 1 ]; then
    echo "signal-mvk: mvk not found"
else
try signal-mvk "kill -TERM $mvk"
try signal-mvk-group "kill -TERM -\$(cut -d' ' -f5 /proc/$mvk/stat)"
fi
echo "interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
echo "env: $(env | cut -d= -f1 | sort | tr '\n' ' ')"
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
try commit "git add -A && git commit -qm fix"
