#!/usr/bin/env bash
# PETR cross-dataset: re-evaluate the model of xd_train.sh (same TARGET, SEED, SOURCE, SHOTS) on TARGET's test set with
# its saved router, e.g. with another router: EXTRA_OPTS="TRAINER.PETR.ROUTER energy".
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \
#            bash scripts/petr/xd_test.sh eurosat 1
# Output: $OUTPUT_ROOT/xd/test/<target>/shots_<SHOTS>/PETR/<cfg>/seed<S>.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr xd_test "$@"
