#!/bin/sh
# Attacks the repository's shared git directory ($2/.git) from a sandboxed attempt: deletes,
# rewrites and plants objects the history needs, rewrites the first attempt's branch and its
# reflog; prints "NAME: allowed" or "NAME: denied" for each. Then it commits in its worktree
# (attempt 1 a change that fails the test, later attempts the fix).
REPO=$2
GIT_DIR_MAIN="$REPO/.git"
try() {
    if sh -c "$2" >/dev/null 2>&1; then echo "$1: allowed"; else echo "$1: denied"; fi
}
blob=$(git -C "$REPO" rev-parse main:src/calc.sh)
object="$GIT_DIR_MAIN/objects/$(echo "$blob" | cut -c1-2)/$(echo "$blob" | cut -c3-)"
# A packed blob would make "delete" and "rewrite" fail for want of a file, not for the sandbox.
if [ ! -f "$object" ]; then
    echo "no loose object $object: the attack would prove nothing" >&2
    exit 3
fi
try delete-object "rm -f '$object' && [ ! -e '$object' ]"
try rewrite-object "chmod u+w '$object' && printf x > '$object'"
try plant-object "mkdir -p '$GIT_DIR_MAIN/objects/ee' && echo x > '$GIT_DIR_MAIN/objects/ee/planted'"
first="refs/heads/mvk/$MVK_RUN/t/1"
if [ "$MVK_ATTEMPT" -gt 1 ]; then
    try earlier-ref "git update-ref '$first' '$(git rev-parse HEAD)'"
    try earlier-ref-file "echo $(git rev-parse HEAD) > '$GIT_DIR_MAIN/$first'"
    try earlier-reflog "echo x >> '$GIT_DIR_MAIN/logs/$first'"
    try delete-earlier-ref "rm -f '$GIT_DIR_MAIN/$first' && [ ! -e '$GIT_DIR_MAIN/$first' ]"
    printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
else
    echo "a note" > NOTES.md
fi
try commit "git add -A && git commit -qm 'attempt $MVK_ATTEMPT: my own commit'"
