#!/usr/bin/env bash
# PETR+CoOp base-to-novel: learn the CoOp context θ_s on the 16-shot base classes of DATASET (SEED), fit the router on
# those images and evaluate on the base classes (θ_u = the dataset's hand-crafted prompt ensemble).
# Usage: DATA=/path/to/datasets bash scripts/petr_coop/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/PETRCoOp/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). CFG defaults to vit_b16_ctxv1 (vit_b16_ep50_ctxv1 for imagenet, as CoOp); other knobs:
# SHOTS, BACKBONE, EXTRA_OPTS (docs/usage.md). For an existing CoOp run use scripts/petr_coop/plugin.sh instead.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_coop base2new_train "$@"
