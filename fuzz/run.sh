#!/usr/bin/env bash
# The long fuzz run (outside CI): each target for SECONDS (default 600) on stable Rust through
# RUSTC_BOOTSTRAP; logs in fuzz/logs/, findings in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-600}
mkdir -p logs
for target in compile evidence adapter; do
    mkdir -p "corpus/$target"
    RUSTC_BOOTSTRAP=1 cargo fuzz run -s none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
        >"logs/$target.log" 2>&1 || {
        # cargo-fuzz exits non-zero for a finding and for a build that failed: say which.
        if grep -q "failed to build fuzz script" "logs/$target.log"; then
            echo "$target: the fuzz target did not build, see logs/$target.log"
        else
            echo "$target: stopped with a finding, see logs/$target.log and artifacts/$target/"
        fi
    }
    grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "logs/$target.log" | tail -2 || true
done
