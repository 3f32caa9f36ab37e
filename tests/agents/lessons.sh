#!/bin/sh
# Leaves two lessons (two paragraphs) in $MVK_LESSONS_FILE, then fixes the bug in src/calc.sh at
# once and leaves the change uncommitted.
set -eu
printf 'Lesson one: the tests need bash.\n\nLesson two: run make first.\n' >> "$MVK_LESSONS_FILE"
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
