#!/bin/sh
# Keeps a copy of each prompt ($1/prompt-K.md, K counting its calls across runs), fixes the bug,
# appends a line to the file $2 (so that every run has a change to make), and, given $3, writes
# it upper-cased as a lesson to $MVK_LESSONS_FILE (upper-cased: so that the lesson's text is in
# no file of the repository, the loop file included).
set -eu
state=$1
n=$(( $(cat "$state/calls" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$state/calls"
cp "$MVK_PROMPT_FILE" "$state/prompt-$n.md"
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
mkdir -p "$(dirname "$2")"
echo "# call $n" >> "$2"
if [ -n "${3:-}" ]; then
    printf '%s\n\n' "$(printf '%s' "$3" | tr 'a-z' 'A-Z')" >> "$MVK_LESSONS_FILE"
fi
