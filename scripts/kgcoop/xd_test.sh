#!/usr/bin/env bash
# KgCoOp cross-dataset: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on every class of DATASET.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/kgcoop/xd_test.sh caltech101 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_16/KgCoOp/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../unit.sh" "$0" kgcoop xd_test "$@"
