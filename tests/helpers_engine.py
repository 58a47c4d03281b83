"""Shared test helpers: a tiny solid-colour image tree, a dataset reading it and a linear-probe trainer."""
from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from engine import (
    DATASET_REGISTRY,
    TRAINER_REGISTRY,
    DatasetBase,
    Datum,
    TrainerX,
    build_lr_scheduler,
    build_optimizer,
    compute_accuracy,
)
from tests.helpers_run import train_argv

TINY_DIR = "engine_tiny"
TINY_CLASSES = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (40, 50, 210)}
TINY_PER_CLASS = 8  # 4 train, 1 val, 3 test per class


def write_image_tree(root: str, size: int = 8, per_class: int = TINY_PER_CLASS, seed: int = 0) -> str:
    """Write ``<root>/engine_tiny/<class>/<i>.png``: noisy solid-colour PNGs; returns the dataset folder."""
    rng = np.random.default_rng(seed)
    base = os.path.join(root, TINY_DIR)
    for name, rgb in TINY_CLASSES.items():
        os.makedirs(os.path.join(base, name), exist_ok=True)
        for i in range(per_class):
            noise = rng.integers(-25, 26, size=(size, size, 3))
            pixels = np.clip(np.array(rgb)[None, None, :] + noise, 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(os.path.join(base, name, f"{i}.png"))
    return base


class EngineTinyDataset(DatasetBase):
    """The tiny tree as train_x (first 4 per class), val (5th) and test (rest); labels in TINY_CLASSES order."""

    dataset_dir = TINY_DIR

    def __init__(self, cfg) -> None:
        base = os.path.join(cfg.DATASET.ROOT, self.dataset_dir)
        train, val, test = [], [], []
        for label, name in enumerate(TINY_CLASSES):
            files = sorted(os.listdir(os.path.join(base, name)), key=lambda f: int(f.split(".")[0]))
            items = [Datum(os.path.join(base, name, f), label=label, classname=name) for f in files]
            train += items[:4]
            val += items[4:5]
            test += items[5:]
        super().__init__(train_x=train, val=val, test=test)


class EngineLinearProbe(TrainerX):
    """A linear classifier on flattened pixels; ``crash_at_epoch`` / ``nan_at_batch`` simulate failures."""

    crash_at_epoch: int | None = None
    nan_at_batch: int | None = None

    def build_model(self) -> None:
        h, w = self.cfg.INPUT.SIZE
        self.model = nn.Linear(3 * h * w, self.num_classes).to(self.device)
        optim = build_optimizer(self.model, self.cfg.OPTIM)
        sched = build_lr_scheduler(optim, self.cfg.OPTIM)
        self.register_model("linear_probe", self.model, optim, sched)

    def before_epoch(self) -> None:
        if self.crash_at_epoch is not None and self.epoch == self.crash_at_epoch:
            raise RuntimeError(f"simulated crash at the start of epoch {self.epoch + 1}")

    def forward_backward(self, batch: dict) -> dict:
        img, label, _ = self.parse_batch_train(batch)
        logits = self.model(img.flatten(1))
        loss = F.cross_entropy(logits, label)
        if self.nan_at_batch is not None and self.batch_idx == self.nan_at_batch:
            loss = loss * float("nan")
        self.model_backward_and_update(loss)
        if self.batch_idx + 1 == self.num_batches:
            self.update_lr()
        return {"loss": loss.item(), "acc": compute_accuracy(logits, label)[0].item()}

    def model_inference(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input.flatten(1))


DATASET_REGISTRY.register(EngineTinyDataset, force=True)
TRAINER_REGISTRY.register(EngineLinearProbe, force=True)


def tiny_opts(epochs: int = 3, extra: list[str] | None = None) -> list[str]:
    """KEY VALUE opts for a fast CPU run of EngineLinearProbe on EngineTinyDataset (8x8 images, batch 4)."""
    opts = [
        "DATASET.NAME", "EngineTinyDataset",
        "USE_CUDA", "False",
        "INPUT.SIZE", "(8, 8)",
        "INPUT.TRANSFORMS", "['random_resized_crop', 'random_flip', 'normalize']",
        "DATALOADER.NUM_WORKERS", "0",
        "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
        "DATALOADER.TEST.BATCH_SIZE", "4",
        "OPTIM.NAME", "sgd",
        "OPTIM.LR", "0.05",
        "OPTIM.MAX_EPOCH", str(epochs),
        "OPTIM.LR_SCHEDULER", "cosine",
        "OPTIM.WARMUP_EPOCH", "1",
        "OPTIM.WARMUP_TYPE", "constant",
        "TRAIN.PRINT_FREQ", "2",
    ]
    return opts + (extra or [])


def tiny_argv(root: str, output_dir: str, epochs: int = 3, seed: int = 1, extra_args: list[str] | None = None,
              opts: list[str] | None = None, trainer: str = "EngineLinearProbe") -> list[str]:
    """train.py argv for the tiny run of ``trainer`` (no config files; ``extra_args`` before the opts, ``opts``
    appended to tiny_opts)."""
    return train_argv(trainer, None, root, output_dir, *tiny_opts(epochs, opts), dataset=None, seed=seed,
                      flags=extra_args or (), tiny=False)
