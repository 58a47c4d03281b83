#!/usr/bin/env bash
# CoCoOp cross-dataset: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on every class of DATASET.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/cocoop/xd_test.sh caltech101 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_16/CoCoOp/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../prompt_learners.sh" "$0" CoCoOp vit_b16_c4_ep10_batch1_ctxv1 xd_test "$@"
