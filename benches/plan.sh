#!/usr/bin/env bash
# Benchmark: `mvk plan` on generated flows of 1,000, 10,000 and 100,000 tasks (time, peak memory),
# each against a baseline measured in the same run: b3sum (or sha256sum) of the same file, so
# that a noisy shared machine shows in both numbers. Not run by CI.
# Usage: benches/plan.sh [SIZES...]   (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
mvk=target/release/mvk
hasher=$(command -v b3sum || command -v sha256sum)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1000 10000 100000)

gen() { # a flow of $1 inline tasks; task i waits for task i/2 (a wide, deep DAG)
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

measure() { # prints "seconds peak_kib" for a command
  /usr/bin/time -o "$work/time" -f '%e %M' "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  tail -1 "$work/time"
}

printf '%-8s %10s %10s %12s %10s\n' tasks plan_s rss_mib baseline_s ratio
for n in "${sizes[@]}"; do
  f="$work/flow-$n.kdl"
  gen "$n" "$f"
  read -r t rss < <(measure "$mvk" plan "$f")
  read -r bt _ < <(measure "$hasher" "$f")
  ratio=$(awk -v a="$t" -v b="$bt" 'BEGIN { if (b < 0.005) b = 0.005; printf "%.0f", a / b }')
  printf '%-8s %10s %10.1f %12s %9sx\n' "$n" "$t" "$(awk -v k="$rss" 'BEGIN{print k/1024}')" "$bt" "$ratio"
done
