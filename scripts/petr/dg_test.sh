#!/usr/bin/env bash
# PETR domain generalisation: re-evaluate the model of dg_train.sh (same TARGET, SEED) with its saved router.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/petr/dg_test.sh imagenet_a 1
# Output: $OUTPUT_ROOT/dg/test/<target>/shots_0/PETR/<cfg>/seed<S>.
set -euo pipefail
DATASET=${1:-}
case "$DATASET" in
    imagenetv2 | imagenet_sketch | imagenet_a | imagenet_r) ;;
    *) echo "error: usage: bash scripts/petr/dg_test.sh <imagenetv2|imagenet_sketch|imagenet_a|imagenet_r> <seed>" >&2
       exit 1 ;;
esac
MODAL=dg ROLE_DIR=dg exec bash "$(dirname "$0")/xd_test.sh" "$@"
