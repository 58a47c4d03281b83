#!/usr/bin/env bash
# PromptKD cross-dataset / domain generalisation without re-distilling: evaluate the ImageNet-distilled student
# (scripts/promptkd/xd_train.sh imagenet SEED) on DATASET, with the teacher's text features for DATASET's classes.
# DATASET may be one of the 10 cross-dataset targets or an ImageNet variant (imagenetv2, imagenet_sketch,
# imagenet_a, imagenet_r).
# Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/promptkd/xd_test.sh eurosat 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_0/PromptKD/<cfg>/seed<S> (skipped when finished).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/promptkd/xd_test.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PromptKD
CFG=${CFG:-vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets}
SHOTS=0
case "$DATASET" in
    imagenetv2 | imagenet_sketch | imagenet_a | imagenet_r) MODAL=dg ;;
    *) MODAL=cross ;;
esac

require_data
dataset_name "$DATASET" >/dev/null
MODEL_DIR=$(run_dir xd/train imagenet "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir xd/test "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
run_finished "$MODEL_DIR" ||
    die "no ImageNet-distilled student in $MODEL_DIR: run scripts/promptkd/xd_train.sh imagenet $SEED"
skip_if_finished "$DIR"
CKPT=$(teacher_ckpt ImageNet-xd)
eval_args "$MODEL_DIR"
common_opts PROMPTKD
echo "Evaluating the ImageNet-distilled $TRAINER on $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    "${EVAL_ARGS[@]}" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    TRAINER.MODAL "$MODAL" \
    TRAINER.PROMPTKD.TEACHER_CKPT "$CKPT"
