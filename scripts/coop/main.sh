#!/usr/bin/env bash
# CoOp few-shot (all classes), CoOp's main.sh: train on SHOTS images per class for each seed in SEEDS (default 1 2 3).
# Usage: DATA=/path/to/datasets bash scripts/coop/main.sh <dataset> <cfg> <ctp> <nctx> <shots> <csc>
#   e.g. bash scripts/coop/main.sh caltech101 vit_b16 end 16 16 False   (imagenet: use the *_ep50 configs)
# Output: $OUTPUT_ROOT/<dataset>/CoOp/<cfg>_<shots>shots/nctx<nctx>_csc<csc>_ctp<ctp>/seed<S> (finished runs are
# skipped, interrupted ones resume). A *_ctxv1 config sets the context from "a photo of a" (4 tokens, no CSC) and
# overrides nctx. BACKBONE, EXTRA_OPTS as in scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 6 ] || die "usage: bash scripts/coop/main.sh <dataset> <cfg> <ctp: end|middle|front> <nctx> <shots> <csc: True|False>"
DATASET=$1
CFG=$2
CTP=$3
NCTX=$4
SHOTS=$5
CSC=$6
TRAINER=CoOp
SEEDS=${SEEDS:-1 2 3}

require_data
dataset_name "$DATASET" >/dev/null
[ -f "configs/trainers/$TRAINER/$CFG.yaml" ] || die "no config configs/trainers/$TRAINER/$CFG.yaml"
TEACHER_NAME="" common_opts COOP
for SEED in $SEEDS; do
    DIR="$OUTPUT_ROOT/$DATASET/$TRAINER/${CFG}_${SHOTS}shots/nctx${NCTX}_csc${CSC}_ctp${CTP}/seed$SEED"
    echo "Training $TRAINER on $SHOTS shots of $DATASET (seed $SEED) -> $DIR"
    train_py "$DATASET" "$DIR" \
        TRAINER.COOP.N_CTX "$NCTX" \
        TRAINER.COOP.CSC "$CSC" \
        TRAINER.COOP.CLASS_TOKEN_POSITION "$CTP" \
        DATASET.NUM_SHOTS "$SHOTS"
done
