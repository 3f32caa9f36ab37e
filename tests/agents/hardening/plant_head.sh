#!/bin/sh
# Two tasks side by side. The attacker ($2 = attack) writes its own worktree's HEAD to name the
# branch of the honest task's second attempt before it exists (names are predictable:
# mvk/RUN/TASK/N), hoping mvk then refuses to create, check out or move that branch for its
# owner ("already checked out"), and keeps planting it until that branch holds a commit other
# than the base (the attempt was captured), or 30 s have passed. The honest one ($2 = honest) fails its first
# attempt once the HEAD is planted, and writes out/$MVK_TASK.txt in its second.
STATE=$1
wait_until() {
    i=0
    while ! eval "$1" && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
}
if [ "$2" = attack ]; then
    branch="refs/heads/mvk/$MVK_RUN/b/2"
    base=$(git rev-parse HEAD)
    head="$(git rev-parse --git-dir)/HEAD"
    echo "ref: $branch" > "$head"
    touch "$STATE/planted"
    # Planted again and again (mvk detaches it when it needs the branch): whenever mvk adds
    # the owner's worktree, a HEAD may name the branch.
    i=0
    while ! { [ "$(git rev-parse -q --verify "$branch")" != "" ] &&
        [ "$(git rev-parse -q --verify "$branch")" != "$base" ]; } && [ $i -lt 3000 ]; do
        echo "ref: $branch" > "$head"
        sleep 0.01
        i=$((i + 1))
    done
    exit 0
fi
wait_until '[ -e "$STATE/planted" ]'
if [ "$MVK_ATTEMPT" -gt 1 ]; then
    mkdir -p out
    echo done > "out/$MVK_TASK.txt"
fi
