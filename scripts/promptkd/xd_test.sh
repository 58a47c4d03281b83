#!/usr/bin/env bash
# PromptKD cross-dataset / domain generalisation without re-distilling: evaluate the SOURCE-distilled student
# (scripts/promptkd/xd_train.sh <SOURCE> SEED) on DATASET, with the teacher's text features for DATASET's classes.
# DATASET may be a cross-dataset target or a DG target of SOURCE (imagenet: imagenetv2, imagenet_sketch, imagenet_a,
# imagenet_r; demonet: demonetv2, demonet_sketch, demonet_a, demonet_r), which is evaluated with TRAINER.MODAL dg.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \
#            bash scripts/promptkd/xd_test.sh eurosat 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_<SHOTS>/PromptKD/<cfg>/seed<S> (skipped when finished).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: [SOURCE=imagenet] bash scripts/promptkd/xd_test.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PromptKD
CFG=${CFG:-vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets}
SHOTS=${SHOTS:-0}

require_data
dataset_name "$DATASET" >/dev/null
xd_source
MODAL=cross
if [[ " $(dg_targets "$SOURCE" 2>/dev/null || true) " == *" $DATASET "* ]]; then
    MODAL=dg
fi
MODEL_DIR=$(run_dir xd/train "$SOURCE" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir xd/test "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
run_finished "$MODEL_DIR" ||
    die "no $SOURCE_NAME-distilled student in $MODEL_DIR: run SOURCE=$SOURCE scripts/promptkd/xd_train.sh $SOURCE $SEED"
CKPT=$(teacher_ckpt "$SOURCE_NAME-xd")
eval_args "$MODEL_DIR"
common_opts PROMPTKD
echo "Evaluating the $SOURCE_NAME-distilled $TRAINER on $DATASET ($MODAL, seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    "${EVAL_ARGS[@]}" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    TRAINER.MODAL "$MODAL" \
    TRAINER.PROMPTKD.TEACHER_CKPT "$CKPT"
