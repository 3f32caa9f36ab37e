#!/usr/bin/env bash
# Benchmark (issue 27, goal 3): `mvk check` on generated inline flows of 1,000, 10,000 and
# 100,000 tasks (a 10,000-task flow is about 1.7 MB) and on one of 64 MiB less a few bytes, the
# largest loop file mvk reads. Not run by CI.
# Usage: benches/compile.sh     (builds the release binary first; MVK_BIN=PATH uses that one)
#        RUNS=9 benches/compile.sh
#
# Figures, each the median of RUNS runs (default 5; the 64 MiB flow RUNS_LARGE, default 1), each against a baseline measured in the
# same run: b3sum (or sha256sum) of the same file, so that a noisy shared machine shows in both.
#   check_s    `mvk check FILE` wall time, from the command to its exit
#   rss_mib    its peak memory (/usr/bin/time's %M)
#   hash_s     the baseline's wall time on the same file
# Goals (the script exits 1 when one is missed): the 10,000-task flow checks in <= 1 s; the
# 100,000-task flow in at most 11 times that (time linear in the tasks); and the 64 MiB flow
# compiles (exit 0: it is parsed in pieces, never refused as too large).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
RUNS=${RUNS:-5}
# A median of fewer runs says little on a shared machine.
[ "$RUNS" -ge 5 ] || { echo "RUNS must be at least 5" >&2; exit 2; }
hasher=$(command -v b3sum || command -v sha256sum)
work=$(mktemp -d "${TMPDIR:-/tmp}/mvk-bench-compile.XXXXXX")
[ -n "${KEEP:-}" ] && echo "keeping $work" >&2 || trap 'rm -rf "$work"' EXIT
export NO_COLOR=1

# gen N FILE [MAX_BYTES]: an inline flow of N tasks (task i after task i/2: a wide, deep DAG),
# each as a generator writes one, stopped before MAX_BYTES when given.
gen() {
    awk -v n="$1" -v max="${3:-0}" '
    BEGIN {
        head = "agent bot timeout=\"5m\" { run \"sh\" \"agent.sh\" \"{{prompt_file}}\"; }\n" \
               "gate unit { param target default=\"\"; run \"cargo\" \"test\" \"{{target}}\"; }\n" \
               "flow big {\n  parallel 16\n"
        printf "%s", head; size = length(head) + 2
        for (i = 0; i < n; i++) {
            after = i == 0 ? "" : sprintf("    after t%d\n", int(i / 2))
            task = sprintf("  task t%d {\n%s    goal \"Fix the failing tests of package t%d.\"\n    agent bot\n    scope \"pkg/t%d/**\"\n    gate g use=unit target=\"--test=t%d\"\n    budget iterations=2\n  }\n", i, after, i, i, i)
            if (max > 0 && size + length(task) > max) break
            printf "%s", task; size += length(task)
        }
        printf "}\n"
    }' >"$2"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# measure FILE [RUNS]: "check_s rss_mib hash_s", medians of RUNS runs; exits 1 if mvk check fails.
measure() {
    local f=$1 runs=${2:-$RUNS} i
    : >"$work/check" && : >"$work/rss" && : >"$work/hash"
    for ((i = 0; i < runs; i++)); do
        /usr/bin/time -f "%e %M" -o "$work/time" "$mvk" check "$f" >/dev/null 2>"$work/err" || {
            echo "mvk check $f failed:" >&2
            head -c 2000 "$work/err" >&2
            return 1
        }
        read -r s kb <"$work/time"
        echo "$s" >>"$work/check"
        awk -v k="$kb" 'BEGIN { printf "%.1f\n", k / 1024 }' >>"$work/rss"
        /usr/bin/time -f "%e" -o "$work/time" "$hasher" "$f" >/dev/null
        cat "$work/time" >>"$work/hash"
    done
    echo "$(median <"$work/check") $(median <"$work/rss") $(median <"$work/hash")"
}

missed=0
printf '%-10s %9s %9s %9s %9s\n' tasks size_mb check_s rss_mib hash_s
for n in 1000 10000 100000 max; do
    f=$work/flow-$n.kdl
    if [ "$n" = max ]; then
        gen 1000000000 "$f" $((64 * 1024 * 1024))
    else
        gen "$n" "$f"
    fi
    tasks=$(grep -c '^  task ' "$f")
    size=$(awk -v b="$(wc -c <"$f")" 'BEGIN { printf "%.1f", b / 1e6 }')
    # The 64 MiB flow (some 340,000 tasks) takes minutes: once, unless RUNS_LARGE says more.
    runs=$RUNS
    [ "$n" = max ] && runs=${RUNS_LARGE:-1}
    read -r s rss h < <(measure "$f" "$runs") || { missed=1; continue; }
    printf '%-10s %9s %9s %9s %9s\n' "$tasks" "$size" "$s" "$rss" "$h"
    if [ "$n" = 10000 ]; then
        s10k=$s
        if awk -v s="$s" 'BEGIN { exit !(s > 1.0) }'; then
            echo "goal missed: the 10,000-task flow took ${s}s to check (goal <= 1 s)" >&2
            missed=1
        fi
    fi
    if [ "$n" = 100000 ] && awk -v s="$s" -v t="${s10k:-0}" 'BEGIN { exit !(t > 0 && s > 11 * t) }'; then
        echo "goal missed: 100,000 tasks took ${s}s, more than 11 times the ${s10k}s of 10,000" >&2
        missed=1
    fi
done
exit "$missed"
