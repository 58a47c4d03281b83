#!/usr/bin/env bash
# Zero-shot CLIP base-to-novel: evaluate the base and the novel classes of DATASET (no training).
# Usage: DATA=/path/to/datasets [CFG=vit_b16_ensemble] bash scripts/zsclip/base2new_test.sh <dataset> [seed]
# Outputs (the trees parse_test_res pairs for every method; zero-shot is deterministic, so seed defaults to 1):
#   base:  $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_0/ZeroshotCLIP/<cfg>/seed<S>
#   novel: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_0/ZeroshotCLIP/<cfg>/seed<S>
# CFG: vit_b16 (single template, default; CoCoOp's "CLIP" row) or vit_b16_ensemble (CLIP's per-dataset ensemble,
# PETR+CoOp's unseen branch). Finished runs are skipped. BACKBONE, EXTRA_OPTS: scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 1 ] || [ $# -eq 2 ] || die "usage: bash scripts/zsclip/base2new_test.sh <dataset> [seed]"
DATASET=$1
SEED=${2:-1}
TRAINER=ZeroshotCLIP
CFG=${CFG:-vit_b16}

require_data
dataset_name "$DATASET" >/dev/null
[ -f "configs/trainers/$TRAINER/$CFG.yaml" ] || die "no config configs/trainers/$TRAINER/$CFG.yaml"
TEACHER_NAME="" common_opts ZSCLIP
for PART in base new; do
    if [ "$PART" = base ]; then TREE=base2new/train_base; else TREE=base2new/test_new; fi
    DIR=$(run_dir "$TREE" "$DATASET" 0 "$TRAINER" "$CFG" "$SEED")
    echo "Zero-shot CLIP ($CFG) on the $PART classes of $DATASET -> $DIR"
    train_py "$DATASET" "$DIR" \
        --eval-only \
        DATASET.SUBSAMPLE_CLASSES "$PART"
done
