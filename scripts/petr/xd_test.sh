#!/usr/bin/env bash
# PETR cross-dataset: re-evaluate the model of xd_train.sh (same TARGET, SEED, SOURCE, SHOTS) on TARGET's test set
# with its saved router, e.g. with another router: EXTRA_OPTS="TRAINER.PETR.ROUTER energy".
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \
#            bash scripts/petr/xd_test.sh eurosat 1
# Output: $OUTPUT_ROOT/xd/test/<target>/shots_<SHOTS>/PETR/<cfg>/seed<S>.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: [SOURCE=imagenet] bash scripts/petr/xd_test.sh <target dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PETR
CFG=${CFG:-vit_b16_ep40_batch8_4ctx_cross_datasets}
SHOTS=${SHOTS:-0}
MODAL=${MODAL:-cross}
ROLE_DIR=${ROLE_DIR:-xd}

require_data
dataset_name "$DATASET" >/dev/null
xd_source
ALPHA=${KD_WEIGHT:-1000.0}
MODEL_DIR=$(run_dir "$ROLE_DIR/train" "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir "$ROLE_DIR/test" "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
run_finished "$MODEL_DIR" ||
    die "no finished training run in $MODEL_DIR: run scripts/petr/${ROLE_DIR}_train.sh $DATASET $SEED"
CKPT=$(teacher_ckpt "$SOURCE_NAME-xd")
eval_args "$MODEL_DIR"
common_opts PETR
echo "Evaluating $TRAINER ($MODAL: $SOURCE_NAME -> $DATASET) on $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    "${EVAL_ARGS[@]}" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    DATASET.SOURCE_DATASET "$SOURCE_NAME" \
    TRAINER.MODAL "$MODAL" \
    TRAINER.PETR.KD_WEIGHT "$ALPHA" \
    TRAINER.PETR.TEACHER_CKPT "$CKPT"
