#!/usr/bin/env bash
# CoOp base-to-novel: learn the context on the 16-shot base classes of DATASET (SEED), then evaluate the base classes.
# Usage: DATA=/path/to/datasets bash scripts/coop/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/CoOp/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16_ctxv1 (vit_b16_ep50_ctxv1 for imagenet), CoCoOp's CoOp baseline;
# other knobs: SHOTS, BACKBONE, EXTRA_OPTS (scripts/common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/coop/base2new_train.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=CoOp
if [ "$DATASET" = imagenet ]; then CFG=${CFG:-vit_b16_ep50_ctxv1}; else CFG=${CFG:-vit_b16_ctxv1}; fi
SHOTS=${SHOTS:-16}

require_data
dataset_name "$DATASET" >/dev/null
DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
TEACHER_NAME="" common_opts COOP
echo "Training $TRAINER on the base classes of $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base
