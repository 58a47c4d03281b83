#!/usr/bin/env bash
# IVLP cross-dataset: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on every class of DATASET.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/ivlp/xd_test.sh caltech101 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_16/IVLP/<cfg>/seed<S> (skipped when finished).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/common.sh
source scripts/prompt_learners.sh

TRAINER=IVLP
CFG=${CFG:-vit_b16_c2_ep20_batch4_4+4ctx}
xd_test "$@"
