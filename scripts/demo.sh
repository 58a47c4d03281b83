#!/usr/bin/env bash
# The built-in demo (`make demo`): procedurally drawn coloured shapes, tiny CLIPs pretrained on CPU (cached in
# demo_cache/), a PromptSRC teacher, CoOp, PromptKD, PETR and PETR+CoOp, evaluated on base and novel classes, then the
# base-to-novel table (parse_test_res.py b2n), the routing table and the routing-score plot.
# Usage: [PYTHON=python] bash scripts/demo.sh [--quick] [--workdir DIR] [--data DIR] [--output DIR] [--cache DIR]
#        [--threads N]
# Environment: DEMO_DATA (default data/demo), DEMO_OUTPUT (default output/demo), DEMO_CACHE (default demo_cache).
# Finished stages are skipped on a rerun (delete output/demo to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
exec "$PYTHON" -m demo.pipeline "$@"
