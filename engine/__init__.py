"""Dassl-compatible engine: registries, config, data, optimisation, evaluation, checkpoints and trainers."""
from .checkpoint import (
    checkpoint_epoch,
    load_checkpoint,
    load_pretrained_weights,
    pointed_checkpoint,
    resume_from_checkpoint,
    save_checkpoint,
)
from .config import get_cfg_default
from .data_manager import DataManager, DatasetWrapper, build_data_loader, build_sampler
from .dataset_base import DATA_ROLES, UNLABELED, DatasetBase, Datum, RoleSplits, build_dataset
from .evaluator import Classification, EvaluatorBase, build_evaluator, compute_accuracy
from .logger import Logger, setup_logger
from .meters import AverageMeter, MetricMeter
from .optim import build_lr_scheduler, build_optimizer
from .precision import PRECISIONS, autocast, make_grad_scaler, resolve_precision, weight_dtype
from .registry import DATASET_REGISTRY, EVALUATOR_REGISTRY, TRAINER_REGISTRY, Registry, check_availability
from .trainer import SimpleTrainer, TrainerBase, TrainerX, TrainerXU, build_trainer
from .transforms import build_transform
from .utils import (
    check_isfile,
    collect_env_info,
    count_num_param,
    listdir_nohidden,
    mkdir_if_missing,
    read_image,
    read_json,
    set_random_seed,
    write_json,
)

__all__ = [
    "AverageMeter", "Classification", "DATASET_REGISTRY", "DATA_ROLES", "PRECISIONS", "RoleSplits",
    "checkpoint_epoch", "pointed_checkpoint", "weight_dtype", "DataManager", "DatasetBase", "DatasetWrapper", "Datum",
    "EVALUATOR_REGISTRY", "EvaluatorBase", "Logger", "MetricMeter", "Registry", "SimpleTrainer", "TRAINER_REGISTRY",
    "TrainerBase", "TrainerX", "TrainerXU", "UNLABELED", "autocast", "build_data_loader", "build_dataset",
    "build_evaluator", "build_lr_scheduler", "build_optimizer", "build_sampler", "build_trainer",
    "build_transform", "check_availability", "check_isfile", "collect_env_info", "compute_accuracy",
    "count_num_param", "get_cfg_default", "listdir_nohidden", "load_checkpoint", "load_pretrained_weights",
    "make_grad_scaler", "mkdir_if_missing", "read_image", "read_json", "resume_from_checkpoint",
    "resolve_precision", "save_checkpoint", "set_random_seed", "setup_logger", "write_json",
]
