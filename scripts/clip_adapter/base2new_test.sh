#!/usr/bin/env bash
# CLIP-Adapter base-to-novel: evaluate the model of base2new_train.sh (same DATASET, SEED, CFG) on the novel classes.
# Usage: DATA=/path/to/datasets bash scripts/clip_adapter/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/CLIPAdapter/<cfg>/seed<S> (skipped when finished). The
# loaded epoch is the training run's last saved one (or LOAD_EPOCH). CFG, SHOTS, BACKBONE, EXTRA_OPTS as in
# base2new_train.sh.
exec bash "$(dirname "$0")/../unit.sh" "$0" clip_adapter base2new_test "$@"
