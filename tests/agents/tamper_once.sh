#!/bin/sh
# Edits the sealed test on its first attempt (the seal rejects it), fixes the bug on the next.
set -eu
if [ "$MVK_ATTEMPT" -eq 1 ]; then
    printf '%s\n' '#!/bin/sh' 'exit 0' > tests/test_calc.sh
else
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
fi
