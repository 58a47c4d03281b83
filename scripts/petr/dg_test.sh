#!/usr/bin/env bash
# PETR domain generalisation: re-evaluate the model of dg_train.sh (same TARGET, SEED, SOURCE, SHOTS) with its saved
# router.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \
#            bash scripts/petr/dg_test.sh imagenet_a 1
# Output: $OUTPUT_ROOT/dg/test/<target>/shots_<SHOTS>/PETR/<cfg>/seed<S>.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr dg_test "$@"
