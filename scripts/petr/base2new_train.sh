#!/usr/bin/env bash
# PETR base-to-novel: train θ_s (labelled base classes) and θ_u (unlabelled novel classes) on DATASET with SEED,
# fit the router, and evaluate on the base classes.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] bash scripts/petr/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_0/PETR/<cfg>/seed<S> (finished runs are skipped, interrupted
# ones resume). Other environment knobs: scripts/common.sh (KD_WEIGHT, BACKBONE, TEACHER_NAME, EXTRA_OPTS, CFG).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/petr/base2new_train.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PETR
CFG=${CFG:-vit_b16_ep40_batch8_4ctx}
SHOTS=0  # every train image: base ones labelled for θ_s, novel ones unlabelled for θ_u

require_data
NAME=$(dataset_name "$DATASET")
ALPHA=$(kd_weight "$DATASET")
DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
CKPT=$(teacher_ckpt "$NAME")
common_opts PETR
echo "Training $TRAINER on $DATASET (seed $SEED, α=$ALPHA) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base \
    TRAINER.MODAL base2novel \
    TRAINER.PETR.KD_WEIGHT "$ALPHA" \
    TRAINER.PETR.TEACHER_CKPT "$CKPT"
