#!/usr/bin/env bash
# MaPLe cross-dataset: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on every class of DATASET.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/maple/xd_test.sh caltech101 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_16/MaPLe/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../prompt_learners.sh" "$0" MaPLe vit_b16_c2_ep5_batch4_2ctx_cross_datasets xd_test "$@"
