#!/usr/bin/env bash
# PETR+CoOp base-to-novel: evaluate the run of base2new_train.sh (same DATASET, SEED) on the novel classes, with
# the CoOp context and the router saved in its run folder.
# Usage: DATA=/path/to/datasets bash scripts/petr_coop/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/PETRCoOp/<cfg>/seed<S> (skipped when finished).
# CFG=<cfg>_plugin evaluates a plug-in run of plugin.sh instead (plugin.sh does this itself).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 2 ] || die "usage: bash scripts/petr_coop/base2new_test.sh <dataset> <seed>"
DATASET=$1
SEED=$2
TRAINER=PETRCoOp
if [ "$DATASET" = imagenet ]; then CFG=${CFG:-vit_b16_ep50_ctxv1}; else CFG=${CFG:-vit_b16_ctxv1}; fi
SHOTS=${SHOTS:-16}

require_data
dataset_name "$DATASET" >/dev/null
MODEL_DIR=$(run_dir base2new/train_base "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
DIR=$(run_dir base2new/test_new "$DATASET" "$SHOTS" "$TRAINER" "$CFG" "$SEED")
run_finished "$MODEL_DIR" || die "no finished run in $MODEL_DIR: run scripts/petr_coop/base2new_train.sh \
$DATASET $SEED (or plugin.sh for a CoOp run)"
eval_args "$MODEL_DIR"
TEACHER_NAME="" common_opts PETRCOOP
echo "Evaluating $TRAINER on the novel classes of $DATASET (seed $SEED) -> $DIR"
CFG=${CFG%_plugin}  # a plug-in run (folder <cfg>_plugin) was made with the CoOp config <cfg>
train_py "$DATASET" "$DIR" \
    "${EVAL_ARGS[@]}" \
    DATASET.NUM_SHOTS "$SHOTS" \
    DATASET.SUBSAMPLE_CLASSES new \
    TRAINER.MODAL base2novel
