#!/bin/sh
# A notification command: writes its arguments one a line to $1.argv, its standard input (the
# JSON body) to $1.json, and MVK_EVENT and MVK_TASK from its environment to $1.env.
set -eu
out=$1
shift
printf '%s\n' "$@" > "$out.argv"
cat > "$out.json"
printf '%s %s\n' "$MVK_EVENT" "$MVK_TASK" > "$out.env"
