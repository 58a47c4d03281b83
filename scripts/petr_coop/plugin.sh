#!/usr/bin/env bash
# PETR+CoOp as a training-free plug-in: take the CoOp context of an existing base-to-novel CoOp run (no retraining),
# fit the router on the 16-shot base train images and evaluate base and novel classes.
# Usage: DATA=/path/to/datasets bash scripts/petr_coop/plugin.sh eurosat 1 [COOP_RUN_DIR]
# COOP_RUN_DIR defaults to scripts/coop/base2new_train.sh's folder,
# $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/CoOp/<cfg>/seed<S>; COOP_LOAD_EPOCH picks its epoch
# (default: the last saved). Outputs: base2new/{train_base,test_new}/<dataset>/shots_16/PETRCoOp/<cfg>_plugin/seed<S>
# (skipped when finished). CFG (default vit_b16_ctxv1, vit_b16_ep50_ctxv1 for imagenet) must match the CoOp run's
# prompt settings; SHOTS, BACKBONE and EXTRA_OPTS as in scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || [ $# -eq 3 ] || die "usage: bash scripts/petr_coop/plugin.sh <dataset> <seed> [coop_run_dir]"
DATASET=$1
SEED=$2
TRAINER=PETRCoOp
if [ "$DATASET" = imagenet ]; then CFG=${CFG:-vit_b16_ep50_ctxv1}; else CFG=${CFG:-vit_b16_ctxv1}; fi
SHOTS=${SHOTS:-16}
COOP_DIR=${3:-$(run_dir base2new/train_base "$DATASET" "$SHOTS" CoOp "$CFG" "$SEED")}

require_data
dataset_name "$DATASET" >/dev/null
[ -d "$COOP_DIR/prompt_learner" ] || die "no CoOp run at $COOP_DIR (no prompt_learner/ folder): train one with \
scripts/coop/base2new_train.sh $DATASET $SEED or pass its folder as the third argument"
DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "${CFG}_plugin" "$SEED")
TEACHER_NAME="" common_opts PETRCOOP
echo "PETR+CoOp plug-in on $COOP_DIR: routing and base-class evaluation of $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base \
    TRAINER.MODAL base2novel \
    TRAINER.PETRCOOP.COOP_MODEL_DIR "$COOP_DIR" \
    TRAINER.PETRCOOP.COOP_LOAD_EPOCH "${COOP_LOAD_EPOCH:-0}"
CFG="${CFG}_plugin" bash scripts/petr_coop/base2new_test.sh "$DATASET" "$SEED"
