#!/usr/bin/env bash
# PETR+X base-to-novel: PETR's training-free routing on a finished base-to-novel run of a tuned method X. θ_s = X's
# prediction over all classes, θ_u = the dataset's hand-crafted prompt ensemble; the router is fitted on X's SHOTS-shot
# base train images (same SEED), then the base classes and the novel classes are evaluated. Nothing is trained.
# Usage: DATA=/path/to/datasets bash scripts/petr_x/base2new.sh <x> <dataset> <seed> [X_RUN_DIR]
# x: coop|kgcoop|cocoop|maple|ivlp|clip_adapter|promptsrc. X_RUN_DIR: the folder of X's run, ours or upstream's (Dassl
# checkpoints in X's model folder); default: the folder of X's base-to-novel script,
# $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/<X>/<X_CFG>/seed<S>, else the one upstream run in shots_16_*/
# beside it (upstream KgCoOp's script writes shots_16_<W>), X_CFG by default: coop vit_b16_ctxv1 (vit_b16_ep50_ctxv1 on
# imagenet), kgcoop vit_b16_ep100_ctxv1, cocoop vit_b16_c4_ep10_batch1_ctxv1, maple vit_b16_c2_ep5_batch4_2ctx, ivlp
# vit_b16_c2_ep20_batch4_4+4ctx, clip_adapter vit_b16 (vit_b16_ep50 on imagenet), promptsrc
# vit_b16_c2_ep20_batch4_4+4ctx (scripts/teacher/base2new_train.sh with that CFG and the students' CLIP as
# TEACHER_NAME). TUNED_LOAD_EPOCH picks X's epoch (default: the last saved).
# Outputs: $OUTPUT_ROOT/base2new/{train_base,test_new}/<dataset>/shots_16/PETRX/<CFG>_<x>/seed<S> (train.py skips a
# finished run of the same config). CFG (default vit_b16: one config for every X), SHOTS, BACKBONE and EXTRA_OPTS as in
# docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_x base2new "$@"
