#!/usr/bin/env bash
# PETR domain generalisation: θ_s learns labelled train images of the SOURCE dataset, θ_u the unlabelled images of
# TARGET (a DG target of SOURCE, imagenet: imagenetv2, imagenet_sketch, imagenet_a, imagenet_r; demonet: demonetv2,
# demonet_sketch, demonet_a, demonet_r; their test images — transductive, as PromptKD), router from SOURCE train images
# scored over TARGET's classes; evaluated on TARGET.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#            bash scripts/petr/dg_train.sh imagenet_a 1
# Output: $OUTPUT_ROOT/dg/train/<target>/shots_<SHOTS>/PETR/<cfg>/seed<S>.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr dg_train "$@"
