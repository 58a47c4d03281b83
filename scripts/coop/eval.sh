#!/usr/bin/env bash
# CoOp cross-dataset / domain generalisation: evaluate the 16-shot ImageNet contexts of main.sh (seeds in SEEDS, default
# 1 2 3) on DATASET, e.g. imagenetv2, imagenet_sketch, imagenet_a, imagenet_r or caltech101.
# Usage: DATA=/path/to/datasets bash scripts/coop/eval.sh <dataset> <cfg>      (cfg: e.g. vit_b16_ep50)
# Model: $OUTPUT_ROOT/imagenet/CoOp/<cfg>_16shots/nctx<NCTX>_csc<CSC>_ctp<CTP>/seed<S> (NCTX 16, CSC False, CTP end
# unless set; CSC contexts cannot change classes). Output: $OUTPUT_ROOT/evaluation/CoOp/<cfg>_16shots/
# nctx.._csc.._ctp../<dataset>/seed<S>. The loaded epoch is the model's last saved one (or LOAD_EPOCH).
exec bash "$(dirname "$0")/../unit.sh" "$0" coop eval "$@"
