#!/usr/bin/env bash
# Cross-dataset / DG teacher (PromptSRC on ViT-L/14, cross-dataset settings: deep prompts 3/3, GPA 6/10): train on
# 16-shot SOURCE (default imagenet), all classes, and publish it to ${TEACHER_DIR:-teachers}/<source DATASET.NAME>-xd
# (ImageNet-xd; DemoNet-xd for SOURCE=demonet) for the xd/dg student scripts.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/teacher/xd_train.sh 1
# Output: $OUTPUT_ROOT/xd/train/<source>/shots_16/PromptSRC/<cfg>/seed<S>. Knobs: CFG (default
# vit_l14_c2_ep20_batch8_4+4ctx_cross_datasets), SOURCE, SHOTS (default 16), TEACHER_NAME, TEACHER_DIR, EXTRA_OPTS
# (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" teacher xd_train "$@"
