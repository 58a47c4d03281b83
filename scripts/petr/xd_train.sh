#!/usr/bin/env bash
# PETR cross-dataset: θ_s learns labelled ImageNet train images (source classes), θ_u the unlabelled train split of
# TARGET, the router is fitted on ImageNet train images scored over TARGET's classes; evaluated on TARGET's test set.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] bash scripts/petr/xd_train.sh eurosat 1
# The teacher is the ImageNet-trained one (<TEACHER_DIR>/ImageNet-xd); α = 1000 unless KD_WEIGHT is set (PromptKD xd).
# Output: $OUTPUT_ROOT/xd/train/<target>/shots_0/PETR/<cfg>/seed<S>.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/petr/xd_train.sh <target dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PETR
CFG=${CFG:-vit_b16_ep40_batch8_4ctx_cross_datasets}
SHOTS=0
MODAL=${MODAL:-cross}
ROLE_DIR=${ROLE_DIR:-xd}

require_data
dataset_name "$DATASET" >/dev/null
ALPHA=${KD_WEIGHT:-1000.0}
DIR=$(run_dir "$ROLE_DIR/train" "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
skip_if_finished "$DIR"
CKPT=$(teacher_ckpt ImageNet-xd)
common_opts PETR
echo "Training $TRAINER ($MODAL: ImageNet -> $DATASET, seed $SEED, α=$ALPHA) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    DATASET.SOURCE_DATASET ImageNet \
    TRAINER.MODAL "$MODAL" \
    TRAINER.PETR.KD_WEIGHT "$ALPHA" \
    TRAINER.PETR.TEACHER_CKPT "$CKPT"
