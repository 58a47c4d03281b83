"""Dassl-compatible engine: registries, config, data, optimisation, evaluation, checkpoints and trainers.

The public names are exported lazily (PEP 562): ``from engine import TrainerX`` imports ``engine.trainer`` (and
torch) on first use, while ``import engine.runs`` stays free of torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "checkpoint": ("checkpoint_epoch", "load_checkpoint", "load_pretrained_weights", "resume_from_checkpoint",
                   "save_checkpoint"),
    "config": ("get_cfg_default",),
    "data_manager": ("DataManager", "DatasetWrapper", "build_data_loader", "build_sampler"),
    "dataset_base": ("DATA_ROLES", "UNLABELED", "DatasetBase", "Datum", "RoleSplits", "build_dataset"),
    "evaluator": ("Classification", "EvaluatorBase", "build_evaluator", "compute_accuracy"),
    "logger": ("Logger", "setup_logger"),
    "meters": ("AverageMeter", "MetricMeter"),
    "optim": ("build_lr_scheduler", "build_optimizer"),
    "precision": ("PRECISIONS", "autocast", "make_grad_scaler", "resolve_precision", "weight_dtype"),
    "runs": ("pointed_checkpoint",),
    "registry": ("DATASET_REGISTRY", "EVALUATOR_REGISTRY", "TRAINER_REGISTRY", "Registry", "check_availability"),
    "trainer": ("SimpleTrainer", "TrainerBase", "TrainerX", "TrainerXU", "build_trainer"),
    "transforms": ("build_transform",),
    "utils": ("check_isfile", "collect_env_info", "count_num_param", "listdir_nohidden", "mkdir_if_missing",
              "read_image", "read_json", "set_random_seed", "write_json"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    """Import the submodule that defines ``name`` on first access and cache the name here."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
