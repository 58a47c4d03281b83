#!/usr/bin/env bash
# PETR+CoOp base-to-novel: learn the CoOp context θ_s on the 16-shot base classes of DATASET (SEED), fit the router
# on those images and evaluate on the base classes (θ_u = the dataset's hand-crafted prompt ensemble).
# Usage: DATA=/path/to/datasets bash scripts/petr_coop/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/PETRCoOp/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16_ctxv1 (vit_b16_ep50_ctxv1 for imagenet, as CoOp); other knobs:
# SHOTS, BACKBONE, EXTRA_OPTS (scripts/common.sh). For an existing CoOp run use scripts/petr_coop/plugin.sh instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/petr_coop/base2new_train.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PETRCoOp
if [ "$DATASET" = imagenet ]; then CFG=${CFG:-vit_b16_ep50_ctxv1}; else CFG=${CFG:-vit_b16_ctxv1}; fi
SHOTS=${SHOTS:-16}

require_data
dataset_name "$DATASET" >/dev/null
DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
TEACHER_NAME="" common_opts PETRCOOP
echo "Training $TRAINER on the base classes of $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base \
    TRAINER.MODAL base2novel
