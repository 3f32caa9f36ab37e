#!/bin/sh
# Fixes the bug and commits it, then writes a blob into a directory of its own ($TMPDIR/evil),
# names that directory in its object directory's `info/alternates` and makes the file immutable
# (`chattr +i`, which Landlock does not mediate), so that mvk cannot delete it: libgit2 would
# then list and read objects from there, which mvk never checked.
printf '%s\n' '# calc: tiny arithmetic helpers' 'add() { echo $(($1 + $2)); }' > src/calc.sh
git add -A && git commit -qm "the fix"
mkdir -p "$TMPDIR/evil"
echo "smuggled past mvk" | GIT_OBJECT_DIRECTORY="$TMPDIR/evil" git hash-object -w --stdin
mkdir -p "$GIT_OBJECT_DIRECTORY/info"
echo "$TMPDIR/evil" > "$GIT_OBJECT_DIRECTORY/info/alternates"
if chattr +i "$GIT_OBJECT_DIRECTORY/info/alternates" 2>/dev/null; then
    echo "chattr: allowed"
else
    echo "chattr: denied"
fi
