#!/bin/sh
# Fixes the bug, then adds notes.txt to its index under the id its bytes hash to, without ever
# writing that blob (`hash-object` without -w, `update-index --cacheinfo`): git and libgit2 see
# the file as unchanged, so only a check of the objects the captured tree names can tell.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
echo "a note whose blob is nowhere" > notes.txt
oid=$(git hash-object notes.txt)
git update-index --add --cacheinfo "100644,$oid,notes.txt"
