#!/usr/bin/env bash
# PromptKD cross-dataset / domain generalisation without re-distilling: evaluate the SOURCE-distilled student
# (scripts/promptkd/xd_train.sh <SOURCE> SEED) on DATASET, with the teacher's text features for DATASET's classes.
# DATASET may be a cross-dataset target or a DG target of SOURCE (imagenet: imagenetv2, imagenet_sketch, imagenet_a,
# imagenet_r; demonet: demonetv2, demonet_sketch, demonet_a, demonet_r), which is evaluated with TRAINER.MODAL dg.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \
#            bash scripts/promptkd/xd_test.sh eurosat 1
# Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_<SHOTS>/PromptKD/<cfg>/seed<S> (skipped when finished).
exec bash "$(dirname "$0")/../unit.sh" "$0" promptkd xd_test "$@"
