"""Running train.py and the scripts as subprocesses in tests."""
from __future__ import annotations

# Subprocess timeouts only guard against hangs: far above any expected run, even on a slow, busy 2-core machine.
HANG_GUARD_S = 1800

