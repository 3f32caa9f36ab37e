#!/bin/sh
# Commits a file named .mvk, which would land over mvk's own directory.
echo "gotcha" > .mvk
git add -f .mvk && git commit -qm "a .mvk file"
echo "add() { echo \$((\$1 + \$2)); }" > src/calc.sh
