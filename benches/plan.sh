#!/usr/bin/env bash
# Benchmark (issue 27): `mvk plan --json`, `mvk plan` and `mvk check` of a flow fanned out with
# `each=` over 1,000, 10,000 and 100,000 files of a git repository (each task scoped to its file
# with `scope "{{item}}"`, all after one task), and of an inline flow of 1,000 tasks (larger inline
# flows are benches/compile.sh's). Not run by CI.
# Usage: benches/plan.sh [SIZES...]   (builds the release binary first; MVK_BIN=PATH uses that one)
#        RUNS=9 benches/plan.sh 1000 10000
#
# Figures: wall time and peak RSS (/usr/bin/time '%e %M'), the median of RUNS runs (default 5;
# 3 at 100,000 tasks, where one run takes seconds), each beside baselines measured in the same
# run, so that a busy shared machine shows in both: hashing the loop file (b3sum, else
# sha256sum) and listing the repository (`git ls-files | wc -l`). Then each command's growth
# from 1,000 to 10,000 tasks (time and memory ratios).
# Goals (exit 1 when one is missed): at 10,000 tasks every command within 0.3 s and 100 MiB, and
# at most 11 times what it took at 1,000 tasks (linear); at 100,000 tasks every command completes.
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
hasher=$(command -v b3sum || command -v sha256sum)
RUNS=${RUNS:-5}
work=$(mktemp -d "${TMPDIR:-/tmp}/mvk-bench-plan.XXXXXX")
[ -n "${KEEP:-}" ] && echo "keeping $work" >&2 || trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 NO_COLOR=1
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 10000 100000)

fanout_repo() { # $1: a git repository holding $2 item files and loops/flow.kdl fanned out over them
    local repo=$1 n=$2
    mkdir -p "$repo/items" "$repo/loops"
    git -C "$repo" init -q -b main
    awk -v root="$repo" -v n="$n" 'BEGIN { for (i = 0; i < n; i++) { f = sprintf("%s/items/i%06d.txt", root, i); print "item " i > f; close(f) } }'
    cat >"$repo/loops/flow.kdl" <<'EOF'
agent bot timeout="10m" {
    run "sh" "agent.sh" "{{prompt_file}}"
}

flow big {
    parallel 16
    task setup {
        goal "Prepare the items."
        agent bot
        scope "loops"
        gate unit timeout="1m" { run "true"; }
    }
    task t each="items/*.txt" {
        after "setup"
        goal "Mark {{item}} done."
        agent bot
        scope "{{item}}"
        gate done evidence=none timeout="1m" {
            run "sh" "-c" "grep -q done '{{item}}'"
        }
        budget iterations=2
    }
}
EOF
    git -C "$repo" add -A
    git -C "$repo" -c user.name=bench -c user.email=bench@example.com commit -q -m init
}

inline_flow() { # $1 inline tasks in file $2; task i waits for task i/2 (a wide, deep DAG)
    local n=$1 f=$2
    {
        echo 'agent bot timeout="5m" { run "sh" "agent.sh" "{{prompt_file}}"; }'
        echo 'gate unit { param target default=""; run "cargo" "test" "{{target}}"; }'
        echo 'flow big {'
        echo '  parallel 16'
        for ((i = 0; i < n; i++)); do
            if ((i == 0)); then after=""; else after="after t$((i / 2)); "; fi
            echo "  task t$i { ${after}goal \"task $i\"; agent bot; gate g use=unit target=\"--test=t$i\"; budget iterations=2; }"
        done
        echo '}'
    } >"$f"
}

measure() { # "seconds peak_kib" of one run of a command, run in $dir
    # Wall time from bash's microsecond clock: /usr/bin/time counts hundredths of a second, too
    # coarse for the 20 ms a 1,000-task plan takes (the growth ratio divides by it).
    local start end
    start=$EPOCHREALTIME
    (cd "$dir" && /usr/bin/time -o "$work/time" -f '%M' "$@" >/dev/null 2>"$work/err") || {
        echo "failed in $dir: $* ($(tail -3 "$work/err"))" >&2
        return 1
    }
    end=$EPOCHREALTIME
    echo "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", b - a }') $(tail -1 "$work/time")"
}

median() { # the median of the numbers on standard input
    sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

runs_for() { if [ "$1" -ge 100000 ]; then echo $((RUNS < 3 ? RUNS : 3)); else echo "$RUNS"; fi; }

# median_of N CMD...: "median_seconds median_kib" of N runs, or "failed"
median_of() {
    local n=$1 i out
    shift
    : >"$work/runs"
    for ((i = 0; i < n; i++)); do
        out=$(measure "$@") || { echo failed; return; }
        echo "$out" >>"$work/runs"
    done
    echo "$(cut -d' ' -f1 "$work/runs" | median) $(cut -d' ' -f2 "$work/runs" | median)"
}

commands=("plan --json" "plan" "check")
declare -A secs kib
fail=0
printf '%-8s %-7s %-12s %5s %8s %9s %9s %9s\n' tasks flow command runs time_s rss_mib hash_s ls_s
row() { # size flow command runs result hash_s ls_s
    local t k
    read -r t k <<<"$5"
    if [ "$t" = failed ]; then
        printf '%-8s %-7s %-12s %5s %8s\n' "$1" "$2" "$3" "$4" FAILED
        return
    fi
    printf '%-8s %-7s %-12s %5s %8.3f %9.1f %9s %9s\n' "$1" "$2" "$3" "$4" "$t" \
        "$(awk -v k="$k" 'BEGIN { print k / 1024 }')" "$6" "$7"
}
for n in "${sizes[@]}"; do
    dir=$work/repo-$n
    fanout_repo "$dir" "$n"
    runs=$(runs_for "$n")
    hash_s=$(median_of "$runs" "$hasher" loops/flow.kdl | cut -d' ' -f1)
    ls_s=$(median_of "$runs" sh -c 'git ls-files | wc -l' | cut -d' ' -f1)
    for c in "${commands[@]}"; do
        # shellcheck disable=SC2086 # the command's words
        result=$(median_of "$runs" "$mvk" $c loops/flow.kdl)
        read -r secs["$n $c"] kib["$n $c"] <<<"$result"
        row "$n" each "$c" "$runs" "$result" "$hash_s" "$ls_s"
        if [ "$result" = failed ]; then
            echo "goal missed: \`mvk $c\` of $n tasks did not complete" >&2
            fail=1
        fi
    done
    rm -rf "$dir"
done
# An inline flow of 1,000 tasks.
dir=$work/inline
mkdir -p "$dir"
inline_flow 1000 "$dir/flow.kdl"
hash_s=$(median_of "$RUNS" "$hasher" flow.kdl | cut -d' ' -f1)
for c in "${commands[@]}"; do
    # shellcheck disable=SC2086 # the command's words
    row 1000 inline "$c" "$RUNS" "$(median_of "$RUNS" "$mvk" $c flow.kdl)" "$hash_s" -
done

echo
for c in "${commands[@]}"; do
    small=${secs["1000 $c"]:-} large=${secs["10000 $c"]:-}
    [ -n "$large" ] && [ "$large" != failed ] || continue
    if awk -v t="$large" 'BEGIN { exit !(t > 0.3) }'; then
        echo "goal missed: \`mvk $c\` of 10,000 tasks took ${large} s (goal 0.3 s)" >&2
        fail=1
    fi
    if awk -v k="${kib["10000 $c"]}" 'BEGIN { exit !(k > 100 * 1024) }'; then
        echo "goal missed: \`mvk $c\` of 10,000 tasks peaked at ${kib["10000 $c"]} KiB (goal 100 MiB)" >&2
        fail=1
    fi
    [ -n "$small" ] && [ "$small" != failed ] || continue
    growth=$(awk -v a="$large" -v b="$small" 'BEGIN { if (b < 0.0001) b = 0.0001; printf "%.1f", a / b }')
    mem=$(awk -v a="${kib["10000 $c"]}" -v b="${kib["1000 $c"]}" 'BEGIN { printf "%.1f", a / b }')
    echo "growth 10,000/1,000 tasks, mvk $c: time ${growth}x, memory ${mem}x"
    if awk -v g="$growth" 'BEGIN { exit !(g > 11) }'; then
        echo "goal missed: \`mvk $c\` grew ${growth}x from 1,000 to 10,000 tasks (goal 11x)" >&2
        fail=1
    fi
done
exit "$fail"
