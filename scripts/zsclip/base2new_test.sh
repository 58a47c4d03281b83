#!/usr/bin/env bash
# Zero-shot CLIP base-to-novel: evaluate the base and the novel classes of DATASET (no training).
# Usage: DATA=/path/to/datasets [CFG=vit_b16_ensemble] bash scripts/zsclip/base2new_test.sh <dataset> [seed]
# Outputs (the trees parse_test_res pairs for every method; zero-shot is deterministic, so seed defaults to 1):
#   base:  $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_0/ZeroshotCLIP/<cfg>/seed<S>
#   novel: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_0/ZeroshotCLIP/<cfg>/seed<S>
# CFG: vit_b16 (single template, default; CoCoOp's "CLIP" row) or vit_b16_ensemble (CLIP's per-dataset ensemble,
# PETR+CoOp's unseen branch). Finished runs are skipped. BACKBONE, EXTRA_OPTS: docs/usage.md.
exec bash "$(dirname "$0")/../unit.sh" "$0" zsclip base2new_test "$@"
