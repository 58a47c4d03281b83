"""Dassl's default configuration tree (``get_cfg_default``): every key CoOp/PromptKD configs and scripts touch.

Values are Dassl's defaults; method keys (``TRAINER.<NAME>.*``) are added by ``trainers/config.py:extend_cfg``.
The project's own engine keys are ``PROJECT_KEYS`` (``add_project_keys`` declares them in a Dassl tree too).
``ENGINE_SCHEMA`` gives every engine key its rule (type and choices or range, ``engine/schema.py``).
The tree is a ``Config``: yacs' merge, except that an int is accepted (as a float) where a float is declared.
"""
from __future__ import annotations

import os
from typing import Any

from yacs.config import CfgNode as CN

from .compile import COMPILE_MODES
from .data_manager import SAMPLERS
from .decoding import DECODERS
from .errors import ConfigError
from .optim import AVAI_OPTIMS, AVAI_SCHEDULERS, AVAI_WARMUPS
from .schema import FRACTION, NON_NEGATIVE, POSITIVE, Bool, Choice, Int, Number, Rule, Seq, SquareSize, Text
from .transforms import AVAI_CHOICES, INTERPOLATION_MODES


def _int_as_float(value: Any, default: Any) -> Any:
    """``float(value)`` when ``default`` is a float and ``value`` an int (not a bool); else ``value`` unchanged."""
    if type(default) is float and type(value) is int:
        return float(value)
    return value


def _widen_ints(other: dict, ours: dict) -> None:
    """In ``other`` (a loaded yaml tree, in place), turn ints into floats wherever ``ours`` declares a float."""
    for key, value in other.items():
        if key not in ours:
            continue
        if isinstance(value, dict) and isinstance(ours[key], dict):
            _widen_ints(value, ours[key])
        else:
            other[key] = _int_as_float(value, ours[key])


class Config(CN):
    """yacs ``CfgNode`` whose merges accept ``25`` for a key declared ``25.0`` (upstream yamls write ints)."""

    @classmethod
    def _decode_cfg_value(cls, value: Any) -> Any:
        """As yacs, but a merged sub-tree becomes a plain ``CfgNode`` (the type of the declared nodes)."""
        return CN._decode_cfg_value(value)

    def merge_from_other_cfg(self, cfg_other: CN) -> None:
        _widen_ints(cfg_other, self)
        super().merge_from_other_cfg(cfg_other)

    def merge_from_list(self, cfg_list: list) -> None:
        widened = list(cfg_list)
        for i in range(0, len(widened) - 1, 2):
            path, node = str(widened[i]).split("."), self
            for part in path[:-1]:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict) and path[-1] in node:
                widened[i + 1] = _int_as_float(self._decode_cfg_value(widened[i + 1]), node[path[-1]])
        super().merge_from_list(widened)


_C = Config()

_C.VERSION = 1
_C.OUTPUT_DIR = "./output"
_C.RESUME = ""
_C.SEED = -1
_C.USE_CUDA = True
_C.VERBOSE = True

_C.INPUT = CN()
_C.INPUT.SIZE = (224, 224)
_C.INPUT.INTERPOLATION = "bilinear"
_C.INPUT.TRANSFORMS = ()
_C.INPUT.NO_TRANSFORM = False
_C.INPUT.PIXEL_MEAN = [0.485, 0.456, 0.406]
_C.INPUT.PIXEL_STD = [0.229, 0.224, 0.225]
_C.INPUT.CROP_PADDING = 4
_C.INPUT.RRCROP_SCALE = (0.08, 1.0)
_C.INPUT.CUTOUT_N = 1
_C.INPUT.CUTOUT_LEN = 16
_C.INPUT.GN_MEAN = 0.0
_C.INPUT.GN_STD = 0.15
_C.INPUT.RANDAUGMENT_N = 2
_C.INPUT.RANDAUGMENT_M = 10
_C.INPUT.COLORJITTER_B = 0.4
_C.INPUT.COLORJITTER_C = 0.4
_C.INPUT.COLORJITTER_S = 0.4
_C.INPUT.COLORJITTER_H = 0.1
_C.INPUT.RGS_P = 0.2
_C.INPUT.GB_P = 0.5
_C.INPUT.GB_K = 21

_C.DATASET = CN()
_C.DATASET.ROOT = ""
_C.DATASET.NAME = ""
_C.DATASET.SOURCE_DOMAINS = ()
_C.DATASET.TARGET_DOMAINS = ()
_C.DATASET.NUM_LABELED = -1
_C.DATASET.NUM_SHOTS = -1
_C.DATASET.VAL_PERCENT = 0.1
_C.DATASET.STL10_FOLD = -1
_C.DATASET.CIFAR_C_TYPE = ""
_C.DATASET.CIFAR_C_LEVEL = 1
_C.DATASET.ALL_AS_UNLABELED = False

_C.DATALOADER = CN()
_C.DATALOADER.NUM_WORKERS = 4
_C.DATALOADER.K_TRANSFORMS = 1
_C.DATALOADER.RETURN_IMG0 = False
_C.DATALOADER.TRAIN_X = CN()
_C.DATALOADER.TRAIN_X.SAMPLER = "RandomSampler"
_C.DATALOADER.TRAIN_X.BATCH_SIZE = 32
_C.DATALOADER.TRAIN_X.N_DOMAIN = 0
_C.DATALOADER.TRAIN_X.N_INS = 16
_C.DATALOADER.TRAIN_U = CN()
_C.DATALOADER.TRAIN_U.SAME_AS_X = True
_C.DATALOADER.TRAIN_U.SAMPLER = "RandomSampler"
_C.DATALOADER.TRAIN_U.BATCH_SIZE = 32
_C.DATALOADER.TRAIN_U.N_DOMAIN = 0
_C.DATALOADER.TRAIN_U.N_INS = 16
_C.DATALOADER.TEST = CN()
_C.DATALOADER.TEST.SAMPLER = "SequentialSampler"
_C.DATALOADER.TEST.BATCH_SIZE = 32

_C.MODEL = CN()
_C.MODEL.INIT_WEIGHTS = ""
_C.MODEL.BACKBONE = CN()
_C.MODEL.BACKBONE.NAME = ""
_C.MODEL.BACKBONE.PRETRAINED = True
_C.MODEL.HEAD = CN()
_C.MODEL.HEAD.NAME = ""
_C.MODEL.HEAD.HIDDEN_LAYERS = ()
_C.MODEL.HEAD.ACTIVATION = "relu"
_C.MODEL.HEAD.BN = True
_C.MODEL.HEAD.DROPOUT = 0.0

_C.OPTIM = CN()
_C.OPTIM.NAME = "adam"
_C.OPTIM.LR = 0.0003
_C.OPTIM.WEIGHT_DECAY = 5e-4
_C.OPTIM.MOMENTUM = 0.9
_C.OPTIM.SGD_DAMPNING = 0
_C.OPTIM.SGD_NESTEROV = False
_C.OPTIM.RMSPROP_ALPHA = 0.99
_C.OPTIM.ADAM_BETA1 = 0.9
_C.OPTIM.ADAM_BETA2 = 0.999
_C.OPTIM.STAGED_LR = False
_C.OPTIM.NEW_LAYERS = ()
_C.OPTIM.BASE_LR_MULT = 0.1
_C.OPTIM.LR_SCHEDULER = "single_step"
_C.OPTIM.STEPSIZE = (-1,)
_C.OPTIM.GAMMA = 0.1
_C.OPTIM.MAX_EPOCH = 10
_C.OPTIM.WARMUP_EPOCH = -1
_C.OPTIM.WARMUP_TYPE = "linear"
_C.OPTIM.WARMUP_CONS_LR = 1e-5
_C.OPTIM.WARMUP_MIN_LR = 1e-5
_C.OPTIM.WARMUP_RECOUNT = True

_C.TRAIN = CN()
_C.TRAIN.CHECKPOINT_FREQ = 0
_C.TRAIN.PRINT_FREQ = 10
_C.TRAIN.COUNT_ITER = "train_x"

_C.TEST = CN()
_C.TEST.EVALUATOR = "Classification"
_C.TEST.PER_CLASS_RESULT = False
_C.TEST.COMPUTE_CMAT = False
_C.TEST.NO_TEST = False
_C.TEST.SPLIT = "test"
_C.TEST.FINAL_MODEL = "last_step"

_C.TRAINER = CN()
_C.TRAINER.NAME = ""

PROJECT_KEYS: dict[str, tuple[Any, Rule]] = {
    # the trainer config's file stem (train.py), written to results.json
    "CONFIG_NAME": ("", Text()),
    # under torchrun: BatchNorm of the trained models uses the global batch's statistics
    "TRAIN.SYNC_BN": (True, Bool()),
    # torch.compile of the frozen CLIP forwards (engine/compile.py): none | compile | cudagraphs
    "TRAIN.COMPILE": ("none", Choice(COMPILE_MODES)),
    # keep data loader workers alive across epochs and loader restarts (no respawn stalls); the batches do not
    # depend on it (engine/data_stream.py)
    "DATALOADER.PERSISTENT_WORKERS": (False, Bool()),
    # minutes between step-level resume states (0: only at epoch ends and on preemption); bounds what a hard kill
    # (SIGKILL, a crash of the node) loses inside an epoch
    "TRAIN.STEP_RESUME_MINUTES": (10.0, NON_NEGATIVE),
    # replay the whole training step as one CUDA graph (engine/cuda_graph.py)
    "TRAIN.CUDA_GRAPH": (False, Bool()),
    # how images become tensors (engine/decoding.py): pil (Dassl's PIL transforms) | tensor (uint8 tensors, draft
    # JPEG decoding; the same random crops and flips, resampled by torch)
    "INPUT.DECODER": ("pil", Choice(DECODERS)),
    # training images decoded once and stored at this shorter side, the random crops taken from them
    # (engine/image_cache.py; 0: off); in IMAGE_CACHE_DIR ("" = <OUTPUT_DIR>/image_cache)
    "DATALOADER.IMAGE_CACHE_SIDE": (0, Int(0, note="0: off")),
    "DATALOADER.IMAGE_CACHE_DIR": ("", Text()),
}
"""The engine's keys beyond Dassl's: dotted name → (default, rule)."""


def add_project_keys(cfg: CN) -> CN:
    """Declare ``PROJECT_KEYS`` where ``cfg`` lacks them (our tree has them; Dassl's own tree gets them through
    ``trainers.config.extend_cfg``), in place; also returned."""
    for dotted, (value, _) in PROJECT_KEYS.items():
        *parents, key = dotted.split(".")
        node = cfg
        for name in parents:
            node = node[name]
        if key not in node:
            node[key] = value
    return cfg


add_project_keys(_C)

_TEXTS = Seq(Text())
ENGINE_SCHEMA: dict[str, Rule] = {
    "VERSION": Int(),
    "OUTPUT_DIR": Text(),
    "RESUME": Text(),
    "SEED": Int(-1, note="-1: not seeded"),
    "USE_CUDA": Bool(),
    "VERBOSE": Bool(),
    "INPUT.SIZE": SquareSize(),
    "INPUT.INTERPOLATION": Choice(INTERPOLATION_MODES),
    "INPUT.TRANSFORMS": Seq(Choice(AVAI_CHOICES)),
    "INPUT.NO_TRANSFORM": Bool(),
    "INPUT.PIXEL_MEAN": Seq(Number(), 3),
    "INPUT.PIXEL_STD": Seq(POSITIVE, 3),
    "INPUT.CROP_PADDING": Int(0),
    "INPUT.RRCROP_SCALE": Seq(Number(0, 1, low_open=True), 2),
    "INPUT.CUTOUT_N": Int(0),
    "INPUT.CUTOUT_LEN": Int(0),
    "INPUT.GN_MEAN": Number(),
    "INPUT.GN_STD": NON_NEGATIVE,
    "INPUT.RANDAUGMENT_N": Int(0),
    "INPUT.RANDAUGMENT_M": Int(0),
    "INPUT.COLORJITTER_B": NON_NEGATIVE,
    "INPUT.COLORJITTER_C": NON_NEGATIVE,
    "INPUT.COLORJITTER_S": NON_NEGATIVE,
    "INPUT.COLORJITTER_H": Number(0, 0.5),
    "INPUT.RGS_P": FRACTION,
    "INPUT.GB_P": FRACTION,
    "INPUT.GB_K": Int(1),
    "DATASET.ROOT": Text(),
    "DATASET.NAME": Text(),
    "DATASET.SOURCE_DOMAINS": _TEXTS,
    "DATASET.TARGET_DOMAINS": _TEXTS,
    "DATASET.NUM_LABELED": Int(-1, note="-1: every image"),
    "DATASET.NUM_SHOTS": Int(-1, note="images per class; 0 or -1: every image"),
    "DATASET.VAL_PERCENT": FRACTION,
    "DATASET.STL10_FOLD": Int(-1),
    "DATASET.CIFAR_C_TYPE": Text(),
    "DATASET.CIFAR_C_LEVEL": Int(1, 5),
    "DATASET.ALL_AS_UNLABELED": Bool(),
    "DATALOADER.NUM_WORKERS": Int(0),
    "DATALOADER.K_TRANSFORMS": Int(1),
    "DATALOADER.RETURN_IMG0": Bool(),
    "DATALOADER.TRAIN_X.SAMPLER": Choice(SAMPLERS),
    "DATALOADER.TRAIN_X.BATCH_SIZE": Int(1),
    "DATALOADER.TRAIN_X.N_DOMAIN": Int(0),
    "DATALOADER.TRAIN_X.N_INS": Int(0),
    "DATALOADER.TRAIN_U.SAME_AS_X": Bool(),
    "DATALOADER.TRAIN_U.SAMPLER": Choice(SAMPLERS),
    "DATALOADER.TRAIN_U.BATCH_SIZE": Int(1),
    "DATALOADER.TRAIN_U.N_DOMAIN": Int(0),
    "DATALOADER.TRAIN_U.N_INS": Int(0),
    "DATALOADER.TEST.SAMPLER": Choice(SAMPLERS),
    "DATALOADER.TEST.BATCH_SIZE": Int(1),
    "MODEL.INIT_WEIGHTS": Text(),
    "MODEL.BACKBONE.NAME": Text(),
    "MODEL.BACKBONE.PRETRAINED": Bool(),
    "MODEL.HEAD.NAME": Text(),
    "MODEL.HEAD.HIDDEN_LAYERS": Seq(Int(1)),
    "MODEL.HEAD.ACTIVATION": Text(),
    "MODEL.HEAD.BN": Bool(),
    "MODEL.HEAD.DROPOUT": Number(0, 1, high_open=True),
    "OPTIM.NAME": Choice(AVAI_OPTIMS),
    "OPTIM.LR": POSITIVE,
    "OPTIM.WEIGHT_DECAY": NON_NEGATIVE,
    "OPTIM.MOMENTUM": Number(0, 1, high_open=True),
    "OPTIM.SGD_DAMPNING": Number(0, 1),
    "OPTIM.SGD_NESTEROV": Bool(),
    "OPTIM.RMSPROP_ALPHA": Number(0, 1, low_open=True),
    "OPTIM.ADAM_BETA1": Number(0, 1, high_open=True),
    "OPTIM.ADAM_BETA2": Number(0, 1, high_open=True),
    "OPTIM.STAGED_LR": Bool(),
    "OPTIM.NEW_LAYERS": _TEXTS,
    "OPTIM.BASE_LR_MULT": NON_NEGATIVE,
    "OPTIM.LR_SCHEDULER": Choice(AVAI_SCHEDULERS),
    "OPTIM.STEPSIZE": Seq(Int()),
    "OPTIM.GAMMA": POSITIVE,
    "OPTIM.MAX_EPOCH": Int(0),
    "OPTIM.WARMUP_EPOCH": Int(-1, note="0 or -1: no warm-up"),
    "OPTIM.WARMUP_TYPE": Choice(AVAI_WARMUPS),
    "OPTIM.WARMUP_CONS_LR": POSITIVE,
    "OPTIM.WARMUP_MIN_LR": NON_NEGATIVE,
    "OPTIM.WARMUP_RECOUNT": Bool(),
    "TRAIN.CHECKPOINT_FREQ": Int(0, note="0: only the last epoch"),
    "TRAIN.PRINT_FREQ": Int(1),
    "TRAIN.COUNT_ITER": Choice(("train_x", "train_u", "smaller_one")),
    "TEST.EVALUATOR": Text(),
    "TEST.PER_CLASS_RESULT": Bool(),
    "TEST.COMPUTE_CMAT": Bool(),
    "TEST.NO_TEST": Bool(),
    "TEST.SPLIT": Choice(("test", "val")),
    "TEST.FINAL_MODEL": Choice(("last_step", "best_val")),
    "TRAINER.NAME": Text(),
    **{dotted: rule for dotted, (_, rule) in PROJECT_KEYS.items()},
}
"""The rule of every engine key (Dassl's tree and ``PROJECT_KEYS``); registry names (trainer, dataset, evaluator)
are checked when they are built, with a "did you mean"."""


WORKERS_PER_CPU = 4
"""Loader workers a run may start per CPU this process may use (``DATALOADER.NUM_WORKERS``; more only queue)."""
MIN_WORKER_LIMIT = 8
"""The fewest the limit allows on any machine: the shipped configs' count."""


def worker_limit() -> int:
    """The most loader workers a run of this process may start: :data:`WORKERS_PER_CPU` per CPU it may use,
    :data:`MIN_WORKER_LIMIT` at least."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(MIN_WORKER_LIMIT, WORKERS_PER_CPU * cpus)


def check_workers(cfg: CN) -> None:
    """ConfigError when ``DATALOADER.NUM_WORKERS`` asks for more loader processes than this machine runs
    (:func:`worker_limit`; its rule in ``ENGINE_SCHEMA`` checks the type, this the machine, where the run starts)."""
    workers, limit = cfg.DATALOADER.NUM_WORKERS, worker_limit()
    if workers > limit:
        raise ConfigError(f"DATALOADER.NUM_WORKERS is {workers}; this machine runs at most {limit} loader processes "
                          f"for a run ({WORKERS_PER_CPU} per CPU this process may use, {MIN_WORKER_LIMIT} at least): "
                          "set it to at most that (0 loads in the run's own process)")


def get_cfg_default() -> CN:
    """A fresh, mutable copy of the default configuration."""
    return _C.clone()
