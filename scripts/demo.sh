#!/usr/bin/env bash
# The built-in demo (`make demo`): procedurally drawn coloured shapes, tiny CLIPs (cached in demo_cache/), then the
# protocol runner's base-to-novel sweep of zero-shot CLIP, CoOp, the PromptSRC teacher, PromptKD, PETR and PETR+CoOp
# (seed 1), the table, routing rates and effects, and output/demo/report.md + report.png. `--full` (`make demo-full`):
# every method, seeds 1-3, cross-dataset and domain generalisation too.
# Usage: [PYTHON=python] bash scripts/demo.sh [--full | --quick] [--workdir DIR] [--data DIR] [--output-root DIR]
#        [--cache DIR] [--threads N] [--jobs N]
# Environment: DEMO_DATA (default data/demo), DEMO_OUTPUT (default output/demo), DEMO_CACHE (default demo_cache).
# Finished stages are skipped on a rerun (delete output/demo to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python}
exec "$PYTHON" -m demo.pipeline "$@"
