#!/usr/bin/env bash
# PETR+X domain generalisation: scripts/petr_x/xd.sh with TRAINER.MODAL dg on a DG target of SOURCE.
# Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/petr_x/dg.sh <x> <target> <seed> X_RUN_DIR
# x: coop|kgcoop|cocoop|maple|ivlp|clip_adapter|promptsrc; target (of imagenet):
# imagenetv2|imagenet_sketch|imagenet_a|imagenet_r.
# Output: $OUTPUT_ROOT/dg/train/<target>/shots_<SHOTS>/PETRX/<CFG>_<x>/seed<S>.
exec bash "$(dirname "$0")/../unit.sh" "$0" petr_x dg "$@"
