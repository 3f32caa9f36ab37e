#!/bin/sh
# A scripted reviewer. $1: the state directory; $2: what it answers:
#   reject-then-approve  rejects its first review; approves the second only when its prompt lists
#                        the first one's blocker to check first (it rejects again otherwise)
#   always-reject        rejects every time, a different blocker each call
#   same-reject          rejects every time with the same blocker (a reviewer and a maker who
#                        cannot agree)
#   garbage              answers in prose, with no verdict line
#   limited-then-approve hits a rate limit on its first call, then approves
#   signal-then-approve  sends SIGTERM to mvk's process group, then approves
# It fails loudly (exit 97, no verdict) when it sees the maker's marker anywhere it can look:
# its prompt, its environment, the files of its working directory, every commit its repository
# holds (all refs and the objects git can find), and the files beside its prompt.
set -eu
state=$1
mode=$2
marker='MAKER-SELF-REPORT-7f3a'
if [ "$mode" = limited-then-approve ] && [ ! -e "$state/limited" ]; then
    : > "$state/limited"
    echo "RATE LIMITED, retry after 1 seconds"
    exit 1
fi
n=$(( $(cat "$state/reviews" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$state/reviews"
cp "$MVK_PROMPT_FILE" "$state/review-prompt-$n.md"
if grep -q "$marker" "$MVK_PROMPT_FILE" || env | grep -q "$marker" \
    || grep -rq --exclude-dir=.git "$marker" . \
    || git log --all --format=%B | grep -q "$marker" \
    || git cat-file --batch-all-objects --batch 2>/dev/null | grep -aq "$marker" \
    || grep -rq "$marker" "$(dirname "$MVK_PROMPT_FILE")" \
    || grep -rq "$marker" "$(dirname "$MVK_PROMPT_FILE")/.." 2>/dev/null; then
    echo "REVIEWER SAW THE MAKER'S OUTPUT" >&2
    echo "leak" > "$state/leak"
    exit 97
fi
blocker() {
    printf '{"verdict":"reject","blockers":[{"category":"correctness","evidence":"%s","location":"src/calc.sh:2"}],"notes":["%s"]}\n' "$1" "$2"
}
echo "Reviewing the change of task $MVK_TASK, attempt $MVK_ATTEMPT."
case "$mode" in
reject-then-approve)
    if [ "$n" -eq 1 ]; then
        blocker "add() ignores negative operands (review 1)" "consider a test for negatives"
    elif grep -q 'add() ignores negative operands (review 1)' "$MVK_PROMPT_FILE"; then
        echo '{"verdict":"approve","blockers":[],"notes":["document add() in the README"]}'
    else
        blocker "the earlier blocker was not shown to me" "none"
    fi
    ;;
always-reject)
    blocker "add() is still wrong (review $n)" "note $n"
    ;;
same-reject)
    blocker "add() must not use shell arithmetic" "none"
    ;;
limited-then-approve)
    echo '{"verdict":"approve"}'
    ;;
signal-then-approve)
    kill -TERM -"$(cut -d' ' -f5 /proc/$PPID/stat)"
    echo '{"verdict":"approve"}'
    ;;
garbage)
    echo "LGTM, ship it!"
    echo '{"looks":"fine"}'
    ;;
esac
