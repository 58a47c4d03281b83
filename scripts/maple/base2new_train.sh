#!/usr/bin/env bash
# MaPLe base-to-novel: learn the coupled prompts on the 16-shot base classes of DATASET (SEED), then test them.
# Usage: DATA=/path/to/datasets bash scripts/maple/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/MaPLe/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16_c2_ep5_batch4_2ctx; other knobs: SHOTS, BACKBONE, EXTRA_OPTS
# (scripts/common.sh).
exec bash "$(dirname "$0")/../prompt_learners.sh" "$0" MaPLe vit_b16_c2_ep5_batch4_2ctx base2new_train "$@"
