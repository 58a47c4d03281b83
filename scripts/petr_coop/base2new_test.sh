#!/usr/bin/env bash
# PETR+CoOp base-to-novel: evaluate the run of base2new_train.sh (same DATASET, SEED) on the novel classes, with the
# CoOp context and the router saved in its run folder.
# Usage: DATA=/path/to/datasets bash scripts/petr_coop/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/PETRCoOp/<cfg>/seed<S> (skipped when finished).
# CFG=<cfg>_plugin evaluates a plug-in run of plugin.sh instead (plugin.sh does this itself).
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_coop base2new_test "$@"
