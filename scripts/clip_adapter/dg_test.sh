#!/usr/bin/env bash
# CLIP-Adapter domain generalisation: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on a DG target of SOURCE
# (imagenet: imagenetv2, imagenet_sketch, imagenet_a, imagenet_r; demonet: demonetv2, demonet_sketch, demonet_a,
# demonet_r).
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/clip_adapter/dg_test.sh imagenet_a 1
# Output: $OUTPUT_ROOT/dg/test/<target>/shots_16/CLIPAdapter/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../unit.sh" "$0" clip_adapter dg_test "$@"
