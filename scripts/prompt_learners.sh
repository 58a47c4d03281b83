#!/usr/bin/env bash
# The unit commands of the prompt-learner baselines (CoCoOp, MaPLe, IVLP), run for scripts/<method>/*.sh:
#   bash scripts/prompt_learners.sh <calling script> <TRAINER> <default CFG> <command> [ARG ...]
# base2new_train DATASET SEED, base2new_test DATASET SEED (novel classes), xd_train SEED (on SOURCE), xd_test
# DATASET SEED and dg_test TARGET SEED (the SOURCE model evaluated without training). CFG in the environment
# overrides the default config, SHOTS (default 16) the training images per class; the other knobs are those of
# scripts/common.sh.
# Layout (docs/ARCHITECTURE.md): base2new/{train_base,test_new}/<dataset>/shots_<SHOTS>/<TRAINER>/<CFG>/seed<S>;
# xd/train/<source>/..., xd/test/<target>/... and dg/test/<target>/... for the transfer runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

SCRIPT=$1
TRAINER=$2
CFG=${CFG:-$3}
COMMAND=$4
shift 4
SHOTS=${SHOTS:-16}

# check_call N USAGE ARG...: ends with the usage line unless there are N arguments, then requires DATA.
check_call() {
    local count=$1 usage=$2
    shift 2
    [ $# -eq "$count" ] || die "usage: $usage"
    require_data
}

# unit ROLE DATASET MODEL_DIR WHAT [KEY VALUE ...]: the run of $TRAINER with $CFG on DATASET in
# $OUTPUT_ROOT/ROLE/<dataset>/... (skipped when finished): training, or with MODEL_DIR the evaluation of that run.
unit() {
    local role=$1 dataset=$2 model_dir=$3 what=$4 dir
    shift 4
    dir=$(run_dir "$role" "$dataset" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    EVAL_ARGS=()
    if [ -n "$model_dir" ]; then
        eval_args "$model_dir"
    fi
    TEACHER_NAME="" common_opts ""
    echo "$what -> $dir"
    train_py "$dataset" "$dir" "${EVAL_ARGS[@]}" "$@"
}

# base2new_train DATASET SEED: train on the base classes of DATASET, then test them.
base2new_train() {
    check_call 2 "bash $SCRIPT <dataset> <seed>" "$@"
    DATASET=$1
    SEED=$2
    dataset_name "$DATASET" >/dev/null
    unit base2new/train_base "$DATASET" "" "Training $TRAINER on the base classes of $DATASET (seed $SEED)" \
        DATASET.NUM_SHOTS "$SHOTS" DATASET.SUBSAMPLE_CLASSES base
}

# base2new_test DATASET SEED: evaluate the model of base2new_train (same DATASET, SEED, SHOTS, CFG) on the novel
# classes; the loaded epoch is model-best.pth.tar when the run kept one, else its last (or LOAD_EPOCH).
base2new_test() {
    check_call 2 "bash $SCRIPT <dataset> <seed>" "$@"
    DATASET=$1
    SEED=$2
    dataset_name "$DATASET" >/dev/null
    local model_dir
    model_dir=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    run_finished "$model_dir" ||
        die "no finished training run in $model_dir: run bash ${SCRIPT%test.sh}train.sh $DATASET $SEED"
    unit base2new/test_new "$DATASET" "$model_dir" \
        "Evaluating $TRAINER on the novel classes of $DATASET (seed $SEED)" \
        DATASET.NUM_SHOTS "$SHOTS" DATASET.SUBSAMPLE_CLASSES new
}

# xd_train SEED: train on SOURCE (default imagenet), all classes, and test it.
xd_train() {
    check_call 1 "[SOURCE=imagenet] bash $SCRIPT <seed>" "$@"
    SEED=$1
    xd_source
    unit xd/train "$SOURCE" "" "Training $TRAINER on $SHOTS shots of $SOURCE_NAME, all classes (seed $SEED)" \
        DATASET.NUM_SHOTS "$SHOTS" DATASET.SUBSAMPLE_CLASSES all
}

# xd_test DATASET SEED: evaluate the SOURCE model of xd_train (same SEED, SHOTS, CFG) on every class of DATASET's
# test set, without training; the output goes under $ROLE_DIR/test (xd, or dg for the DG targets).
xd_test() {
    check_call 2 "[SOURCE=imagenet] bash $SCRIPT <dataset> <seed>" "$@"
    DATASET=$1
    SEED=$2
    dataset_name "$DATASET" >/dev/null
    xd_source
    local model_dir
    model_dir=$(run_dir xd/train "$SOURCE" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    run_finished "$model_dir" ||
        die "no finished $SOURCE_NAME run in $model_dir: run SOURCE=$SOURCE bash $(dirname "$SCRIPT")/xd_train.sh $SEED"
    unit "${ROLE_DIR:-xd}/test" "$DATASET" "$model_dir" \
        "Evaluating the $SOURCE_NAME-trained $TRAINER on $DATASET (seed $SEED)" DATASET.SUBSAMPLE_CLASSES all
}

# dg_test TARGET SEED: xd_test on a domain-generalisation target of SOURCE, written under dg/test.
dg_test() {
    require_dg_target "$SCRIPT" "${1:-}"
    ROLE_DIR=dg xd_test "$@"
}

"$COMMAND" "$@"
