#!/usr/bin/env bash
# PromptKD base-to-novel: distil the student on every train image of DATASET (all classes, labels unused) from the
# teacher, then evaluate on the base classes.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#        bash scripts/promptkd/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_0/PromptKD/<cfg>/seed<S> (skipped when finished; resumes).
# Other environment knobs: scripts/common.sh (KD_WEIGHT, BACKBONE, TEACHER_NAME, EXTRA_OPTS, CFG).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/promptkd/base2new_train.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PromptKD
CFG=${CFG:-vit_b16_c2_ep20_batch8_4+4ctx}
SHOTS=0

require_data
NAME=$(dataset_name "$DATASET")
ALPHA=$(kd_weight "$DATASET")
DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
CKPT=$(teacher_ckpt "$NAME")
common_opts PROMPTKD
echo "Training $TRAINER on $DATASET (seed $SEED, α=$ALPHA) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base \
    TRAINER.MODAL base2novel \
    TRAINER.PROMPTKD.KD_WEIGHT "$ALPHA" \
    TRAINER.PROMPTKD.TEMPERATURE 1.0 \
    TRAINER.PROMPTKD.TEACHER_CKPT "$CKPT"
