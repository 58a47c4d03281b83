#!/usr/bin/env bash
# CoOp base-to-novel: evaluate the context learned by base2new_train.sh (same DATASET, SEED) on the novel classes.
# Usage: DATA=/path/to/datasets bash scripts/coop/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/CoOp/<cfg>/seed<S> (skipped when finished). The loaded
# epoch is the training run's last saved one (its config's MAX_EPOCH: 200, or 50 for imagenet), or LOAD_EPOCH.
# CFG, SHOTS, BACKBONE, EXTRA_OPTS as in base2new_train.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/coop/base2new_test.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=CoOp
if [ "$DATASET" = imagenet ]; then CFG=${CFG:-vit_b16_ep50_ctxv1}; else CFG=${CFG:-vit_b16_ctxv1}; fi
SHOTS=${SHOTS:-16}

require_data
dataset_name "$DATASET" >/dev/null
MODEL_DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir base2new/test_new "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
run_finished "$MODEL_DIR" || die "no finished training run in $MODEL_DIR: run scripts/coop/base2new_train.sh $DATASET $SEED"
eval_args "$MODEL_DIR"
TEACHER_NAME="" common_opts COOP
echo "Evaluating $TRAINER on the novel classes of $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    "${EVAL_ARGS[@]}" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES new
