#!/usr/bin/env bash
# CoCoOp base-to-novel: learn the context and meta-net on the 16-shot base classes of DATASET (SEED), then test them.
# Usage: DATA=/path/to/datasets bash scripts/cocoop/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/CoCoOp/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16_c4_ep10_batch1_ctxv1; other knobs: SHOTS, BACKBONE, EXTRA_OPTS
# (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" cocoop base2new_train "$@"
