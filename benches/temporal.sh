#!/usr/bin/env bash
# Benchmark (issue 9): a flow of N trivial tasks (default 1000) run by the Temporal executor on
# W `mvk worker`s (default 3), against the local executor running the same flow with `parallel
# W` in the same run. Every task's agent sleeps T seconds (default 0) and appends a line to its
# item; its gate greps for it; each lands on main in turn. Not run by CI.
# Needs the `temporal` CLI on PATH (`export PATH="$(tests/tools/install.sh):$PATH"`).
# Usage: benches/temporal.sh   (builds the release binary with the `temporal` feature first;
#                               MVK_BIN=PATH uses that one)
#        N=200 W=3 T=0 benches/temporal.sh
#
# Figures, each against a baseline measured in the same run:
#   makespan      wall time of `mvk apply --executor temporal`, and of `mvk apply` (local) on a
#                 copy of the same repository
#   per activity  makespan x W / N: the time one worker spends per attempt, start to start,
#                 against the same figure of the local executor (makespan x W / N with
#                 `parallel W`); the difference is what Temporal costs per activity
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
W=${W:-3}
T=${T:-0}
if [ -z "${MVK_BIN:-}" ]; then
    cargo build --release --quiet --features temporal
    MVK_BIN=$PWD/target/release/mvk
fi
. benches/common.sh
command -v temporal >/dev/null || { echo "the temporal CLI is not on PATH: export PATH=\"\$(tests/tools/install.sh):\$PATH\"" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/mvk-bench-temporal.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "${KEEP:-}" ] && echo "keeping $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 NO_COLOR=1

repo=$work/repo
flow_repo "$repo" "$N" "$W" "$T"
cp -a "$repo" "$work/local"

landed() { grep -c '"event":"merge.done"' "$1/.mvk/runs/$2/events.jsonl" || true; }

# local: the same flow, `parallel W`, in a copy --------------------------------------------------
echo "mvk apply (local): $N tasks, parallel $W, agents of ${T}s ..." >&2
start=$(date +%s%N)
(cd "$work/local" && MVK_WORKTREE_ROOT=$work/pool-local "$mvk" --quiet apply loops/flow.kdl \
    >"$work/local.out" 2>"$work/local.err") || { cat "$work/local.err" >&2; exit 1; }
end=$(date +%s%N)
local_s=$(python3 -c "print(($end - $start) / 1e9)")
n=$(landed "$work/local" "$(head -n1 "$work/local.out")")
[ "$n" -eq "$N" ] || { echo "local: only $n of $N tasks landed" >&2; exit 1; }

# temporal: a dev server, W workers in clones of their own ------------------------------------
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
address=127.0.0.1:$port
temporal server start-dev --headless --ip 127.0.0.1 --port "$port" --db-filename "$work/temporal.db" \
    >"$work/server.log" 2>&1 &
pids+=($!)
until temporal operator namespace describe default --address "$address" >/dev/null 2>&1; do sleep 0.25; done
for w in $(seq 1 "$W"); do
    git clone -q "$repo" "$work/w$w"
    git -C "$work/w$w" config user.name worker
    git -C "$work/w$w" config user.email worker@example.com
    (cd "$work/w$w" && MVK_WORKTREE_ROOT=$work/pool-w$w exec "$mvk" worker \
        --temporal-address "$address" --task-queue bench >"$work/worker$w.log" 2>&1) &
    pids+=($!)
done
echo "mvk apply --executor temporal: $N tasks on $W workers ..." >&2
start=$(date +%s%N)
(cd "$repo" && /usr/bin/time -f "%M" -o "$work/time" "$mvk" --quiet apply loops/flow.kdl \
    --executor temporal --temporal-address "$address" --task-queue bench \
    >"$work/temporal.out" 2>"$work/temporal.err") || { cat "$work/temporal.err" >&2; exit 1; }
end=$(date +%s%N)
temporal_s=$(python3 -c "print(($end - $start) / 1e9)")
n=$(landed "$repo" "$(head -n1 "$work/temporal.out")")
[ "$n" -eq "$N" ] || { echo "temporal: only $n of $N tasks landed" >&2; exit 1; }
rss_kb=$(cat "$work/time")

python3 - "$N" "$W" "$T" "$local_s" "$temporal_s" "$rss_kb" <<'EOF'
import sys
n, w, t = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
local, temporal, rss_kb = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
per_l, per_t = local * w / n * 1000, temporal * w / n * 1000
print(f"tasks {n}, {w} workers (local: parallel {w}), agent {t:g}s")
print(f"makespan       temporal {temporal:8.1f} s   local {local:8.1f} s   ratio {temporal / local:.3f}")
print(f"per activity   temporal {per_t:8.1f} ms  local {per_l:8.1f} ms  overhead {per_t - per_l:+.1f} ms ({per_t / per_l:.3f}x)")
print(f"coordinator peak memory {rss_kb / 1024:.1f} MiB")
EOF
