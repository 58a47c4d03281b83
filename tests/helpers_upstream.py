"""Checkpoints in upstream Dassl's layout, written in the tests: the model's state dict, ``epoch``, the optimiser's
state dict, and a ``scheduler`` entry that pickles objects (as Dassl's scheduler ``state_dict()`` does), one of them
with a side effect when unpickled."""
from __future__ import annotations

import os

import torch


class UpstreamScheduler:
    """A scheduler-like object whose unpickling would create the directory ``marker`` (the side effect to avoid)."""

    def __init__(self, marker: str, last_epoch: int):
        self.marker, self.last_epoch = marker, last_epoch

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def write_dassl_checkpoint(folder: str, state_dict: dict, epoch: int, optimizer: dict | None, marker: str,
                           model_file: str = "") -> str:
    """``<folder>/model.pth.tar-<epoch>`` (or ``model_file``) + the ``checkpoint`` pointer file, as Dassl saves them."""
    os.makedirs(folder, exist_ok=True)
    name = model_file or f"model.pth.tar-{epoch}"
    params = [torch.nn.Parameter(torch.zeros(1))]
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(torch.optim.SGD(params, lr=0.002), T_max=epoch)
    scheduler = {"last_epoch": epoch, "successor": cosine, "warmup_hook": UpstreamScheduler(marker, epoch)}
    torch.save({"state_dict": state_dict, "epoch": epoch, "optimizer": optimizer, "scheduler": scheduler,
                "val_result": None}, os.path.join(folder, name))
    with open(os.path.join(folder, "checkpoint"), "w") as f:
        f.write(f"{name}\n")
    return os.path.join(folder, name)
