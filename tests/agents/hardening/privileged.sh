#!/bin/sh
# Fixes the bug, then tries what only privileges allow, and says what worked: a device node in
# its worktree (through one of the disk, Landlock lets it write anywhere), an immutable file (one
# mvk can then never delete), and which capabilities it holds.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
if mknod ./null-device c 1 3 2>/dev/null; then echo "mknod: allowed"; rm -f ./null-device; else echo "mknod: denied"; fi
touch "$TMPDIR/pinned"
if chattr +i "$TMPDIR/pinned" 2>/dev/null; then echo "chattr: allowed"; chattr -i "$TMPDIR/pinned"; else echo "chattr: denied"; fi
echo "capabilities: $(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)"
