#!/usr/bin/env bash
# IVLP base-to-novel: learn the vision and language prompts on the 16-shot base classes of DATASET (SEED), then test
# them.
# Usage: DATA=/path/to/datasets bash scripts/ivlp/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/IVLP/<cfg>/seed<S> (finished runs are skipped, interrupted
# ones resume). CFG defaults to vit_b16_c2_ep20_batch4_4+4ctx; other knobs: SHOTS, BACKBONE, EXTRA_OPTS (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" ivlp base2new_train "$@"
