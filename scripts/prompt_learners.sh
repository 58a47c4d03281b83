# The unit commands of the prompt-learner baselines (CoCoOp, MaPLe, IVLP): base-to-novel training and novel-class
# test, and the cross-dataset / domain-generalisation runs (train on SOURCE, evaluate elsewhere without training).
# Sourced by scripts/<method>/*.sh after scripts/common.sh; they set TRAINER and CFG and pass their arguments on.
# Layout (docs/ARCHITECTURE.md): base2new/{train_base,test_new}/<dataset>/shots_<SHOTS>/<TRAINER>/<CFG>/seed<S>;
# xd/train/<source>/..., xd/test/<target>/... and dg/test/<target>/... for the transfer runs.

# base2new_train DATASET SEED: train on the SHOTS-shot (default 16) base classes of DATASET, then test them.
base2new_train() {
    [ $# -eq 2 ] || die "usage: bash $0 <dataset> <seed>"
    DATASET=$1
    SEED=$2
    SHOTS=${SHOTS:-16}
    require_data
    dataset_name "$DATASET" >/dev/null
    local dir
    dir=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    skip_if_finished "$dir"
    TEACHER_NAME="" common_opts ""
    echo "Training $TRAINER on the base classes of $DATASET (seed $SEED) -> $dir"
    train_py "$DATASET" "$dir" \
        DATASET.NUM_SHOTS "$SHOTS" \
        DATASET.SUBSAMPLE_CLASSES base
}

# base2new_test DATASET SEED: evaluate the model of base2new_train (same DATASET, SEED, SHOTS, CFG) on the novel
# classes; the loaded epoch is model-best.pth.tar when the run kept one, else its last (or LOAD_EPOCH).
base2new_test() {
    [ $# -eq 2 ] || die "usage: bash $0 <dataset> <seed>"
    DATASET=$1
    SEED=$2
    SHOTS=${SHOTS:-16}
    require_data
    dataset_name "$DATASET" >/dev/null
    local model_dir dir
    model_dir=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    dir=$(run_dir base2new/test_new "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    run_finished "$model_dir" ||
        die "no finished training run in $model_dir: run bash ${0%test.sh}train.sh $DATASET $SEED"
    skip_if_finished "$dir"
    eval_args "$model_dir"
    TEACHER_NAME="" common_opts ""
    echo "Evaluating $TRAINER on the novel classes of $DATASET (seed $SEED) -> $dir"
    train_py "$DATASET" "$dir" \
        "${EVAL_ARGS[@]}" \
        DATASET.NUM_SHOTS "$SHOTS" \
        DATASET.SUBSAMPLE_CLASSES new
}

# xd_train SEED: train on the SHOTS-shot (default 16) SOURCE dataset (default imagenet), all classes, and test it.
xd_train() {
    [ $# -eq 1 ] || die "usage: [SOURCE=imagenet] bash $0 <seed>"
    SEED=$1
    SHOTS=${SHOTS:-16}
    require_data
    xd_source
    local dir
    dir=$(run_dir xd/train "$SOURCE" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    skip_if_finished "$dir"
    TEACHER_NAME="" common_opts ""
    echo "Training $TRAINER on $SHOTS shots of $SOURCE_NAME, all classes (seed $SEED) -> $dir"
    train_py "$SOURCE" "$dir" \
        DATASET.NUM_SHOTS "$SHOTS" \
        DATASET.SUBSAMPLE_CLASSES all
}

# xd_test DATASET SEED: evaluate the SOURCE model of xd_train (same SEED, SHOTS, CFG) on every class of DATASET's
# test set, without training; the output goes under $ROLE_DIR/test (xd, or dg for the DG targets).
xd_test() {
    [ $# -eq 2 ] || die "usage: [SOURCE=imagenet] bash $0 <dataset> <seed>"
    DATASET=$1
    SEED=$2
    SHOTS=${SHOTS:-16}
    require_data
    dataset_name "$DATASET" >/dev/null
    xd_source
    local model_dir dir
    model_dir=$(run_dir xd/train "$SOURCE" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    dir=$(run_dir "${ROLE_DIR:-xd}/test" "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
    run_finished "$model_dir" || die "no finished $SOURCE_NAME run in $model_dir: run SOURCE=$SOURCE bash \
$(dirname "$0")/xd_train.sh $SEED"
    skip_if_finished "$dir"
    eval_args "$model_dir"
    TEACHER_NAME="" common_opts ""
    echo "Evaluating the $SOURCE_NAME-trained $TRAINER on $DATASET (seed $SEED) -> $dir"
    train_py "$DATASET" "$dir" \
        "${EVAL_ARGS[@]}" \
        DATASET.SUBSAMPLE_CLASSES all
}
