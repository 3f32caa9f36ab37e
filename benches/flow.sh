#!/usr/bin/env bash
# Benchmark (issues 5 and 27): a flow of N trivial tasks (default 256) at `parallel P` (default 16),
# fanned out with `each=` over N files. Every task's agent sleeps T seconds (default 2) and
# appends a line to its item; its gate sleeps G seconds (default 0) and greps for it; each lands
# on main in turn, its gate run again on the merged result (the target moved). Not run by CI.
# Every figure is the median of RUNS (default 5) runs, each on a fresh repository and pool; the
# script exits 1 when a goal is missed.
# Usage: benches/flow.sh     (builds the release binary first; MVK_BIN=PATH uses that one)
#        N=64 P=8 T=1 benches/flow.sh
#        G=1 benches/flow.sh   (gates that take a while: landing's re-gates must keep up)
#
# Figures, each against a baseline measured in the same run:
#   makespan       `mvk apply` wall time / the ideal, ceil(N/P) x (T + G) + G: what P slots
#                  would take if mvk cost nothing (each attempt's agent and gate, then the last
#                  change's gate again as it lands) (target <= 1.15)
#   peak memory    /usr/bin/time's %M for `mvk apply`: the largest peak RSS among mvk and the
#                  children it waited for (target <= 100 MiB)
#   worktree       mvk's mean time to get a task its worktree (`worktree_ms` of the
#                  `attempt.started` events) / the mean of `git worktree add` of the same
#                  commit, run N times by a bash loop on the same repository
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/common.sh
N=${N:-256}
P=${P:-16}
T=${T:-2}
G=${G:-0}
work=$(mktemp -d "${TMPDIR:-/tmp}/mvk-bench-flow.XXXXXX")
[ -n "${KEEP:-}" ] && echo "keeping $work" >&2 || trap 'rm -rf "$work"' EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 NO_COLOR=1

RUNS=${RUNS:-5}
walls=() rsss=() wts=()
for ((r = 1; r <= RUNS; r++)); do
    repo=$work/repo-$r
    flow_repo "$repo" "$N" "$P" "$T" "$G"
    echo "mvk apply ($r of $RUNS): $N tasks, parallel $P, agents of ${T}s ..." >&2
    (cd "$repo" && MVK_WORKTREE_ROOT=$work/pool-$r /usr/bin/time -f "%e %M %U %S" -o "$work/time" \
        "$mvk" --quiet apply loops/flow.kdl >"$work/apply.out" 2>"$work/apply.err") || {
        cat "$work/apply.err" >&2
        exit 1
    }
    read -r wall rss_kb cpu_user cpu_sys <"$work/time"
    echo "mvk: wall ${wall}s, cpu user ${cpu_user}s sys ${cpu_sys}s" >&2
    run=$(head -n1 "$work/apply.out")
    events=$repo/.mvk/runs/$run/events.jsonl
    landed=$(grep -c '"event":"merge.done"' "$events" || true)
    [ "$landed" -eq "$N" ] || { echo "only $landed of $N tasks landed" >&2; exit 1; }
    walls+=("$wall") rsss+=("$rss_kb")
    wts+=("$(python3 -c '
import json, sys
ms = [json.loads(l)["detail"]["worktree_ms"] for l in open(sys.argv[1]) if "\"attempt.started\"" in l]
print(f"{sum(ms) / len(ms):.1f}")' "$events")")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
wall=$(median "${walls[@]}")
rss_kb=$(median "${rsss[@]}")
wt_mean_ms=$(median "${wts[@]}")

# baseline: git worktree add of the same commit, N times ------------------------------------
base=$(git -C "$repo" rev-parse HEAD)
start=$(date +%s%N)
i=0
while [ "$i" -lt "$N" ]; do
    git -C "$repo" worktree add -q --detach "$work/plain/w$i" "$base"
    i=$((i + 1))
done
end=$(date +%s%N)
git_mean_ms=$(python3 -c "print(f'{($end - $start) / 1e6 / $N:.1f}')")

python3 - "$N" "$P" "$T" "$wall" "$rss_kb" "$wt_mean_ms" "$git_mean_ms" "$G" "$RUNS" <<'EOF'
import math, sys
n, p, t = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
wall, rss_kb = float(sys.argv[4]), int(float(sys.argv[5]))
wt, git = float(sys.argv[6]), float(sys.argv[7])
g = float(sys.argv[8])
ideal = math.ceil(n / p) * (t + g) + g
print(f"tasks {n}, parallel {p}, agent {t:g}s, gate {g:g}s; medians of {sys.argv[9]} runs")
print(f"makespan     {wall:8.1f} s   ideal {ideal:.1f} s      ratio {wall / ideal:.3f}  (target <= 1.15)")
print(f"peak memory  {rss_kb / 1024:8.1f} MiB                     (target <= 100 MiB)")
print(f"worktree     {wt:8.1f} ms  git worktree add {git:.1f} ms  ratio {wt / git:.3f}")
missed = []
if wall / ideal > 1.15:
    missed.append(f"makespan {wall / ideal:.3f}x the ideal, goal <= 1.15x")
if rss_kb / 1024 > 100:
    missed.append(f"peak RSS {rss_kb / 1024:.1f} MiB, goal <= 100 MiB")
for m in missed:
    print(f"goal missed: {m}", file=sys.stderr)
sys.exit(1 if missed else 0)
EOF
