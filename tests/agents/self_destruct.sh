#!/bin/sh
# Deletes the worktree it was given to work in, from the inside.
set -eu
echo call >> "$1/calls"
rm -rf "$MVK_WORKTREE"
