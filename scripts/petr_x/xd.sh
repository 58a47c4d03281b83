#!/usr/bin/env bash
# PETR+X cross-dataset: PETR's training-free routing on a finished run of prompt learner X trained on the source
# (ImageNet, SHOTS shots, all classes), evaluated on TARGET. θ_s = X's prediction over the target's classes, θ_u = the
# target's hand-crafted prompt ensemble; the router is fitted on X's training images (the source's SHOTS-shot train
# images of SEED) scored over the target's classes. Nothing is trained.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/petr_x/xd.sh <coop|cocoop|maple|ivlp|promptsrc> <target>
#            <seed> X_RUN_DIR
# X_RUN_DIR: the folder of X's source run, ours or upstream's (e.g. CoOp's main.sh or upstream's
# output/imagenet/<X>/<cfg>_16shots/.../seed<S>); TUNED_LOAD_EPOCH picks its epoch (default: the last saved).
# Output: $OUTPUT_ROOT/xd/train/<target>/shots_<SHOTS>/PETRX/vit_b16_<x>/seed<S> (skipped when finished); SHOTS
# defaults to 16. CFG, BACKBONE and EXTRA_OPTS as in scripts/common.sh; dg.sh runs the same for the DG targets.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 4 ] || die "usage: [SOURCE=imagenet] bash scripts/petr_x/xd.sh <coop|cocoop|maple|ivlp|promptsrc> \
<target dataset> <seed> <x_run_dir>"
TUNED=$1
DATASET=$2
SEED=$3
X_DIR=$4
TRAINER=PETRX
CFG=${CFG:-vit_b16_$TUNED}
SHOTS=${SHOTS:-16}
MODAL=${MODAL:-cross}
ROLE_DIR=${ROLE_DIR:-xd}

require_data
dataset_name "$DATASET" >/dev/null
[ -f "configs/trainers/$TRAINER/$CFG.yaml" ] || die "no config configs/trainers/$TRAINER/$CFG.yaml ('$TUNED' is not \
a prompt learner PETR+X has a config for)"
[ -d "$X_DIR" ] || die "no run at $X_DIR: give the folder of X's run on the source dataset"
xd_source
DIR=$(run_dir "$ROLE_DIR/train" "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
TEACHER_NAME="" common_opts PETRX
echo "PETR+X on $X_DIR ($MODAL: $SOURCE_NAME -> $DATASET): router fit and evaluation (seed $SEED) -> $DIR"
train_py "$DATASET" "$DIR" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES all \
    DATASET.SOURCE_DATASET "$SOURCE_NAME" \
    TRAINER.MODAL "$MODAL" \
    TRAINER.PETRX.TUNED_MODEL_DIR "$X_DIR" \
    TRAINER.PETRX.TUNED_LOAD_EPOCH "${TUNED_LOAD_EPOCH:-0}"
