#!/usr/bin/env bash
# PETR base-to-novel: evaluate the model trained by base2new_train.sh (same DATASET, SEED) on the novel classes,
# with the router saved in its run folder.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/petr/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_0/PETR/<cfg>/seed<S> (skipped when finished).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/petr/base2new_test.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PETR
CFG=${CFG:-vit_b16_ep40_batch8_4ctx}
SHOTS=0

require_data
NAME=$(dataset_name "$DATASET")
ALPHA=$(kd_weight "$DATASET")
MODEL_DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir base2new/test_new "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
run_finished "$MODEL_DIR" ||
    die "no finished training run in $MODEL_DIR: run scripts/petr/base2new_train.sh $DATASET $SEED"
CKPT=$(teacher_ckpt "$NAME")
eval_args "$MODEL_DIR"
common_opts PETR
echo "Evaluating $TRAINER on the novel classes of $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    "${EVAL_ARGS[@]}" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES new \
    TRAINER.MODAL base2novel \
    TRAINER.PETR.KD_WEIGHT "$ALPHA" \
    TRAINER.PETR.TEACHER_CKPT "$CKPT"
