#!/bin/sh
# A flow task's agent that writes three files of 200 lines each, out/$MVK_TASK/{a,b,c}.txt, so
# that landing it writes several files into the main checkout (a landing cut short after the
# first has written some and not others).
for f in a b c; do
    mkdir -p "out/$MVK_TASK"
    seq 1 200 | sed "s/^/$MVK_TASK $f /" > "out/$MVK_TASK/$f.txt"
done
