#!/usr/bin/env bash
# PETR cross-dataset: θ_s learns labelled train images of the SOURCE dataset (its classes), θ_u the unlabelled train
# split of TARGET, the router is fitted on SOURCE train images scored over TARGET's classes; evaluated on TARGET's test
# set.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#            bash scripts/petr/xd_train.sh eurosat 1
#   SOURCE  source dataset short name (default imagenet; the demo world's is demonet)
#   SHOTS   train images per class of source and target (default 0: every train image)
# The teacher is the SOURCE-trained one (<TEACHER_DIR>/<source DATASET.NAME>-xd, e.g. ImageNet-xd, as written by
# scripts/teacher/xd_train.sh); α = 1000 unless KD_WEIGHT is set (PromptKD xd).
# Output: $OUTPUT_ROOT/xd/train/<target>/shots_<SHOTS>/PETR/<cfg>/seed<S>.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: [SOURCE=imagenet] bash scripts/petr/xd_train.sh <target dataset> <seed>"
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
DIR=$(run_dir "$ROLE_DIR/train" "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
CKPT=$(teacher_ckpt "$SOURCE_NAME-xd")
common_opts PETR
echo "Training $TRAINER ($MODAL: $SOURCE_NAME -> $DATASET, seed $SEED, $SHOTS shots, α=$ALPHA) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    DATASET.SOURCE_DATASET "$SOURCE_NAME" \
    TRAINER.MODAL "$MODAL" \
    TRAINER.PETR.KD_WEIGHT "$ALPHA" \
    TRAINER.PETR.TEACHER_CKPT "$CKPT"
