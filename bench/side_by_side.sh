#!/usr/bin/env bash
# Upstream PromptKD's student step next to ours, in one run sized for a short GPU call (each of our trainers built
# once per class count, nothing compiled; not yet timed on a GPU): upstream's own code as a child process (fp16, as
# upstream) and our PromptKD and PETR (fp16, then bf16 + teacher cache + CUDA graph) on the same random-weight
# ViT-B/16 student / ViT-L/14 teacher files, batch 8 and 64, 10 and 1000 classes; then evaluation images/s and peak
# GPU memory. Prints one ratio table headed by the card and torch version; writes every number to
# $OUT_DIR/side_by_side.json (default ./output/bench). Needs upstream's checkout: bash bench/upstream_setup.sh
# Usage: bash bench/side_by_side.sh [more bench/side_by_side.py options]
#        DEVICE=cpu MODEL=tiny_upstream bash bench/side_by_side.sh     (the CPU dry run, about a minute: 10
#        and 100 classes, 2 timed steps after 1; upstream's fp16 step on a CPU takes seconds at 1000 classes)
# BATCHES, CLASSES, ITERS, WARMUP, EVAL_IMAGES, UPSTREAM_DIR and OUT_DIR override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
DEVICE=${DEVICE:-cuda}
OUT_DIR=${OUT_DIR:-output/bench}
if [ "$DEVICE" = cpu ]; then
    CLASSES=${CLASSES:-10 100} ITERS=${ITERS:-2} WARMUP=${WARMUP:-1} EVAL_IMAGES=${EVAL_IMAGES:-100}
fi
"$PYTHON" -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
# shellcheck disable=SC2086 # BATCHES and CLASSES are lists
"$PYTHON" -m bench.side_by_side --device "$DEVICE" --model "${MODEL:-vit_b16}" \
    --upstream "${UPSTREAM_DIR:-.upstream/PromptKD}" --batches ${BATCHES:-8 64} --classes ${CLASSES:-10 1000} \
    --iters "${ITERS:-10}" --warmup "${WARMUP:-3}" --eval-images "${EVAL_IMAGES:-500}" \
    --json "$OUT_DIR/side_by_side.json" "$@"
