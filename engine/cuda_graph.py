"""``TRAIN.CUDA_GRAPH``: the whole training step (forward, backward, optimiser update) replayed as one CUDA graph.

At the papers' batch 8 a step is launch-bound: the GPU waits for the host to issue hundreds of small kernels.
Captured once, the step's kernels replay with one launch. A trainer opts in by splitting its ``forward_backward``
into the host part (reading the batch, looking up cached teacher features) and ``train_step(inputs)``, which works
on device tensors only and returns its loss summary as tensors (PETR, PromptKD and CoOp do).

:class:`StepGraph` runs the first ``WARMUP_STEPS`` steps eagerly on a side stream (they create the optimiser's
momentum buffers and the libraries' workspaces; they are real steps), then captures the step into a graph with
static input buffers and replays it: each call copies the batch into the buffers, replays, and returns a copy of the
summary. The learning rates are constants of the captured kernels, so the step is captured again when the scheduler
changes them (once per epoch). A batch of another shape (a last partial batch) runs eagerly. Replays run the very
kernels of the eager step, so the numbers are the eager run's.

Adam, AMSGrad and AdamW keep their step counter on the host unless built ``capturable`` (counter and bias
corrections on the device): :func:`make_capturable` switches them to that before their first step. It is the same
update, its bias corrections computed in the device's float32 instead of the host's float64, so an Adam run's
numbers match the eager run's to float32 rounding, not bit for bit (an SGD run's match bit for bit).

Not supported (a clear error): the CPU; PREC amp (its grad scaler reads the device every step); RMSprop and RAdam;
torchrun (DDP); ``TRAIN.COMPILE cudagraphs`` (graphs do not nest).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .errors import ConfigError

WARMUP_STEPS = 2
CAPTURED_OPTIMS = ("sgd", "adam", "amsgrad", "adamw")
"""OPTIM.NAME values whose update a graph can replay (the Adam family once :func:`make_capturable`)."""


def check_cuda_graph(cfg, device: torch.device, prec: str, trainer, distributed: bool) -> None:
    """Raise ConfigError naming TRAIN.CUDA_GRAPH when the run cannot capture its step (see the module docstring)."""
    if not cfg.TRAIN.get("CUDA_GRAPH", False):
        return
    if device.type != "cuda":
        raise ConfigError("TRAIN.CUDA_GRAPH True needs a CUDA GPU (USE_CUDA True on a machine with one); set it to "
                          "False on the CPU")
    problems = []
    if not callable(getattr(trainer, "train_step", None)):
        problems.append(f"{type(trainer).__name__} has no train_step() to capture (PETR, PromptKD and CoOp have)")
    if prec == "amp":
        problems.append("PREC amp's grad scaler reads the device every step; use PREC bf16 or fp16")
    if cfg.OPTIM.NAME not in CAPTURED_OPTIMS:
        problems.append(f"OPTIM.NAME {cfg.OPTIM.NAME} keeps its step count on the host; use one of "
                        f"{', '.join(CAPTURED_OPTIMS)}")
    if distributed:
        problems.append("torchrun (DDP) runs are not captured")
    if cfg.TRAIN.get("COMPILE", "none") == "cudagraphs":
        problems.append("TRAIN.COMPILE cudagraphs already replays graphs inside the step; use compile or none")
    if problems:
        raise ConfigError("TRAIN.CUDA_GRAPH True: " + "; ".join(problems))


def make_capturable(optimizers: list[torch.optim.Optimizer]) -> None:
    """Make every Adam / AdamW among ``optimizers`` keep its step counter on the device (``capturable``), as if built
    so; call before their first step. SGD keeps no counter and is left as it is."""
    for optim in optimizers:
        if isinstance(optim, (torch.optim.Adam, torch.optim.AdamW)):
            optim.defaults["capturable"] = True
            for group in optim.param_groups:
                group["capturable"] = True


class StepGraph:
    """Calls ``step(inputs) -> {name: tensor}`` eagerly for the warm-up steps, then as a replayed CUDA graph."""

    def __init__(self, step: Callable[[dict], dict], optimizers: list[torch.optim.Optimizer]) -> None:
        self.step, self.optimizers = step, optimizers
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: dict[str, torch.Tensor] = {}
        self.static_outputs: dict[str, torch.Tensor] = {}
        self.captured_lrs: list[float] = []
        self.captures = 0

    def _lrs(self) -> list[float]:
        return [group["lr"] for optim in self.optimizers for group in optim.param_groups]

    def _fits(self, inputs: dict[str, torch.Tensor]) -> bool:
        static = self.static_inputs
        return inputs.keys() == static.keys() and all(
            t.shape == static[k].shape and t.dtype == static[k].dtype for k, t in inputs.items())

    def _eager_on_side_stream(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            outputs = self.step(inputs)
        torch.cuda.current_stream().wait_stream(stream)
        return outputs

    def _capture(self, inputs: dict[str, torch.Tensor]) -> None:
        self.graph = None
        self.static_inputs = {k: t.detach().clone() for k, t in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_outputs = self.step(self.static_inputs)
        self.graph, self.captured_lrs = graph, self._lrs()
        self.captures += 1

    def __call__(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.calls += 1
        if self.calls <= WARMUP_STEPS or (self.graph is not None and not self._fits(inputs)):
            return self._eager_on_side_stream(inputs)
        if self.graph is None or self.captured_lrs != self._lrs():
            self._capture(inputs)  # records the step without running it: the replay below runs it
        for name, tensor in inputs.items():
            self.static_inputs[name].copy_(tensor, non_blocking=True)
        self.graph.replay()
        row = torch.stack([t.reshape(()).float() for t in self.static_outputs.values()])  # survives the next replay
        return dict(zip(self.static_outputs, row.unbind()))
