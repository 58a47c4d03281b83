#!/usr/bin/env bash
# PromptKD base-to-novel: evaluate the student of base2new_train.sh (same DATASET, SEED, SHOTS) on the novel classes.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/promptkd/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_<SHOTS>/PromptKD/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../unit.sh" "$0" promptkd base2new_test "$@"
