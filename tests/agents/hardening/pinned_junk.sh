#!/bin/sh
# Leaves a file in its worktree that mvk cannot delete (immutable, `chattr +i`; as a user that
# is not root, a directory without permissions does the same), so that the slot can be neither
# reset nor removed. Fixes the bug only on its second attempt.
mkdir -p junk/locked
echo pinned > junk/locked/f
chattr +i junk/locked/f 2>/dev/null || chmod 000 junk/locked
if [ "$MVK_ATTEMPT" = 2 ]; then
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
fi
exit 0
