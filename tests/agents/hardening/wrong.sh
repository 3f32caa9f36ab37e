#!/bin/sh
echo "# still wrong" >> src/calc.sh
