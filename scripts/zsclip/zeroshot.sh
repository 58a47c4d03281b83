#!/usr/bin/env bash
# Zero-shot CLIP on all classes of DATASET (no training), CoOp's zeroshot.sh.
# Usage: DATA=/path/to/datasets bash scripts/zsclip/zeroshot.sh <dataset> [cfg]
#   cfg (configs/trainers/ZeroshotCLIP/): vit_b16 (single template, default), vit_b16_ensemble (CLIP's per-dataset
#   prompt ensemble), vit_b16_select (CoOp's ZeroshotCLIP2 set), vit_b32, vit_b32_ensemble.
# Output: $OUTPUT_ROOT/ZeroshotCLIP/<cfg>/<dataset> (skipped when finished). BACKBONE, EXTRA_OPTS: scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh

[ $# -eq 1 ] || [ $# -eq 2 ] || die "usage: bash scripts/zsclip/zeroshot.sh <dataset> [cfg]"
DATASET=$1
CFG=${2:-vit_b16}
TRAINER=ZeroshotCLIP
SEED=""  # train.py's default seed (zero-shot evaluation is deterministic)

require_data
dataset_name "$DATASET" >/dev/null
[ -f "configs/trainers/$TRAINER/$CFG.yaml" ] || die "no config configs/trainers/$TRAINER/$CFG.yaml"
DIR="$OUTPUT_ROOT/$TRAINER/$CFG/$DATASET"
TEACHER_NAME="" common_opts ZSCLIP
echo "Zero-shot CLIP ($CFG) on $DATASET -> $DIR"
train_py "$DATASET" "$DIR" \
    --eval-only
