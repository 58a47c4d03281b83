#!/usr/bin/env bash
# KgCoOp base-to-novel: learn the context near the hand-crafted prompt on the 16-shot base classes of DATASET (SEED),
# then test them.
# Usage: DATA=/path/to/datasets bash scripts/kgcoop/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/KgCoOp/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16_ep100_ctxv1; other knobs: SHOTS, BACKBONE, EXTRA_OPTS
# (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" kgcoop base2new_train "$@"
