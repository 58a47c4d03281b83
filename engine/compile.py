"""``TRAIN.COMPILE``: torch.compile of the frozen CLIP forwards (with prompts), against launch overhead at batch 8.

* ``none`` (default): eager PyTorch, no compilation wait; the reference numbers the compiled modes are checked
  against (docs/throughput.md weighs the choice).
* ``compile``: ``torch.compile`` (inductor) of the frozen CLIPs' ``encode_image`` / ``encode_text`` (PromptKD, PETR,
  PromptSRC): fused kernels, far fewer launches; the prompts stay inputs, so their gradients flow through the
  compiled graph.
* ``cudagraphs``: the same with ``mode="reduce-overhead"``: on CUDA each shape's kernels are also replayed as one
  CUDA graph (training batches have one shape: train loaders use ``drop_last``). On CPU it equals ``compile``.

Shapes are compiled statically (``dynamic=False``): one graph per batch size, so a ragged last evaluation batch
adds one more compilation (dynamo's recompile limit is raised to 64 so that none falls back to eager). Only the
frozen CLIPs are compiled, never the trainable modules, so checkpoints, the optimiser and the numbers of an eager
run are unchanged (equal within float rounding: see tests/test_compile.py).
"""
from __future__ import annotations

import torch
from torch import nn

COMPILE_MODES = {"none": None, "compile": "default", "cudagraphs": "reduce-overhead"}
COMPILED_METHODS = ("encode_image", "encode_text")
RECOMPILE_LIMIT = 64


def check_compile_mode(mode: str) -> None:
    """Raise ValueError naming TRAIN.COMPILE and its choices when ``mode`` is unknown."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"TRAIN.COMPILE is {mode!r}; choose one of {', '.join(COMPILE_MODES)}")


def compile_clip(clip_model: nn.Module, mode: str) -> nn.Module:
    """Replace ``clip_model``'s encode methods by ``torch.compile``d ones (in place; ``none`` leaves it eager)."""
    check_compile_mode(mode)
    if COMPILE_MODES[mode] is None:
        return clip_model
    # one graph per CLIP x batch shape x grad mode (student and teacher share CLIP's code): room for all of them
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    for name in COMPILED_METHODS:
        if "_eager_" + name not in clip_model.__dict__:
            eager = getattr(clip_model, name)
            clip_model.__dict__["_eager_" + name] = eager
            setattr(clip_model, name, torch.compile(eager, mode=COMPILE_MODES[mode], dynamic=False))
    return clip_model
