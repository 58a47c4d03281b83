#!/usr/bin/env bash
# Zero-shot CLIP on all classes of DATASET (no training), CoOp's zeroshot.sh.
# Usage: DATA=/path/to/datasets bash scripts/zsclip/zeroshot.sh <dataset> [cfg]
#   cfg (configs/trainers/ZeroshotCLIP/): vit_b16 (single template, default), vit_b16_ensemble (CLIP's per-dataset
# prompt ensemble), vit_b16_select (CoOp's ZeroshotCLIP2 set), vit_b32, vit_b32_ensemble.
# Output: $OUTPUT_ROOT/ZeroshotCLIP/<cfg>/<dataset> (skipped when finished). BACKBONE, EXTRA_OPTS: docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" zsclip zeroshot "$@"
