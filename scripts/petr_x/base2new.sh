#!/usr/bin/env bash
# PETR+X base-to-novel: PETR's training-free routing on a finished base-to-novel run of prompt learner X. θ_s = X's
# prediction over all classes, θ_u = the dataset's hand-crafted prompt ensemble; the router is fitted on X's SHOTS-shot
# base train images (same SEED), then the base classes and the novel classes are evaluated. Nothing is trained.
# Usage: DATA=/path/to/datasets bash scripts/petr_x/base2new.sh <coop|cocoop|maple|ivlp|promptsrc> <dataset> <seed>
#            [X_RUN_DIR]
# X_RUN_DIR: the folder of X's run, ours or upstream's (Dassl checkpoints in prompt_learner/, MultiModalPromptLearner/
# or VLPromptLearner/); default: the folder of X's base-to-novel script,
# $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/<X>/<X_CFG>/seed<S> with X_CFG vit_b16_ctxv1 for coop
# (vit_b16_ep50_ctxv1 on imagenet; scripts/coop/base2new_train.sh), the default CFG of scripts/<x>/base2new_train.sh for
# cocoop, maple and ivlp, and vit_b16_c2_ep20_batch4_4+4ctx for promptsrc (scripts/teacher/base2new_train.sh with that
# CFG and TEACHER_NAME=ViT-B/16). TUNED_LOAD_EPOCH picks X's epoch (default: the last saved).
# Outputs: $OUTPUT_ROOT/base2new/{train_base,test_new}/<dataset>/shots_16/PETRX/<CFG>_<x>/seed<S> (train.py skips a
# finished run of the same config). CFG (default vit_b16: one config for every X), SHOTS, BACKBONE and EXTRA_OPTS as in
# docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_x base2new "$@"
