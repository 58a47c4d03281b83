#!/usr/bin/env bash
# Teacher (PromptSRC on ViT-L/14, PromptKD's recipe): train deep vision+language prompts on the 16-shot base classes
# of DATASET, evaluate on the base classes, write teacher_text_features.pt (all classes) and publish the teacher to
# ${TEACHER_DIR:-teachers}/<DATASET.NAME> for the PromptKD/PETR scripts.
# Usage: DATA=/path/to/datasets bash scripts/teacher/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/PromptSRC/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). Knobs: CFG (default vit_l14_c2_ep20_batch8_4+4ctx), SHOTS, TEACHER_NAME (the teacher's
# CLIP, a model name or weight file), TEACHER_DIR, EXTRA_OPTS (scripts/common.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
source scripts/teacher/publish.sh

[ $# -eq 2 ] || die "usage: bash scripts/teacher/base2new_train.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PromptSRC
CFG=${CFG:-vit_l14_c2_ep20_batch8_4+4ctx}
SHOTS=${SHOTS:-16}

require_data
NAME=$(dataset_name "$DATASET")
DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
BACKBONE="${TEACHER_NAME:-}" TEACHER_NAME="" common_opts PROMPTSRC
echo "Training the $TRAINER teacher on the base classes of $DATASET (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES base \
    TRAINER.MODAL base2novel
publish_teacher "$DIR" "$NAME"
