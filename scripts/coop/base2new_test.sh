#!/usr/bin/env bash
# CoOp base-to-novel: evaluate the context learned by base2new_train.sh (same DATASET, SEED) on the novel classes.
# Usage: DATA=/path/to/datasets bash scripts/coop/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/CoOp/<cfg>/seed<S> (skipped when finished). The loaded epoch
# is the training run's last saved one (its config's MAX_EPOCH: 200, or 50 for imagenet), or LOAD_EPOCH.
# CFG, SHOTS, BACKBONE, EXTRA_OPTS as in base2new_train.sh.
exec bash "$(dirname "$0")/../unit.sh" "$0" coop base2new_test "$@"
