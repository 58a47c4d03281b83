"""Data-parallel training under torchrun: the process group, DDP over the trainable models, rank-0 helpers and
evaluation outputs gathered in dataset order.

Outside torchrun, or with one process, no process group exists: ``is_distributed()`` is False, every helper here
is a no-op and a run takes the single-process path unchanged. Under ``torchrun --nproc_per_node N`` (N > 1) each
process joins the group from torchrun's environment (nccl on CUDA with device ``LOCAL_RANK``, gloo on the CPU),
loads its shard of every loader (engine/data_manager.py), trains identical copies of the models, and rank 0 alone
prints, logs and writes files.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from .run_lock import launched_world_size


def is_distributed() -> bool:
    """True while this process is part of a process group (a multi-process torchrun run)."""
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """This process's rank (0 in a single process)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """Number of processes in the group (1 in a single process)."""
    return dist.get_world_size() if is_distributed() else 1


def get_backend() -> str:
    """The process group's backend (nccl or gloo); "none" in a single process."""
    return dist.get_backend() if is_distributed() else "none"


def is_main() -> bool:
    """True on rank 0 (and in a single process): the one process that prints, logs and writes files."""
    return get_rank() == 0


def share_from_main(value):
    """Rank 0's ``value`` on every process (a small picklable object; returned as it is in a single process)."""
    if not is_distributed():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    """Wait for every process (no-op in a single process)."""
    if is_distributed():
        dist.barrier()


class _Session:
    """What :func:`init_distributed` set up, for :func:`shutdown_distributed` to undo."""

    active = False
    stdout = None
    devnull = None


def init_distributed(use_cuda: bool) -> bool:
    """Join torchrun's process group when torchrun started several processes (False otherwise: nothing happens).

    Backend nccl with this process's GPU ``LOCAL_RANK`` when CUDA is used, gloo otherwise. Ranks other than 0 print
    nothing (their stdout goes to os.devnull; errors still reach stderr).
    """
    if launched_world_size() <= 1 or is_distributed():
        return False
    if use_cuda and torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    _Session.active = True
    if not is_main():
        _Session.stdout, _Session.devnull = sys.stdout, open(os.devnull, "w")
        sys.stdout = _Session.devnull
    return True


def shutdown_distributed(synchronise: bool = True) -> None:
    """Leave the process group that :func:`init_distributed` joined and restore stdout (no-op otherwise). With
    ``synchronise`` (every process got here: the run ended normally) a barrier comes first, so no process tears its
    connections down while another still uses them (gloo aborts a process whose peer left mid-teardown)."""
    if not _Session.active:
        return
    if synchronise:
        dist.barrier()
    if _Session.devnull is not None:
        sys.stdout = _Session.stdout
        _Session.devnull.close()
        _Session.stdout = _Session.devnull = None
    _Session.active = False
    dist.destroy_process_group()


# ----- models -------------------------------------------------------------------------------------------------
def _all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over all processes, differentiable (its backward sums the gradients over all processes)."""
    return funcol.wait_tensor(funcol.all_reduce(tensor, "sum", dist.group.WORLD))


class CPUSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """BatchNorm over the global batch for CPU (gloo) runs, where torch's SyncBatchNorm has no kernels.

    In training, the per-channel sums are all-reduced with autograd-aware collectives, so the output, the gradients
    and the running statistics equal those of a BatchNorm over the global batch in one process (as torch's
    SyncBatchNorm does on CUDA). In eval mode or in a single process it is a plain BatchNorm.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not (self.training and get_world_size() > 1):
            return super().forward(input)
        self._check_input_dim(input)
        x = input.float()
        dims = [0, *range(2, x.dim())]
        shape = (1, -1) + (1,) * (x.dim() - 2)
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype)
        totals = _all_reduce_sum(torch.cat([x.sum(dims), count]))
        n = totals[-1]
        mean = totals[:-1] / n
        centred = x - mean.view(shape)
        var = _all_reduce_sum((centred * centred).sum(dims)) / n
        out = centred * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                factor = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                self.running_mean.lerp_(mean.detach().to(self.running_mean.dtype), factor)
                unbiased = var.detach() * n / (n - 1)
                self.running_var.lerp_(unbiased.to(self.running_var.dtype), factor)
        return out.to(input.dtype)


def convert_sync_batchnorm(module: nn.Module, device: torch.device) -> int:
    """Replace every BatchNorm inside ``module`` by a synchronised one: torch's SyncBatchNorm on CUDA,
    :class:`CPUSyncBatchNorm` on the CPU. Returns the number of layers converted.

    The new layers share the old ones' parameters and buffers (optimisers keep working) and keep their state-dict
    keys, so checkpoints load in single-process runs.
    """
    sync_class = nn.SyncBatchNorm if device.type == "cuda" else CPUSyncBatchNorm
    converted = 0
    for name, child in module.named_children():
        if isinstance(child, nn.modules.batchnorm._BatchNorm) and not isinstance(child, (nn.SyncBatchNorm,
                                                                                          CPUSyncBatchNorm)):
            sync = sync_class(child.num_features, child.eps, child.momentum, child.affine, child.track_running_stats)
            if child.affine:
                sync.weight, sync.bias = child.weight, child.bias
            if child.track_running_stats:
                sync.running_mean, sync.running_var = child.running_mean, child.running_var
                sync.num_batches_tracked = child.num_batches_tracked
            sync.train(child.training)
            setattr(module, name, sync)
            converted += 1
        else:
            converted += convert_sync_batchnorm(child, device)
    return converted


class _StepMarker(nn.Module):
    """Holds one trainable model for DDP; its forward does no work (see :func:`wrap_trainable_models`)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self) -> None:
        return None


def has_trainable_parameters(model: nn.Module | None) -> bool:
    """True when ``model`` has a parameter with requires_grad (what DDP has to synchronise)."""
    return model is not None and any(p.requires_grad for p in model.parameters())


def wrap_trainable_models(models: dict[str, nn.Module], device: torch.device,
                          sync_bn: bool) -> list[DistributedDataParallel]:
    """One DDP per registered model with trainable parameters (the frozen CLIP and teacher are never registered);
    [] in a single process.

    Trainers use their prompt learners in many ways (a student's forward, ``vision_prompts()``, two students in one
    batched CLIP forward), so the computation does not run inside DDP's forward. Instead the engine calls every
    wrapper's empty forward right before each backward (:func:`prepare_backward`): that is where DDP readies its
    reducer, so the backward all-reduces (averages) the gradients of these models in buckets, as in any DDP step.
    DDP also broadcasts rank 0's parameters at construction. With ``sync_bn`` BatchNorm layers become
    :func:`convert_sync_batchnorm` (statistics of the global batch); without it each process normalises with its own
    batch and DDP copies rank 0's running statistics to the others at every step.
    """
    if not is_distributed():
        return []
    wrapped, names, converted = [], [], 0
    for name, model in models.items():
        if not has_trainable_parameters(model):
            continue
        has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
        if sync_bn:
            converted += convert_sync_batchnorm(model, device)
        device_ids = [torch.cuda.current_device()] if device.type == "cuda" else None
        wrapped.append(DistributedDataParallel(_StepMarker(model), device_ids=device_ids,
                                               forward_sync_buffers=has_bn and not sync_bn))
        names.append(name)
    print(f"DistributedDataParallel over {', '.join(names) or 'no model'} (TRAIN.SYNC_BN {sync_bn}: {converted} "
          "BatchNorm layers synchronised); frozen models stay one plain copy per process")
    return wrapped


def prepare_backward(wrapped: Iterable[DistributedDataParallel]) -> None:
    """Run each wrapper's (empty) forward: DDP then averages these models' gradients during the next backward.

    Every backward after this call must reach every trainable parameter of these models (DDP's usual rule with
    ``find_unused_parameters=False``).
    """
    for ddp in wrapped:
        ddp()


def any_rank(*flags: bool) -> tuple[bool, ...]:
    """Each flag OR-ed over all processes (one small all-reduce), so that every rank takes the same branch; the
    flags as they are in a single process."""
    if not is_distributed():
        return tuple(bool(f) for f in flags)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    values = torch.tensor([int(bool(f)) for f in flags], device=device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return tuple(bool(v) for v in values.tolist())


def set_sampler_epoch(loaders: Iterable, epoch: int) -> None:
    """Tell every DistributedSampler among ``loaders`` the epoch, so the shards are reshuffled each epoch."""
    for loader in loaders:
        sampler = getattr(loader, "sampler", None)
        if isinstance(getattr(sampler, "base", sampler), DistributedSampler):  # also inside a SeededPassSampler
            sampler.set_epoch(epoch)


# ----- evaluation ---------------------------------------------------------------------------------------------
def _all_gather_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``tensor`` (rows may differ in number) from every rank, rank 0's rows first."""
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    local = tensor.to(device)
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(get_world_size())]
    dist.all_gather(sizes, torch.tensor([local.shape[0]], device=device))
    rows = [int(s.item()) for s in sizes]
    padded = local.new_zeros((max(rows), *local.shape[1:]))
    padded[:local.shape[0]] = local
    parts = [torch.empty_like(padded) for _ in rows]
    dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, rows)]).to(tensor.device)


def merge_in_order(index: torch.Tensor, tensors: Iterable[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Rows of ``tensors`` sorted by their sample ``index``, each index kept once (DistributedSampler repeats a
    few samples so that every shard has the same length)."""
    order = torch.argsort(index, stable=True)
    ordered = index[order]
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[1:] = ordered[1:] != ordered[:-1]
    rows = order[first]
    return tuple(t[rows] for t in tensors)


def gather_in_order(index: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every rank's rows of ``tensors`` (row i belongs to dataset sample ``index[i]``) in dataset order, on every
    rank; in a single process ``tensors`` are returned as they are."""
    if not is_distributed():
        return tensors
    return merge_in_order(_all_gather_rows(index), [_all_gather_rows(t) for t in tensors])
