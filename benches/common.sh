# Sourced by the bench scripts, from the project root: strict mode, the C locale, no inherited
# git location, and `mvk` set to $MVK_BIN or a freshly built release binary.
set -euo pipefail
export LC_ALL=C
if [ -n "${MVK_BIN:-}" ]; then
    mvk=$MVK_BIN
else
    cargo build --release --quiet
    mvk=${CARGO_TARGET_DIR:-$PWD/target}/release/mvk
fi
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR

# flow_repo DIR N P T [G]: a repository at DIR holding 1,000 small files (so a worktree is not
# empty), N items, and loops/flow.kdl: a flow at `parallel P` fanned out over the items, each
# task's agent working T seconds and appending `done` to its item, its gate grepping for it
# after working G seconds (default 0: a gate as cheap as can be).
flow_repo() {
    local repo=$1 N=$2 P=$3 T=$4 G=${5:-0}
    mkdir -p "$repo/items" "$repo/src" "$repo/loops" "$repo/bench"
    git -C "$repo" init -q -b main
    git -C "$repo" config user.name bench
    git -C "$repo" config user.email bench@example.com
    # Some project around the items, so a worktree is not empty: 1,000 small files.
    awk -v root="$repo" 'BEGIN { for (i = 0; i < 1000; i++) { f = sprintf("%s/src/f%04d.txt", root, i); print "file " i > f; close(f) } }'
    for i in $(seq -w 1 "$N"); do echo "item $i" >"$repo/items/i$i.txt"; done
    cat >"$repo/bench/agent.sh" <<'EOF'
# The agent: works $1 seconds, then appends to the file its task was fanned out over.
sleep "$1"
item=$(printf '%s' "$MVK_TASK" | sed 's/^[^[]*\[\(.*\)\]$/\1/')
echo done >>"$item"
EOF
    cat >"$repo/loops/flow.kdl" <<EOF
agent bench timeout="10m" {
    run "sh" "bench/agent.sh" "$T"
}

flow bench {
    parallel $P
    task t each="items/*.txt" {
        goal "Mark {{item}} done."
        agent bench
        scope "{{item}}"
        gate done evidence=none timeout="1m" {
            run "sh" "-c" "sleep $G && grep -q done '{{item}}'"
        }
        budget iterations=1
    }
}
EOF
    git -C "$repo" add -A
    git -C "$repo" commit -q -m init
}
