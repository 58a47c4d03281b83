#!/usr/bin/env bash
# Runs one unit command for a scripts/<method>/<command>.sh wrapper: bash scripts/unit.sh SCRIPT METHOD COMMAND ARG...
# (python -m units METHOD COMMAND ARG..., units/commands.py). The environment knobs (DATA, OUTPUT_ROOT, CFG, SHOTS,
# TEACHER_DIR, TEACHER_CKPT, KD_WEIGHT, BACKBONE, TEACHER_NAME, EXTRA_OPTS, LOAD_EPOCH, NPROC, MOVE_ASIDE, SOURCE, ...)
# are described in docs/usage.md; relative paths are taken from the directory the script was called from.
# PYTHON: the interpreter (default: the active virtual environment's python, else the project's .venv made by
# `make install` / `make demo`, else python3). Python is exec'd: a preemption signal reaches train.py directly.
set -euo pipefail
export UNITS_SCRIPT=$1 UNITS_CALLER_DIR=$PWD
shift
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        PYTHON="$VIRTUAL_ENV/bin/python"
    elif [ -x "$PWD/.venv/bin/python" ]; then
        PYTHON="$PWD/.venv/bin/python"
    else
        PYTHON=python3
    fi
fi
"$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null || {
    echo "error: PYTHON=$PYTHON has no torch: run 'make install' (creates .venv, which the scripts then use), activate \
a virtual environment with requirements.txt installed, or set PYTHON=/path/to/python" >&2
    exit 2
}
exec "$PYTHON" -m units "$@"
