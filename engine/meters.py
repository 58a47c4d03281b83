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
    """A named set of AverageMeters; ``str()`` gives ``name val (avg)`` pairs with four decimals.

    Values may be tensors on any device (a training step's loss terms): they are kept as they are and read in one
    transfer by :meth:`sync` (``str()`` syncs too), so updating the meter never waits for the device.
    """

    def __init__(self, delimiter: str = " ") -> None:
        self.meters: dict[str, AverageMeter] = defaultdict(AverageMeter)
        self.delimiter = delimiter
        self._pending: list[tuple[object, dict]] = []

    def update(self, input_dict: dict, tag: object = None) -> None:
        """Add one row of values (floats or one-element tensors); ``tag`` comes back with it from :meth:`sync`."""
        if input_dict is None:
            return
        if not isinstance(input_dict, dict):
            raise TypeError(f"MetricMeter.update() expects a dict (the loss summary), got {type(input_dict).__name__}")
        self._pending.append((tag, dict(input_dict)))

    def sync(self) -> list[tuple[object, dict[str, float]]]:
        """Read the pending rows (every tensor in one device-to-host transfer) into the meters, in order; returns
        them as ``(tag, {name: float})``."""
        rows, self._pending = self._pending, []
        tensors = [v for _, row in rows for v in row.values() if isinstance(v, torch.Tensor)]
        if tensors:
            # float64 holds every float32/bf16 value exactly, so the numbers equal per-value .item() calls
            host = iter(torch.stack([t.detach().reshape(()).to(torch.float64) for t in tensors]).tolist())
        synced = []
        for tag, row in rows:
            values = {k: next(host) if isinstance(v, torch.Tensor) else v for k, v in row.items()}
            for k, v in values.items():
                self.meters[k].update(v)
            synced.append((tag, values))
        return synced

    def __str__(self) -> str:
        self.sync()
        return self.delimiter.join(f"{name} {m.val:.4f} ({m.avg:.4f})" for name, m in self.meters.items())
