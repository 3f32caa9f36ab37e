#!/bin/sh
# Review r8e: its sandbox grants $1/shared and $1/shared/inner. The first attempt puts a link to
# the main checkout ($2) where `inner` was, for the next attempt's grant to lead there; a later
# attempt, if one ever starts, writes through it.
SHARED=$1/shared
n=$(cat "$SHARED/count" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$SHARED/count"
if [ "$n" = 1 ]; then
    rm -rf "$SHARED/inner" && ln -s "$2" "$SHARED/inner" && echo planted
else
    echo pwned > "$SHARED/inner/pwned" && echo "wrote through the link"
fi
