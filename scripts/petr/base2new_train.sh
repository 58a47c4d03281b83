#!/usr/bin/env bash
# PETR base-to-novel: train θ_s (labelled base classes) and θ_u (unlabelled novel classes) on DATASET's train images
# (SHOTS per class when set) with SEED, fit the router, and evaluate on the base classes.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] bash scripts/petr/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_<SHOTS>/PETR/<cfg>/seed<S> (SHOTS default 0; finished runs
# are skipped, interrupted ones resume). Other environment knobs: docs/usage.md (KD_WEIGHT, BACKBONE, TEACHER_NAME,
# EXTRA_OPTS, CFG).
exec bash "$(dirname "$0")/../unit.sh" "$0" petr base2new_train "$@"
