#!/bin/sh
# Leaves a process outside its process group that acts after the agent has "finished".
STATE=$1
setsid sh -c "sleep 2; touch '$STATE/escaped'" </dev/null >/dev/null 2>&1 &
echo "add() { echo \$((\$1 + \$2)); }" > src/calc.sh
