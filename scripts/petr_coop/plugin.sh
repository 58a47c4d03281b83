#!/usr/bin/env bash
# PETR+CoOp as a training-free plug-in: take the CoOp context of an existing base-to-novel CoOp run (no retraining), fit
# the router on the 16-shot base train images and evaluate base and novel classes.
# Usage: DATA=/path/to/datasets bash scripts/petr_coop/plugin.sh eurosat 1 [COOP_RUN_DIR]
# COOP_RUN_DIR defaults to scripts/coop/base2new_train.sh's folder,
# $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/CoOp/<cfg>/seed<S>; COOP_LOAD_EPOCH picks its epoch (default: the
# last saved). Outputs: base2new/{train_base,test_new}/<dataset>/shots_16/PETRCoOp/<cfg>_plugin/seed<S> (skipped when
# finished). CFG (default vit_b16_ctxv1, vit_b16_ep50_ctxv1 for imagenet) must match the CoOp run's prompt settings;
# SHOTS, BACKBONE and EXTRA_OPTS as in docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_coop plugin "$@"
