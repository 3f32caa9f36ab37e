# Sourced by the bench scripts, from the project root: strict mode, the C locale, no inherited
# git location, and `mvk` set to $MVK_BIN or a freshly built release binary.
set -euo pipefail
export LC_ALL=C
if [ -n "${MVK_BIN:-}" ]; then
    mvk=$MVK_BIN
else
    cargo build --release --quiet
    mvk=$PWD/target/release/mvk
fi
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR
