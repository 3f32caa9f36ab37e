#!/bin/sh
# Fixes the bug, then replaces one of its worktree's git links (or its HEAD) with something mvk
# must not read the usual way: $3 is `zero` (`.git` a symlink to /dev/zero: endless), `fifo`
# (`.git` a FIFO: opening it blocks), `sparse` (`gitdir` a sparse file of 8 GiB) or `head` (its
# HEAD a sparse file of 16 GiB, which libgit2 reads whole) or `locked` (a FIFO as the
# registration's `locked`, which libgit2 opens whenever it looks the worktree up).
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
admin=$(git rev-parse --git-dir)
case $3 in
zero) rm .git && ln -s /dev/zero .git ;;
fifo) rm .git && mkfifo .git ;;
sparse) truncate -s 8G "$admin/gitdir" ;;
head) truncate -s 16G "$admin/HEAD" ;;
locked) mkfifo "$admin/locked" ;;
esac
