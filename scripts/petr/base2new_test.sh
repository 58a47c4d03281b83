#!/usr/bin/env bash
# PETR base-to-novel: evaluate the model trained by base2new_train.sh (same DATASET, SEED, SHOTS) on the novel classes,
# with the router saved in its run folder.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/petr/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_<SHOTS>/PETR/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../unit.sh" "$0" petr base2new_test "$@"
