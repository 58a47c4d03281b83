#!/usr/bin/env bash
# Reproduce PETR's base-to-novel table: for the 11 datasets x seeds 1-3, train (+ base test) and test on the novel
# classes; finished runs are skipped and interrupted ones resume from their checkpoints; then print the Base / Novel /
# HM table (parse_test_res.py b2n) beside the paper's numbers.
# Usage: DATA=/path/to/datasets TEACHER_DIR=teachers bash scripts/petr/reproduce_base2new.sh
#        DATASETS="eurosat dtd" SEEDS="1" ... to run a subset. A failed run is reported and the loop goes on; a
#        preempted one (status 75) ends the script with that status.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr reproduce_base2new "$@"
