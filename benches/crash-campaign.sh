#!/usr/bin/env bash
# The crash campaign of issue 23, long: runs tests/integration/crash_campaign.rs with TRIALS
# trials (default 200) of seed SEED (default: a fresh one, printed), then prints the figure
# "N of M trials ended identical to an uninterrupted run", the failed trials' first problems
# counted by kind, and how to reproduce one. Not run by CI (CI runs the same test, 8 trials of
# seed 23). Each trial is a few seconds of a debug build; 200 took 10 minutes on 2 shared cores.
# Usage: benches/crash-campaign.sh [TRIALS] [SEED]
# The whole output (every failed trial's plan, stages, stderr and `mvk log`) is kept in
# ${TMPDIR:-/tmp}/mvk-crash-campaign-SEED.log; `tail -f` it to follow the trials.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR
trials=${1:-200}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
log="${TMPDIR:-/tmp}/mvk-crash-campaign-$seed.log"
echo "crash campaign: $trials trials of seed $seed; output in $log" >&2
start=$(date +%s)
MVK_CRASH_TRIALS=$trials MVK_CRASH_SEED=$seed \
    cargo test --test integration -- --exact crash_campaign::crash_campaign --nocapture \
    >"$log" 2>&1 || true
figure=$(grep -o '[0-9]* of [0-9]* trials ended identical to an uninterrupted run' "$log" | tail -n 1 || true)
if [ -z "$figure" ]; then
    echo "the campaign did not finish; the end of its output:" >&2
    tail -n 40 "$log" >&2
    exit 1
fi
echo "$figure (seed $seed, $(($(date +%s) - start)) s)"
if grep -q '^CRASH-FAIL' "$log"; then
    echo "failures, by their first problem and what mvk said (quotes, paths and numbers blanked):"
    sed -n 's/^CRASH-FAIL trial [0-9]* of seed [0-9]*: //p' "$log" |
        sed -E "s/\`[^\`]*\`/Q/g; s/'[^']*'/Q/g; s/\"[^\"]*\"/Q/g; s|[^ ]*/[^ ]*|P|g; s/[0-9]+/N/g" | sort | uniq -c | sort -rn
    echo "failed trials:"
    grep '^CRASH-FAIL' "$log" | sed -E 's/^CRASH-FAIL trial ([0-9]+) of seed [0-9]+: (.*)/  \1: \2/'
    echo "reproduce one: MVK_CRASH_SEED=$seed MVK_CRASH_ONLY=N cargo test --test integration crash_campaign -- --nocapture"
    echo "(its plan is the same; the instant a timed kill strikes in mvk's work may not be)"
    exit 1
fi
