"""Dassl's optimiser and LR-scheduler builders, with warm-up schedulers that work on current torch.

The warm-up schedulers call ``LRScheduler.__init__(optimizer, last_epoch)`` (no removed ``verbose`` argument)
and keep their successor's state as a nested dict, so checkpoints load with ``torch.load(weights_only=True)``.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LRScheduler, MultiStepLR, StepLR

AVAI_OPTIMS = ("adam", "amsgrad", "sgd", "rmsprop", "radam", "adamw")
FOREACH_OPTIMS = ("adam", "amsgrad", "sgd", "rmsprop", "adamw")
"""Optimisers built with ``foreach=True`` (a few multi-tensor kernels per step instead of a few per parameter), whose
updates equal the per-parameter loop's bit for bit (tests/test_engine_optim.py); RAdam's foreach update is not
identical, and the fused kernels (one per step) are not either, so neither is used."""
AVAI_SCHEDULERS = ("single_step", "multi_step", "cosine")
AVAI_WARMUPS = ("constant", "linear")


def _params_of(model, optim_cfg, param_groups):
    """Parameters or param groups to optimise; STAGED_LR splits a module's children into base/new groups."""
    if param_groups is not None:
        if optim_cfg.STAGED_LR:
            print("Warning: OPTIM.STAGED_LR is ignored because param_groups are given")
        return param_groups
    if not isinstance(model, nn.Module):
        if optim_cfg.STAGED_LR:
            raise TypeError("OPTIM.STAGED_LR needs an nn.Module (its children are split into base/new layers)")
        return model
    if not optim_cfg.STAGED_LR:
        return model.parameters()
    if isinstance(model, nn.DataParallel):
        model = model.module
    new_layers = [optim_cfg.NEW_LAYERS] if isinstance(optim_cfg.NEW_LAYERS, str) else list(optim_cfg.NEW_LAYERS)
    if not new_layers:
        print("Warning: OPTIM.NEW_LAYERS is empty (is this intended?)")
    base, new = [], []
    for name, module in model.named_children():
        (new if name in new_layers else base).extend(module.parameters())
    return [{"params": base, "lr": optim_cfg.LR * optim_cfg.BASE_LR_MULT}, {"params": new}]


def build_optimizer(model: nn.Module | Iterable, optim_cfg, param_groups: list[dict] | None = None):
    """Optimizer ``OPTIM.NAME`` over a module, an iterable of parameters, or explicit ``param_groups``."""
    name = optim_cfg.NAME
    if name not in AVAI_OPTIMS:
        raise ValueError(f"Unknown OPTIM.NAME {name!r}; supported: {', '.join(AVAI_OPTIMS)}")
    params = _params_of(model, optim_cfg, param_groups)
    lr, wd = optim_cfg.LR, optim_cfg.WEIGHT_DECAY
    betas = (optim_cfg.ADAM_BETA1, optim_cfg.ADAM_BETA2)
    impl = {"foreach": True} if name in FOREACH_OPTIMS else {}
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, betas=betas, **impl)
    if name == "amsgrad":
        return torch.optim.Adam(params, lr=lr, weight_decay=wd, betas=betas, amsgrad=True, **impl)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=optim_cfg.MOMENTUM, weight_decay=wd,
                               dampening=optim_cfg.SGD_DAMPNING, nesterov=optim_cfg.SGD_NESTEROV, **impl)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=lr, momentum=optim_cfg.MOMENTUM, weight_decay=wd,
                                   alpha=optim_cfg.RMSPROP_ALPHA, **impl)
    if name == "radam":
        return torch.optim.RAdam(params, lr=lr, weight_decay=wd, betas=betas)
    return torch.optim.AdamW(params, lr=lr, weight_decay=wd, betas=betas, **impl)


class _BaseWarmupScheduler(LRScheduler):
    """Runs a warm-up for ``warmup_epoch`` steps, then hands every step to ``successor``."""

    def __init__(self, optimizer, successor: LRScheduler, warmup_epoch: int, last_epoch: int = -1) -> None:
        self.successor = successor
        self.warmup_epoch = warmup_epoch
        super().__init__(optimizer, last_epoch)

    def step(self, epoch: int | None = None) -> None:
        if self.last_epoch >= self.warmup_epoch:
            self.successor.step()
            self._last_lr = self.successor.get_last_lr()
        else:
            super().step()

    def state_dict(self) -> dict[str, Any]:
        """Plain values only; the successor's state is nested as its own state dict."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "successor")}
        state["successor"] = self.successor.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        self.successor.load_state_dict(state.pop("successor"))
        self.__dict__.update(state)


class ConstantWarmupScheduler(_BaseWarmupScheduler):
    """lr = ``cons_lr`` during the warm-up."""

    def __init__(self, optimizer, successor, warmup_epoch: int, cons_lr: float, last_epoch: int = -1) -> None:
        self.cons_lr = cons_lr
        super().__init__(optimizer, successor, warmup_epoch, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch >= self.warmup_epoch:
            return self.successor.get_last_lr()
        return [self.cons_lr for _ in self.base_lrs]


class LinearWarmupScheduler(_BaseWarmupScheduler):
    """lr = ``min_lr`` at step 0, then ``base_lr · step / warmup_epoch`` during the warm-up."""

    def __init__(self, optimizer, successor, warmup_epoch: int, min_lr: float, last_epoch: int = -1) -> None:
        self.min_lr = min_lr
        super().__init__(optimizer, successor, warmup_epoch, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch >= self.warmup_epoch:
            return self.successor.get_last_lr()
        if self.last_epoch == 0:
            return [self.min_lr for _ in self.base_lrs]
        return [lr * self.last_epoch / self.warmup_epoch for lr in self.base_lrs]


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim_cfg) -> LRScheduler:
    """``OPTIM.LR_SCHEDULER`` (stepped once per epoch), wrapped in a warm-up when ``OPTIM.WARMUP_EPOCH > 0``."""
    name = optim_cfg.LR_SCHEDULER
    if name not in AVAI_SCHEDULERS:
        raise ValueError(f"Unknown OPTIM.LR_SCHEDULER {name!r}; supported: {', '.join(AVAI_SCHEDULERS)}")
    stepsize = optim_cfg.STEPSIZE
    if name == "single_step":
        if isinstance(stepsize, (list, tuple)):
            stepsize = stepsize[-1]
        if not isinstance(stepsize, int):
            raise TypeError(f"OPTIM.STEPSIZE must be an int for single_step, got {type(stepsize).__name__}")
        if stepsize <= 0:
            stepsize = optim_cfg.MAX_EPOCH
        scheduler: LRScheduler = StepLR(optimizer, step_size=stepsize, gamma=optim_cfg.GAMMA)
    elif name == "multi_step":
        if not isinstance(stepsize, (list, tuple)):
            raise TypeError(f"OPTIM.STEPSIZE must be a list for multi_step, got {type(stepsize).__name__}")
        scheduler = MultiStepLR(optimizer, milestones=list(stepsize), gamma=optim_cfg.GAMMA)
    else:
        scheduler = CosineAnnealingLR(optimizer, T_max=float(optim_cfg.MAX_EPOCH))

    if optim_cfg.WARMUP_EPOCH > 0:
        if not optim_cfg.WARMUP_RECOUNT:
            scheduler.last_epoch = optim_cfg.WARMUP_EPOCH
        if optim_cfg.WARMUP_TYPE == "constant":
            scheduler = ConstantWarmupScheduler(optimizer, scheduler, optim_cfg.WARMUP_EPOCH, optim_cfg.WARMUP_CONS_LR)
        elif optim_cfg.WARMUP_TYPE == "linear":
            scheduler = LinearWarmupScheduler(optimizer, scheduler, optim_cfg.WARMUP_EPOCH, optim_cfg.WARMUP_MIN_LR)
        else:
            raise ValueError(
                f"Unknown OPTIM.WARMUP_TYPE {optim_cfg.WARMUP_TYPE!r}; supported: {', '.join(AVAI_WARMUPS)}"
            )
    return scheduler
