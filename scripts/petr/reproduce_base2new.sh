#!/usr/bin/env bash
# Reproduce PETR's base-to-novel table: for the 11 datasets x seeds 1-3, train (+ base test) and test on the novel
# classes; finished runs are skipped and interrupted ones resume from their checkpoints; then print the Base / Novel /
# HM table (parse_test_res.py b2n) beside the paper's numbers.
# Usage: DATA=/path/to/datasets TEACHER_DIR=teachers bash scripts/petr/reproduce_base2new.sh
#        DATASETS="eurosat dtd" SEEDS="1" ... to run a subset. A failed run is reported and the loop goes on; a
#        preempted one (status 75) ends the script with that status.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

CFG=${CFG:-vit_b16_ep40_batch8_4ctx}
export CFG
read -r -a DATASET_LIST <<<"${DATASETS:-${BASE2NEW_DATASETS[*]}}"
read -r -a SEED_LIST <<<"${SEEDS:-1 2 3}"
require_data
require_python

# unit SCRIPT DATASET SEED: runs one unit script; a preempted run ends the whole loop with its status (a rerun of this
# script skips the finished runs and continues the preempted one).
unit() {
    local status=0
    bash "scripts/petr/$1" "$2" "$3" || status=$?
    if [ "$status" -eq "$EXIT_PREEMPTED" ]; then
        echo "preempted during $1 $2 seed $3: rerun this script to continue" >&2
        exit "$EXIT_PREEMPTED"
    fi
    return "$status"
}

failed=()
for dataset in "${DATASET_LIST[@]}"; do
    dataset_name "$dataset" >/dev/null
    for seed in "${SEED_LIST[@]}"; do
        if ! unit base2new_train.sh "$dataset" "$seed"; then
            failed+=("train $dataset seed $seed")
            continue
        fi
        unit base2new_test.sh "$dataset" "$seed" || failed+=("test $dataset seed $seed")
    done
done

"$PYTHON" parse_test_res.py b2n "$OUTPUT_ROOT/base2new" --methods "PETR/$CFG" --paper
if [ ${#failed[@]} -gt 0 ]; then
    printf 'error: %d run(s) failed (see their log.txt): %s\n' "${#failed[@]}" "$(IFS=,; echo "${failed[*]}")" >&2
    exit 1
fi
