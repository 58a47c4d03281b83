#!/usr/bin/env bash
# CoOp few-shot (all classes), CoOp's main.sh: train on SHOTS images per class for each seed in SEEDS (default 1 2 3).
# Usage: DATA=/path/to/datasets bash scripts/coop/main.sh <dataset> <cfg> <ctp> <nctx> <shots> <csc>
#   e.g. bash scripts/coop/main.sh caltech101 vit_b16 end 16 16 False   (imagenet: use the *_ep50 configs)
# Output: $OUTPUT_ROOT/<dataset>/CoOp/<cfg>_<shots>shots/nctx<nctx>_csc<csc>_ctp<ctp>/seed<S> (finished runs are
# skipped, interrupted ones resume). A *_ctxv1 config sets the context from "a photo of a" (4 tokens, no CSC) and
# overrides nctx. BACKBONE, EXTRA_OPTS as in docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" coop main "$@"
