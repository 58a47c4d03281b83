#!/usr/bin/env bash
# MaPLe cross-dataset / domain generalisation, step 1: learn the coupled prompts on 16-shot SOURCE (default imagenet),
# all classes; xd_test.sh / dg_test.sh then evaluate the model on other datasets without training.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/maple/xd_train.sh 1
# Output: $OUTPUT_ROOT/xd/train/<source>/shots_16/MaPLe/<cfg>/seed<S>. CFG defaults to
# vit_b16_c2_ep5_batch4_2ctx_cross_datasets (its cross-dataset config; configs/trainers/MaPLe/ has its settings); SHOTS,
# BACKBONE, EXTRA_OPTS as in docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" maple xd_train "$@"
