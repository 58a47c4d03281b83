#!/usr/bin/env bash
# Cross-dataset / DG teacher (PromptSRC on ViT-L/14, cross-dataset settings: deep prompts 3/3, GPA 6/10): train on
# 16-shot SOURCE (default imagenet), all classes, and publish it to ${TEACHER_DIR:-teachers}/<source DATASET.NAME>-xd
# (ImageNet-xd; DemoNet-xd for SOURCE=demonet) for the xd/dg student scripts.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/teacher/xd_train.sh 1
# Output: $OUTPUT_ROOT/xd/train/<source>/shots_16/PromptSRC/<cfg>/seed<S>. Knobs: CFG (default
# vit_l14_c2_ep20_batch8_4+4ctx_cross_datasets), SOURCE, SHOTS (default 16), TEACHER_NAME, TEACHER_DIR, EXTRA_OPTS
# (scripts/common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
source scripts/teacher/publish.sh

[ $# -eq 1 ] || die "usage: [SOURCE=imagenet] bash scripts/teacher/xd_train.sh <seed>"
SEED=$1
TRAINER=PromptSRC
CFG=${CFG:-vit_l14_c2_ep20_batch8_4+4ctx_cross_datasets}
SHOTS=${SHOTS:-16}

require_data
xd_source
DATASET=$SOURCE
DIR=$(run_dir xd/train "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
BACKBONE="${TEACHER_NAME:-}" TEACHER_NAME="" common_opts PROMPTSRC
echo "Training the $TRAINER cross-dataset teacher on $DATASET (all classes, seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    TRAINER.MODAL cross
publish_teacher "$DIR" "$SOURCE_NAME-xd"
