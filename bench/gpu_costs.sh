#!/usr/bin/env bash
# The measurements behind runner/costs.py and the toy world's profile table, in one run on a GPU machine:
# python -m bench.measure_costs (CoOp's step, evaluation per image, a run's start-up; its printed block goes over the
# measured block of runner/costs.py), then python -m bench.demo_profiles (PromptKD and PETR base-to-novel on the toy
# world per seed in the paper, fast and fast + CUDA graph profiles; one run at a time, so the step times are its own).
# Usage: bash bench/gpu_costs.sh [WORKDIR]      (default output/gpu_costs: costs.json, costs.txt, profiles.txt)
#        DEVICE=cpu MODEL=tiny SEEDS=1 QUICK=--quick bash bench/gpu_costs.sh /tmp/costs    (a CPU dry run)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3)}
DEVICE=${DEVICE:-cuda}
WORKDIR=${1:-output/gpu_costs}
mkdir -p "$WORKDIR"
"$PYTHON" -m bench.measure_costs --device "$DEVICE" --model "${MODEL:-vit_b16}" --json "$WORKDIR/costs.json" \
    | tee "$WORKDIR/costs.txt"
# shellcheck disable=SC2086  # SEEDS and QUICK are word lists
"$PYTHON" -m bench.demo_profiles --device "$DEVICE" --seeds ${SEEDS:-1 2 3} --jobs "${JOBS:-1}" --workdir "$WORKDIR" \
    ${QUICK:-} | tee "$WORKDIR/profiles.txt"
