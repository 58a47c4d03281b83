#!/usr/bin/env bash
# CoOp base-to-novel: learn the context on the 16-shot base classes of DATASET (SEED), then evaluate the base classes.
# Usage: DATA=/path/to/datasets bash scripts/coop/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/CoOp/<cfg>/seed<S> (finished runs are skipped, interrupted
# ones resume). CFG defaults to vit_b16_ctxv1 (vit_b16_ep50_ctxv1 for imagenet), CoCoOp's CoOp baseline; other knobs:
# SHOTS, BACKBONE, EXTRA_OPTS (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" coop base2new_train "$@"
