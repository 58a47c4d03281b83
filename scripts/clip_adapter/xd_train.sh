#!/usr/bin/env bash
# CLIP-Adapter cross-dataset / domain generalisation, step 1: learn the feature adapter on the image features on 16-shot
# SOURCE (default imagenet), all classes; xd_test.sh / dg_test.sh then evaluate the model on other datasets without
# training.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/clip_adapter/xd_train.sh 1
# Output: $OUTPUT_ROOT/xd/train/<source>/shots_16/CLIPAdapter/<cfg>/seed<S>. CFG defaults to vit_b16 (the base-to-novel
# config: no separate cross-dataset config ships for it); SHOTS, BACKBONE, EXTRA_OPTS as in docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" clip_adapter xd_train "$@"
