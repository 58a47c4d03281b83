#!/usr/bin/env bash
# CLIP-Adapter base-to-novel: learn the feature adapter on the image features on the 16-shot base classes of DATASET
# (SEED), then test them.
# Usage: DATA=/path/to/datasets bash scripts/clip_adapter/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/CLIPAdapter/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16; other knobs: SHOTS, BACKBONE, EXTRA_OPTS (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" clip_adapter base2new_train "$@"
