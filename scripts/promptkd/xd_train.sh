#!/usr/bin/env bash
# PromptKD cross-dataset (upstream protocol, transductive): distil the student on DATASET's train split (all classes,
# unlabelled) from the SOURCE-trained teacher and evaluate on DATASET's test set. `xd_train.sh <SOURCE>` (e.g.
# `xd_train.sh imagenet`) gives the source-distilled student that xd_test.sh evaluates on other datasets.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \
#            bash scripts/promptkd/xd_train.sh eurosat 1
#   SOURCE  dataset the teacher was trained on (<TEACHER_DIR>/<source DATASET.NAME>-xd; default imagenet)
#   SHOTS   train images per class (default 0: every train image)
# α = 1000 unless KD_WEIGHT is set (upstream xd_train.sh).
# Output: $OUTPUT_ROOT/xd/train/<dataset>/shots_<SHOTS>/PromptKD/<cfg>/seed<S>.
exec bash "$(dirname "$0")/../unit.sh" "$0" promptkd xd_train "$@"
