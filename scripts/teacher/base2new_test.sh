#!/usr/bin/env bash
# Teacher (PromptSRC) on the novel classes: evaluate the base-trained teacher of base2new_train.sh on the novel
# classes of DATASET (the teacher's own base-to-novel numbers).
# Usage: DATA=/path/to/datasets bash scripts/teacher/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/PromptSRC/<cfg>/seed<S>. Knobs: CFG, SHOTS, TEACHER_NAME,
# LOAD_EPOCH, EXTRA_OPTS (scripts/common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/teacher/base2new_test.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PromptSRC
CFG=${CFG:-vit_l14_c2_ep20_batch8_4+4ctx}
SHOTS=${SHOTS:-16}

require_data
dataset_name "$DATASET" >/dev/null
MODEL_DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir base2new/test_new "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
[ -f "$MODEL_DIR/VLPromptLearner/checkpoint" ] || die "no teacher run at $MODEL_DIR: run scripts/teacher/base2new_train.sh $DATASET $SEED first"
read -r -a LOAD <<<"$(load_epoch_args "$MODEL_DIR")"
BACKBONE="${TEACHER_NAME:-}" TEACHER_NAME="" common_opts PROMPTSRC
echo "Evaluating the $TRAINER teacher of $MODEL_DIR on the novel classes of $DATASET -> $DIR"
train_py "$DATASET" "$DIR" \
    --model-dir "$MODEL_DIR" \
    "${LOAD[@]}" \
    --eval-only \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES new \
    TRAINER.MODAL base2novel
