"""The process settings of the demo's programs, made by their entry points before torch loads: idle OpenMP threads
sleep, and the CPU kernels are pinned to their AVX2 versions, so that the demo prints the same digits on every x86-64
CPU with AVX2 (docs/demo.md, "The same digits on every CPU").

Without the pin, torch's own vectorised kernels, MKL's matrix products and oneDNN's convolution each pick the widest
instructions the CPU has (AVX-512 or AVX2), and their float sums, hence a trained prompt and the accuracies, differ
between the two. Every run of the demo has one torch thread, so the thread count, the other thing MKL's sums depend
on, is fixed too. A variable already set in the environment is kept (``setdefault``).
"""
from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping

PINNED_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's vectorised kernels (element-wise, softmax, reductions, ...)
    "MKL_CBWR": "AVX2",  # MKL's matrix products: its conditional-numerical-reproducibility branch for AVX2
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's kernels (the patch-embedding convolution): at most AVX2
}
"""Read once, when the library first runs a kernel; the demo's warm workers inherit them from its process."""
PROCESS_ENV = {"OMP_WAIT_POLICY": "PASSIVE", **PINNED_KERNELS}
"""OMP_WAIT_POLICY PASSIVE: idle OpenMP threads sleep instead of spinning (spinning made pretraining up to 10x
slower on a busy machine)."""


def set_process_env(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set each of :data:`PROCESS_ENV` that ``environ`` does not set already."""
    for key, value in PROCESS_ENV.items():
        environ.setdefault(key, value)


def machine() -> str:
    """The machine a run (a pretraining, a demo) ran on: OS, architecture, CPU model and count."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {model or 'unknown CPU'}, {os.cpu_count()} CPUs"


def kernels_line() -> str:
    """One line naming the CPU kernels this process runs (torch's capability) and the pins as set; imports torch."""
    import torch

    pins = ", ".join(f"{key}={os.environ.get(key, 'unset')}" for key in PINNED_KERNELS)
    return f"CPU kernels: {torch.backends.cpu.get_cpu_capability()} ({pins})"
