#!/usr/bin/env bash
# The GPU training-step table, in one short run (about 5 minutes on an H100): PETR's and PromptKD's batch-8 steps as
# train.py builds them (random-weight ViT-B/16 students, ViT-L/14 teacher, shipped configs, C = 10) in fp32, bf16,
# bf16 + TRAIN.COMPILE compile, + teacher cache, + TRAIN.CUDA_GRAPH; then whether the CUDA-graph steps give the eager
# steps' losses bit for bit. Rows print as they are measured, the table at the end.
# Usage: bash bench/gpu_step.sh
#        DEVICE=cpu MODEL=tiny ITERS=2 WARMUP=1 bash bench/gpu_step.sh     (a CPU dry run, seconds)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
DEVICE=${DEVICE:-cuda}
"$PYTHON" -c "import torch; print('torch', torch.__version__, '|', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
"$PYTHON" -m bench.benchmark steps --device "$DEVICE" --model "${MODEL:-vit_b16}" --step-batch 8 --gpu-rows \
    --cuda-graph --train-iters "${ITERS:-20}" --warmup "${WARMUP:-5}"
