"""Precision modes of ``TRAINER.<NAME>.PREC``: fp32, amp (autocast) and fp16 (half-precision parameters)."""
from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("fp32", "amp", "fp16")


def resolve_precision(prec: str, device: torch.device | str) -> str:
    """Validate ``prec``; fp16 on CPU falls back to fp32 (CPU lacks fp16 convolution kernels)."""
    if prec not in PRECISIONS:
        raise ValueError(f"Unknown precision {prec!r} (TRAINER.<NAME>.PREC); choose one of {', '.join(PRECISIONS)}")
    if prec == "fp16" and torch.device(device).type == "cpu":
        print("Note: PREC fp16 is not supported on CPU (no fp16 conv kernels); using fp32 instead")
        return "fp32"
    return prec


def autocast(prec: str, device: torch.device | str):
    """``torch.autocast`` for amp (bf16 on CPU, fp16 on CUDA); a no-op context otherwise."""
    device_type = torch.device(device).type
    if prec != "amp":
        return contextlib.nullcontext()
    dtype = torch.float16 if device_type == "cuda" else torch.bfloat16
    return torch.autocast(device_type=device_type, dtype=dtype)


def make_grad_scaler(prec: str, device: torch.device | str) -> torch.amp.GradScaler:
    """A GradScaler, enabled only for amp on CUDA (fp16 autocast).

    bf16/fp32 need no loss scaling, and fp16 *parameters* cannot use it (GradScaler refuses to unscale fp16
    gradients), so the fp16 mode trains unscaled, as CoOp does.
    """
    device_type = torch.device(device).type
    return torch.amp.GradScaler(device_type, enabled=device_type == "cuda" and prec == "amp")
