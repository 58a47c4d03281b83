"""Running-average meters used for the epoch/batch log lines (Dassl's AverageMeter / MetricMeter)."""
from __future__ import annotations

from collections import defaultdict

import torch


class AverageMeter:
    """Current value, sum, count and average (or an exponential moving average when ``ema``)."""

    def __init__(self, ema: bool = False) -> None:
        self.ema = ema
        self.reset()

    def reset(self) -> None:
        self.val = 0.0
        self.avg = 0.0
        self.sum = 0.0
        self.count = 0

    def update(self, val, n: int = 1) -> None:
        if isinstance(val, torch.Tensor):
            val = val.item()
        self.val = val
        self.sum += val * n
        self.count += n
        if self.ema:
            self.avg = self.avg * 0.9 + self.val * 0.1
        else:
            self.avg = self.sum / self.count


class MetricMeter:
    """A named set of AverageMeters; ``str()`` gives ``name val (avg)`` pairs with four decimals."""

    def __init__(self, delimiter: str = " ") -> None:
        self.meters: dict[str, AverageMeter] = defaultdict(AverageMeter)
        self.delimiter = delimiter

    def update(self, input_dict: dict) -> None:
        if input_dict is None:
            return
        if not isinstance(input_dict, dict):
            raise TypeError(f"MetricMeter.update() expects a dict (the loss summary), got {type(input_dict).__name__}")
        for k, v in input_dict.items():
            self.meters[k].update(v)

    def __str__(self) -> str:
        return self.delimiter.join(f"{name} {m.val:.4f} ({m.avg:.4f})" for name, m in self.meters.items())
