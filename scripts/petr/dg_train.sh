#!/usr/bin/env bash
# PETR domain generalisation: θ_s learns labelled ImageNet train images, θ_u the unlabelled images of TARGET
# (imagenetv2, imagenet_sketch, imagenet_a, imagenet_r: their test images — transductive, as PromptKD), router from
# ImageNet train images scored over TARGET's classes; evaluated on TARGET.
# Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] bash scripts/petr/dg_train.sh imagenet_a 1
# Output: $OUTPUT_ROOT/dg/train/<target>/shots_0/PETR/<cfg>/seed<S>.
set -euo pipefail
DATASET=${1:-}
case "$DATASET" in
    imagenetv2 | imagenet_sketch | imagenet_a | imagenet_r) ;;
    *) echo "error: usage: bash scripts/petr/dg_train.sh <imagenetv2|imagenet_sketch|imagenet_a|imagenet_r> <seed>" >&2
       exit 1 ;;
esac
MODAL=dg ROLE_DIR=dg exec bash "$(dirname "$0")/xd_train.sh" "$@"
