#!/usr/bin/env bash
# PETR cross-dataset: θ_s learns labelled train images of the SOURCE dataset (its classes), θ_u the unlabelled train
# split of TARGET, the router is fitted on SOURCE train images scored over TARGET's classes; evaluated on TARGET's test
# set.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#            bash scripts/petr/xd_train.sh eurosat 1
#   SOURCE  source dataset short name (default imagenet; the demo world's is demonet)
#   SHOTS   train images per class of source and target (default 0: every train image)
# The teacher is the SOURCE-trained one (<TEACHER_DIR>/<source DATASET.NAME>-xd, e.g. ImageNet-xd, as written by
# scripts/teacher/xd_train.sh); α = 1000 unless KD_WEIGHT is set (PromptKD xd).
# Output: $OUTPUT_ROOT/xd/train/<target>/shots_<SHOTS>/PETR/<cfg>/seed<S>.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr xd_train "$@"
