#!/usr/bin/env bash
# CLIP-Adapter cross-dataset: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on every class of DATASET.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/clip_adapter/xd_test.sh caltech101 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_16/CLIPAdapter/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../unit.sh" "$0" clip_adapter xd_test "$@"
