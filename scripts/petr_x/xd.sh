#!/usr/bin/env bash
# PETR+X cross-dataset: PETR's training-free routing on a finished run of a tuned method X trained on the source
# (ImageNet, SHOTS shots, all classes), evaluated on TARGET. θ_s = X's prediction over the target's classes, θ_u = the
# target's hand-crafted prompt ensemble; the router is fitted on X's training images (the source's SHOTS-shot train
# images of SEED) scored over the target's classes. Nothing is trained.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/petr_x/xd.sh <x> <target> <seed> X_RUN_DIR
# x: coop|kgcoop|cocoop|maple|ivlp|clip_adapter|promptsrc.
# X_RUN_DIR: the folder of X's source run, ours or upstream's (e.g. CoOp's main.sh or upstream's
# output/imagenet/<X>/<cfg>_16shots/.../seed<S>); TUNED_LOAD_EPOCH picks its epoch (default: the last saved).
# Output: $OUTPUT_ROOT/xd/train/<target>/shots_<SHOTS>/PETRX/<CFG>_<x>/seed<S> (skipped when finished); SHOTS defaults
# to 16. CFG, BACKBONE and EXTRA_OPTS as in docs/usage.md; dg.sh runs the same for the DG targets.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_x xd "$@"
