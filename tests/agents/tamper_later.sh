#!/bin/sh
# Attempt 1 leaves the bug (its gate fails), so that attempt 2 runs on a slot whose index mvk
# wrote after every file: there only stat data can tell an edit. Attempt 2 fixes the bug and
# touches the sealed test in the way $1 names, each hard to see without reading the file.
set -eu
[ "$MVK_ATTEMPT" -eq 1 ] && exit 0
sleep 0.05
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
t=tests/test_calc.sh
case "$1" in
same-size-old-mtime)
    # Weakened in place (same inode, same size), its modification time put back.
    cp -p "$t" "$t.was"
    weak=$(sed 's/-eq 0 ]/-ge 0 ]/' "$t")
    printf '%s\n' "$weak" > "$t"
    touch -r "$t.was" "$t"
    rm "$t.was"
    ;;
mode) chmod +x "$t" ;;
symlink)
    printf '%s\n' '#!/bin/sh' 'exit 0' > src/pass.sh
    rm "$t"
    ln -s ../src/pass.sh "$t"
    ;;
*) echo "tamper_later.sh: unknown mode $1" >&2; exit 9 ;;
esac
