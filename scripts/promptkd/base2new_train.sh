#!/usr/bin/env bash
# PromptKD base-to-novel: distil the student on every train image of DATASET (all classes, labels unused; SHOTS per
# class when set) from the teacher, then evaluate on the base classes.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#        bash scripts/promptkd/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_<SHOTS>/PromptKD/<cfg>/seed<S> (SHOTS default 0; skipped when
# finished; resumes).
# Other environment knobs: docs/usage.md (KD_WEIGHT, BACKBONE, TEACHER_NAME, EXTRA_OPTS, CFG).
exec bash "$(dirname "$0")/../unit.sh" "$0" promptkd base2new_train "$@"
