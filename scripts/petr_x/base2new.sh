#!/usr/bin/env bash
# PETR+X base-to-novel: PETR's training-free routing on a finished base-to-novel run of prompt learner X. θ_s = X's
# prediction over all classes, θ_u = the dataset's hand-crafted prompt ensemble; the router is fitted on X's SHOTS-shot
# base train images (same SEED), then the base classes and the novel classes are evaluated. Nothing is trained.
# Usage: DATA=/path/to/datasets bash scripts/petr_x/base2new.sh <coop|cocoop|maple|ivlp|promptsrc> <dataset> <seed>
#            [X_RUN_DIR]
# X_RUN_DIR: the folder of X's run, ours or upstream's (Dassl checkpoints in prompt_learner/,
# MultiModalPromptLearner/ or VLPromptLearner/); default: the folder of X's base-to-novel script,
# $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/<X>/<X_CFG>/seed<S> with X_CFG vit_b16_ctxv1 for coop
# (vit_b16_ep50_ctxv1 on imagenet; scripts/coop/base2new_train.sh), the default CFG of scripts/<x>/base2new_train.sh
# for cocoop, maple and ivlp, and vit_b16_c2_ep20_batch4_4+4ctx for promptsrc (scripts/teacher/base2new_train.sh
# with that CFG and TEACHER_NAME=ViT-B/16). TUNED_LOAD_EPOCH picks X's epoch (default: the last saved).
# Outputs: $OUTPUT_ROOT/base2new/{train_base,test_new}/<dataset>/shots_16/PETRX/vit_b16_<x>/seed<S> (train.py skips a
# finished run of the same config). CFG (default vit_b16_<x>), SHOTS, BACKBONE and EXTRA_OPTS as in scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: bash scripts/petr_x/base2new.sh <coop|cocoop|maple|ivlp|promptsrc> \
<dataset> <seed> [x_run_dir]"
TUNED=$1
DATASET=$2
SEED=$3
TRAINER=PETRX
case "$TUNED" in
    coop)
        TUNED_TRAINER=CoOp
        if [ "$DATASET" = imagenet ]; then X_CFG=${X_CFG:-vit_b16_ep50_ctxv1}; else X_CFG=${X_CFG:-vit_b16_ctxv1}; fi
        ;;
    cocoop)
        TUNED_TRAINER=CoCoOp
        X_CFG=${X_CFG:-vit_b16_c4_ep10_batch1_ctxv1}
        ;;
    maple)
        TUNED_TRAINER=MaPLe
        X_CFG=${X_CFG:-vit_b16_c2_ep5_batch4_2ctx}
        ;;
    ivlp)
        TUNED_TRAINER=IVLP
        X_CFG=${X_CFG:-vit_b16_c2_ep20_batch4_4+4ctx}
        ;;
    promptsrc)
        TUNED_TRAINER=PromptSRC
        X_CFG=${X_CFG:-vit_b16_c2_ep20_batch4_4+4ctx}
        ;;
    *) die "unknown prompt learner '$TUNED'; use coop, cocoop, maple, ivlp or promptsrc \
(configs/trainers/PETRX/vit_b16_<x>.yaml)" ;;
esac
CFG=${CFG:-vit_b16_$TUNED}
SHOTS=${SHOTS:-16}

require_data
dataset_name "$DATASET" >/dev/null
X_DIR=${4:-$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TUNED_TRAINER" "$X_CFG" "$SEED")}
[ -d "$X_DIR" ] || die "no $TUNED_TRAINER run at $X_DIR: train one with its base-to-novel script (same dataset, \
seed and SHOTS) or pass its folder as the fourth argument"
BASE_DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
NEW_DIR=$(run_dir base2new/test_new "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
TEACHER_NAME="" common_opts PETRX
X_OPTS=(TRAINER.PETRX.TUNED_MODEL_DIR "$X_DIR" TRAINER.PETRX.TUNED_LOAD_EPOCH "${TUNED_LOAD_EPOCH:-0}")
echo "PETR+X on $TUNED_TRAINER run $X_DIR: router fit and base-class evaluation of $DATASET (seed $SEED) -> \
$BASE_DIR"
train_py "$DATASET" "$BASE_DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base \
    TRAINER.MODAL base2novel \
    "${X_OPTS[@]}"
echo "PETR+X on $TUNED_TRAINER run $X_DIR: novel-class evaluation of $DATASET (seed $SEED) with the router of \
$BASE_DIR -> $NEW_DIR"
train_py "$DATASET" "$NEW_DIR" \
    --model-dir "$BASE_DIR" --eval-only \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES new \
    TRAINER.MODAL base2novel \
    "${X_OPTS[@]}"
