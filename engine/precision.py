"""Precision modes of ``TRAINER.<NAME>.PREC``: fp32, amp (autocast), fp16 (half-precision weights), bf16 (autocast).

The engine resolves the mode once per run (``SimpleTrainer.prec``), owns the grad scaler and offers
``SimpleTrainer.autocast()``; the one cast of frozen weights is ``clip.load_model(..., dtype=weight_dtype(prec))``.
"""
from __future__ import annotations

import contextlib

import torch

from .schema import Choice

PRECISIONS = ("fp32", "amp", "fp16", "bf16")
PREC_RULE = Choice(PRECISIONS)
"""The rule of a trainer's ``PREC`` key (its ``CONFIG_KEYS``)."""


def resolve_precision(prec: str, device: torch.device | str) -> str:
    """Validate ``prec`` for ``device``; fp16 on CPU falls back to fp32 (CPU lacks fp16 convolution kernels)."""
    if prec not in PRECISIONS:
        raise ValueError(f"Unknown precision {prec!r} (TRAINER.<NAME>.PREC); choose one of {', '.join(PRECISIONS)}")
    device_type = torch.device(device).type
    if prec == "fp16" and device_type == "cpu":
        print("Note: PREC fp16 is not supported on CPU (no fp16 conv kernels); using fp32 instead")
        return "fp32"
    if prec == "bf16" and device_type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError("PREC bf16 needs a GPU with bfloat16 support (Ampere or newer); use PREC amp on this GPU")
    return prec


def autocast(prec: str, device: torch.device | str, cache: bool = True):
    """``torch.autocast`` for amp (bf16 on CPU, fp16 on CUDA) and bf16 (bf16 everywhere); a no-op otherwise.
    ``cache=False`` turns off the cache of cast weights (needed while a CUDA graph is captured)."""
    device_type = torch.device(device).type
    if prec == "bf16":
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16, cache_enabled=cache)
    if prec != "amp":
        return contextlib.nullcontext()
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    return torch.autocast(device_type=device_type, dtype=dtype, cache_enabled=cache)


def weight_dtype(prec: str) -> torch.dtype | None:
    """dtype the frozen weights are cast to: float16 for fp16, None (they stay float32) for every other mode."""
    return torch.float16 if prec == "fp16" else None


def make_grad_scaler(prec: str, device: torch.device | str) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for amp on CUDA (fp16 autocast).

    bf16/fp32 need no loss scaling (bf16 has fp32's exponent range), and fp16 *parameters* cannot use it
    (GradScaler refuses to unscale fp16 gradients), so the fp16 mode trains unscaled, as CoOp does.
    """
    device_type = torch.device(device).type
    return torch.amp.GradScaler(device_type, enabled=device_type == "cuda" and prec == "amp")
