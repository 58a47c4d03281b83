#!/usr/bin/env bash
# PromptKD cross-dataset (upstream protocol, transductive): distil the student on DATASET's train split (all classes,
# unlabelled) from the SOURCE-trained teacher and evaluate on DATASET's test set. `xd_train.sh <SOURCE>` (e.g.
# `xd_train.sh imagenet`) gives the source-distilled student that xd_test.sh evaluates on other datasets.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#            bash scripts/promptkd/xd_train.sh eurosat 1
#   SOURCE  dataset the teacher was trained on (<TEACHER_DIR>/<source DATASET.NAME>-xd; default imagenet)
#   SHOTS   train images per class (default 0: every train image)
# α = 1000 unless KD_WEIGHT is set (upstream xd_train.sh).
# Output: $OUTPUT_ROOT/xd/train/<dataset>/shots_<SHOTS>/PromptKD/<cfg>/seed<S>.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: [SOURCE=imagenet] bash scripts/promptkd/xd_train.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PromptKD
CFG=${CFG:-vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets}
SHOTS=${SHOTS:-0}

require_data
dataset_name "$DATASET" >/dev/null
xd_source
ALPHA=${KD_WEIGHT:-1000.0}
DIR=$(run_dir xd/train "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
CKPT=$(teacher_ckpt "$SOURCE_NAME-xd")
common_opts PROMPTKD
echo "Training $TRAINER (cross, $SOURCE_NAME teacher) on $DATASET (seed $SEED, $SHOTS shots, α=$ALPHA) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    TRAINER.MODAL cross \
    TRAINER.PROMPTKD.KD_WEIGHT "$ALPHA" \
    TRAINER.PROMPTKD.TEMPERATURE 1.0 \
    TRAINER.PROMPTKD.TEACHER_CKPT "$CKPT"
