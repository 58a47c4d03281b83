"""The built-in demo (README, "Demo")."""
import os

# Idle OpenMP threads sleep instead of spinning (read when torch loads, so set before any demo module imports it):
# on a busy machine spinning made the 2-thread pretraining 10x slower; on an idle one sleeping costs little.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
