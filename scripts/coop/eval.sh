#!/usr/bin/env bash
# CoOp cross-dataset / domain generalisation: evaluate the 16-shot ImageNet contexts of main.sh (seeds in SEEDS,
# default 1 2 3) on DATASET, e.g. imagenetv2, imagenet_sketch, imagenet_a, imagenet_r or caltech101.
# Usage: DATA=/path/to/datasets bash scripts/coop/eval.sh <dataset> <cfg>      (cfg: e.g. vit_b16_ep50)
# Model: $OUTPUT_ROOT/imagenet/CoOp/<cfg>_16shots/nctx<NCTX>_csc<CSC>_ctp<CTP>/seed<S> (NCTX 16, CSC False, CTP end
# unless set; CSC contexts cannot change classes). Output: $OUTPUT_ROOT/evaluation/CoOp/<cfg>_16shots/
# nctx.._csc.._ctp../<dataset>/seed<S>. The loaded epoch is the model's last saved one (or LOAD_EPOCH).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/coop/eval.sh <dataset> <cfg>"
DATASET=$1
CFG=$2
NCTX=${NCTX:-16}
CSC=${CSC:-False}
CTP=${CTP:-end}
TRAINER=CoOp
SEEDS=${SEEDS:-1 2 3}
TAIL="${CFG}_16shots/nctx${NCTX}_csc${CSC}_ctp${CTP}"

require_data
dataset_name "$DATASET" >/dev/null
TEACHER_NAME="" common_opts COOP
for SEED in $SEEDS; do
    MODEL_DIR="$OUTPUT_ROOT/imagenet/$TRAINER/$TAIL/seed$SEED"
    DIR="$OUTPUT_ROOT/evaluation/$TRAINER/$TAIL/$DATASET/seed$SEED"
    run_finished "$MODEL_DIR" || die "no finished ImageNet run in $MODEL_DIR: run \
scripts/coop/main.sh imagenet $CFG $CTP $NCTX 16 $CSC"
    eval_args "$MODEL_DIR"
    echo "Evaluating the ImageNet context of $MODEL_DIR on $DATASET -> $DIR"
    train_py "$DATASET" "$DIR" \
        "${EVAL_ARGS[@]}" \
        TRAINER.COOP.N_CTX "$NCTX" \
        TRAINER.COOP.CSC "$CSC" \
        TRAINER.COOP.CLASS_TOKEN_POSITION "$CTP"
done
