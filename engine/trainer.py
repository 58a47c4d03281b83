"""Dassl's trainer lifecycle: TrainerBase → SimpleTrainer → TrainerX (labelled) / TrainerXU (labelled + unlabelled).

Differences from Dassl, all on purpose: checkpoints also store RNG states, and after every epoch the whole training
state is written atomically to ``<OUTPUT_DIR>/resume.pth.tar`` (one file, replaced each epoch, removed when the run
finishes), so an interrupted run (Ctrl-C, a kill, a crash) rerun with the same command or ``--resume`` ends with
the same weights as an uninterrupted one whatever ``TRAIN.CHECKPOINT_FREQ`` is; ``load_model`` works for
last-step checkpoints, tensorboard is optional, and every test split evaluated outside the training loop is
written to ``<OUTPUT_DIR>/results.json`` (trainers that override ``test`` call ``save_results`` themselves).
The engine also owns the run's precision (``prec``, ``scaler``, ``autocast()``) and offers public hooks:
``deploy()`` before the final test, ``before_test()`` / ``after_test()`` around every evaluation, and the
``validating`` state (True while the per-epoch validation runs). See docs/ARCHITECTURE.md.
"""
from __future__ import annotations

import contextlib
import datetime
import glob
import os
import time
from collections import OrderedDict

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from tqdm import tqdm

from . import preemption
from .checkpoint import (
    atomic_torch_save,
    check_plain,
    get_rng_state,
    load_checkpoint,
    load_model_state,
    pointed_checkpoint,
    resume_from_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from .cuda_graph import StepGraph, check_cuda_graph, make_capturable
from .data_manager import DataManager
from .data_stream import LoaderStream
from .decoding import check_decoder
from .distributed import (
    any_rank,
    barrier,
    gather_in_order,
    is_distributed,
    is_main,
    prepare_backward,
    set_sampler_epoch,
    wrap_trainable_models,
)
from .errors import InvalidInputError
from .evaluator import build_evaluator
from .inputs import commit as commit_inputs
from .meters import AverageMeter, MetricMeter
from .precision import autocast, make_grad_scaler, resolve_precision
from .registry import TRAINER_REGISTRY, check_availability
from .run_files import make_folder
from .runs import RESULTS_FILE, RESUME_FILE
from .schema import KeyTable
from .utils import write_json


def _as_list(names) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


class TrainerBase:
    """Registered models/optimisers/schedulers, checkpointing and the generic ``train`` loop."""

    def __init__(self) -> None:
        self._models: OrderedDict[str, nn.Module] = OrderedDict()
        self._optims: OrderedDict[str, torch.optim.Optimizer | None] = OrderedDict()
        self._scheds: OrderedDict[str, object] = OrderedDict()
        self._writer = None
        self._ddp: list = []  # DDP wrappers of the trainable models under torchrun (engine/distributed.py)
        self.scaler: torch.amp.GradScaler | None = None
        self.resume_step: dict | None = None  # a step-level resume state's position, used by the next run_epoch
        self.selected_on: str | None = None  # the split the deployed model was selected on (best_val): val or test

    # ----- models -----------------------------------------------------------------------------------------
    def register_model(self, name: str = "model", model: nn.Module | None = None, optim=None, sched=None) -> None:
        """Register a model with its optimiser and scheduler under ``name`` (its checkpoint folder)."""
        if self.__dict__.get("_models") is None:
            raise AttributeError("Cannot assign model before super().__init__() call")
        if self.__dict__.get("_optims") is None or self.__dict__.get("_scheds") is None:
            raise AttributeError("Cannot assign optim/sched before super().__init__() call")
        assert name not in self._models, f"Found duplicate model name {name!r}"
        self._models[name] = model
        self._optims[name] = optim
        self._scheds[name] = sched

    def get_model_names(self, names=None) -> list[str]:
        real = list(self._models.keys())
        if names is None:
            return real
        names = _as_list(names)
        for name in names:
            assert name in real, f"Unknown model name {name!r}; registered: {real}"
        return names

    def get_model(self, name: str) -> nn.Module:
        """The model registered as ``name``."""
        return self._models[self.get_model_names(name)[0]]

    def get_optimizer(self, name: str) -> torch.optim.Optimizer | None:
        """The optimiser registered with model ``name`` (None when it has none)."""
        return self._optims[self.get_model_names(name)[0]]

    def set_model_mode(self, mode: str = "train", names=None) -> None:
        for name in self.get_model_names(names):
            if mode == "train":
                self._models[name].train()
            elif mode in ("test", "eval"):
                self._models[name].eval()
            else:
                raise KeyError(f"Unknown model mode {mode!r} (train, test or eval)")

    def update_lr(self, names=None) -> None:
        """Step every registered scheduler once (trainers call it at the last batch of an epoch)."""
        for name in self.get_model_names(names):
            if self._scheds[name] is not None:
                self._scheds[name].step()

    def get_current_lr(self, names=None) -> float:
        """lr of the first param group of the first registered optimiser (0.0 when none)."""
        for name in self.get_model_names(names):
            if self._optims[name] is not None:
                return self._optims[name].param_groups[0]["lr"]
        return 0.0

    # ----- checkpoints ------------------------------------------------------------------------------------
    def save_model(self, epoch: int, directory: str, is_best: bool = False, val_result: float | None = None,
                   model_name: str = "") -> None:
        """Write ``<directory>/<name>/model.pth.tar-<epoch+1>`` (or ``model_name``) for every registered model
        (rank 0 writes, every process waits for the files)."""
        if not is_main():
            barrier()
            return
        rng_state = get_rng_state()
        for name in self.get_model_names():
            optim, sched = self._optims[name], self._scheds[name]
            state = {
                "state_dict": self._models[name].state_dict(),
                "epoch": epoch + 1,
                "optimizer": optim.state_dict() if optim is not None else None,
                "scheduler": sched.state_dict() if sched is not None else None,
                "val_result": val_result,
                "rng_state": rng_state,
            }
            if val_result is not None:
                state["selected_on"] = self.selected_on
            save_checkpoint(state, os.path.join(directory, name), is_best=is_best, model_name=model_name)
        barrier()

    def save_resume_state(self, epoch: int, best_result: float | None = None, step: dict | None = None) -> None:
        """Replace ``<OUTPUT_DIR>/resume.pth.tar`` with the state after ``epoch`` (0-based): every model, optimiser
        and scheduler, the grad scaler, the RNG states and the best val result, in one atomic write (rank 0 writes,
        every process waits for the file). ``step`` makes it a step-level state: the position reached inside the
        next epoch (``{"batch": steps done, "streams": {loader: LoaderStream.state()}}``)."""
        if not is_main():
            barrier()
            return
        state = {
            "epoch": epoch + 1,
            "models": {name: {"state_dict": self._models[name].state_dict(),
                              "optimizer": self._optims[name].state_dict() if self._optims[name] is not None else None,
                              "scheduler": self._scheds[name].state_dict() if self._scheds[name] is not None else None}
                       for name in self.get_model_names()},
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng_state": get_rng_state(),
            "best_result": best_result,
            "step": step,
        }
        check_plain(state, RESUME_FILE)
        atomic_torch_save(state, os.path.join(self.output_dir, RESUME_FILE))
        barrier()

    def _resume_from_state(self, path: str) -> int:
        """Restore what ``save_resume_state`` wrote; return the number of finished epochs."""
        state = load_checkpoint(path)
        names = self.get_model_names()
        if sorted(state["models"]) != sorted(names):
            raise InvalidInputError(f"{path} holds the models {sorted(state['models'])}, this trainer has "
                                    f"{sorted(names)}; use another OUTPUT_DIR or move the file away")
        for name in names:
            saved = state["models"][name]
            load_model_state(self._models[name], saved, f"{path} ({name})")
            if self._optims[name] is not None and saved["optimizer"] is not None:
                self._optims[name].load_state_dict(saved["optimizer"])
            if self._scheds[name] is not None and saved["scheduler"] is not None:
                self._scheds[name].load_state_dict(saved["scheduler"])
        if self.scaler is not None and state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        set_rng_state(state["rng_state"])
        if state["best_result"] is not None:
            self.best_result = state["best_result"]
        print(f'Resuming from "{path}" (models, optimisers, schedulers, RNG states)')
        print(f"Previous epoch: {state['epoch']}")
        self.resume_step = state.get("step")
        if self.resume_step:
            print(f"Resuming inside epoch {state['epoch'] + 1} after batch {self.resume_step['batch']} (the data "
                  "loaders continue their passes where they stopped)")
        return state["epoch"]

    def resume_model_if_exist(self, directory: str) -> int:
        """Resume from ``<directory>/resume.pth.tar``, else from every ``<directory>/<name>/checkpoint``; return the
        epoch to start from (0 if none)."""
        if os.path.isfile(os.path.join(directory, RESUME_FILE)):
            return self._resume_from_state(os.path.join(directory, RESUME_FILE))
        names = self.get_model_names()
        if not names or any(pointed_checkpoint(os.path.join(directory, n)) is None for n in names):
            print("No checkpoint found, train from scratch")
            return 0
        print(f'Found checkpoint at "{directory}" (will resume training)')
        start_epoch = 0
        for i, name in enumerate(names):
            start_epoch = resume_from_checkpoint(os.path.join(directory, name), self._models[name],
                                                 self._optims[name], self._scheds[name], restore_rng=i == 0)
        return start_epoch

    def load_model(self, directory: str, epoch: int | str | None = None) -> None:
        """Load ``model-best.pth.tar`` (default), ``model.pth.tar-<epoch>`` or, for ``epoch="last"``, the last saved
        checkpoint (named in the ``checkpoint`` pointer file) of every model from ``directory``."""
        if not directory:
            print("Note that load_model() is skipped as no pretrained model is given")
            return
        for name in self.get_model_names():
            if epoch == "last":
                path = pointed_checkpoint(os.path.join(directory, name))
                if path is None:
                    raise FileNotFoundError(f'No saved model in "{os.path.join(directory, name)}" (its "checkpoint" '
                                            "file is missing): train the model first")
            else:
                model_file = "model-best.pth.tar" if epoch is None else f"model.pth.tar-{epoch}"
                path = os.path.join(directory, name, model_file)
            if not os.path.exists(path):
                hint = " (pass --load-epoch N to load model.pth.tar-N, or --load-epoch last)" if epoch is None else ""
                raise FileNotFoundError(f'Model not found at "{path}"{hint}')
            checkpoint = load_checkpoint(path)
            load_model_state(self._models[name], checkpoint, path)
            if epoch is None and "selected_on" in checkpoint:  # model-best.pth.tar: chosen on the split it records
                self.selected_on = checkpoint["selected_on"]
            val_result = checkpoint.get("val_result")
            extra = f", val_result={val_result:.2f}" if val_result is not None else ""
            print(f'Load {path} to {name} (epoch={checkpoint.get("epoch")}{extra})')

    # ----- tensorboard (optional) -------------------------------------------------------------------------
    def init_writer(self, log_dir: str) -> None:
        """Create a tensorboard writer (rank 0) when tensorboard is installed; silently skip otherwise."""
        if self._writer is not None or not is_main():
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return
        print(f"Initialize tensorboard (log_dir={log_dir})")
        make_folder(log_dir)  # inside the run folder: never through a link
        self._writer = SummaryWriter(log_dir=log_dir)

    def close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def write_scalar(self, tag: str, scalar_value, global_step: int | None = None) -> None:
        if self._writer is not None:
            self._writer.add_scalar(tag, scalar_value, global_step)

    # ----- loop -------------------------------------------------------------------------------------------
    def train(self, start_epoch: int, max_epoch: int) -> None:
        """``before_train``; per epoch ``before_epoch → run_epoch → after_epoch``; ``after_train``."""
        self.start_epoch = start_epoch
        self.max_epoch = max_epoch
        self.before_train()
        with preemption.deferred():  # a preemption signal ends the run at the next step or epoch boundary
            for epoch in range(self.start_epoch, self.max_epoch):
                self.epoch = epoch
                self.before_epoch()
                self.run_epoch()
                self.after_epoch()
                if preemption.requested():
                    raise preemption.Preempted(f"preempted ({preemption.requested()}): the state after epoch "
                                               f"{epoch + 1}/{self.max_epoch} is saved; rerun the same command to "
                                               "continue")
        self.after_train()

    def before_train(self) -> None:
        pass

    def after_train(self) -> None:
        pass

    def before_epoch(self) -> None:
        pass

    def after_epoch(self) -> None:
        pass

    def run_epoch(self) -> None:
        raise NotImplementedError

    def test(self, split: str | None = None):
        raise NotImplementedError

    def parse_batch_train(self, batch):
        raise NotImplementedError

    def parse_batch_test(self, batch):
        raise NotImplementedError

    def forward_backward(self, batch):
        raise NotImplementedError

    def model_inference(self, input):
        raise NotImplementedError

    # ----- optimisation -----------------------------------------------------------------------------------
    def check_finite(self, rows: list[tuple[object, dict[str, float]]]) -> None:
        """Raise FloatingPointError naming the epoch/batch/step of the first step whose summary (``MetricMeter.sync``
        rows tagged ``(epoch, batch)``) holds an infinite or NaN value."""
        for tag, values in rows:
            bad = {k: v for k, v in values.items() if not np.isfinite(v)}
            if not bad:
                continue
            epoch, batch = tag if tag is not None else (getattr(self, "epoch", 0), getattr(self, "batch_idx", 0))
            num_batches = getattr(self, "num_batches", 0)
            where = f"epoch {epoch + 1}/{getattr(self, 'max_epoch', '?')}, batch {batch + 1}/{num_batches or '?'}"
            raise FloatingPointError(
                f"Loss is infinite or NaN ({', '.join(f'{k} {v}' for k, v in bad.items())}) at {where} "
                f"(step {epoch * num_batches + batch}); stopping. Lower OPTIM.LR, use PREC fp32/amp, or check this "
                "batch"
            )

    def model_zero_grad(self, names=None) -> None:
        for name in self.get_model_names(names):
            if self._optims[name] is not None:
                self._optims[name].zero_grad()

    def model_backward(self, loss: torch.Tensor) -> None:
        """(Scaled) backward; a non-finite loss is caught when the step's summary is read (``check_finite``), so
        the step waits for nothing on the device."""
        prepare_backward(self._ddp)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def model_update(self, names=None) -> None:
        for name in self.get_model_names(names):
            if self._optims[name] is not None:
                if self.scaler is not None:
                    self.scaler.step(self._optims[name])
                else:
                    self._optims[name].step()
        if self.scaler is not None:
            self.scaler.update()

    def model_backward_and_update(self, loss: torch.Tensor, names=None) -> None:
        """zero_grad → (scaled) backward → optimiser step."""
        self.model_zero_grad(names)
        self.model_backward(loss)
        self.model_update(names)


class SimpleTrainer(TrainerBase):
    """Data, model and evaluator of one run, checkpoint/resume around ``train`` and the ``test`` loop.

    ``NS`` names the trainer's config namespace ``TRAINER.<NS>`` (its PREC is the run's precision; fp32 without
    one) and ``CONFIG_KEYS`` declares that namespace's keys; ``DATA_ROLE`` is the data role its dataset is built for
    (engine.dataset_base.DATA_ROLES).
    """

    NS = ""
    DATA_ROLE = "standard"
    CONFIG_KEYS: KeyTable = {}
    """The keys of ``TRAINER.<NS>``: key -> (default, rule); the project's config collects them from its trainers."""
    RECORDED_KEYS: tuple[str, ...] = ()
    """The keys of ``TRAINER.<NS>`` that shape the model a run saves but that its tensors do not all say (any such
    setting: a prompt learner's words or class-token position, an adapter's residual ratio): a run that reads the
    model (``--eval-only``, a plug-in: :meth:`plugged_run`) takes their values from what the run that saved it
    records (train.py)."""

    @classmethod
    def plugged_run(cls, cfg) -> tuple[str, type] | None:
        """The finished run whose saved model this trainer reads under ``cfg`` besides ``--model-dir`` (a plug-in's
        seen branch), and the trainer class that made it; None when it reads none."""
        return None

    @classmethod
    def borrowed_keys(cls, cfg) -> tuple[str, ...]:
        """The keys of other trainers' namespaces (dotted) this trainer reads under ``cfg``; train.py refuses any
        other key of another trainer's namespace that a config file or the command line sets."""
        return ()

    def __init__(self, cfg) -> None:
        super().__init__()
        self.check_cfg(cfg)
        use_cuda = torch.cuda.is_available() and cfg.USE_CUDA
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.start_epoch = self.epoch = 0
        self.max_epoch = cfg.OPTIM.MAX_EPOCH
        self.output_dir = cfg.OUTPUT_DIR
        self.cfg = cfg
        self.validating = False
        self.prec = resolve_precision(self.ns.PREC if self.NS and "PREC" in self.ns else "fp32", self.device)
        self.scaler = make_grad_scaler(self.prec, self.device)
        self.build_data_loader()
        self.build_model()
        self._ddp = wrap_trainable_models(self._models, self.device, cfg.TRAIN.SYNC_BN)
        check_cuda_graph(cfg, self.device, self.prec, self, is_distributed())
        self.step_graph = None
        if cfg.TRAIN.get("CUDA_GRAPH", False):
            optims = [o for o in self._optims.values() if o is not None]
            make_capturable(optims)
            self.step_graph = StepGraph(self.train_step, optims)
        self.evaluator = build_evaluator(cfg, lab2cname=self.lab2cname)
        self.best_result = -np.inf
        self._state_time = time.monotonic()  # when the last resume state was written (TRAIN.STEP_RESUME_MINUTES)

    @property
    def ns(self):
        """The trainer's options, ``cfg.TRAINER.<NS>``."""
        return self.cfg.TRAINER[self.NS]

    def autocast(self):
        """Autocast context of this run's precision (a no-op for fp32 and fp16)."""
        capturing = self.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        return autocast(self.prec, self.device, cache=not capturing)

    def run_step(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The trainer's ``train_step(inputs)`` (device tensors in, loss summary tensors out), replayed as one CUDA
        graph with TRAIN.CUDA_GRAPH (engine/cuda_graph.py)."""
        if self.step_graph is None:
            return self.train_step(inputs)
        return self.step_graph(inputs)

    def check_cfg(self, cfg) -> None:
        """Hook to validate trainer-specific settings before any data is prepared (overrides call ``super()``); here
        what the image decoder covers (``INPUT.DECODER``)."""
        check_decoder(cfg)

    def build_data_loader(self) -> None:
        """Create ``self.dm`` (the dataset built for ``DATA_ROLE``) and the loader/label attributes trainers use."""
        dm = DataManager(self.cfg, role=self.DATA_ROLE)
        self.train_loader_x = dm.train_loader_x
        self.train_loader_u = dm.train_loader_u
        self.val_loader = dm.val_loader
        self.test_loader = dm.test_loader
        self.num_classes = dm.num_classes
        self.num_source_domains = dm.num_source_domains
        self.lab2cname = dm.lab2cname
        self.dm = dm

    def build_model(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement build_model() and register its models")

    def train(self) -> None:
        super().train(self.start_epoch, self.max_epoch)

    def before_train(self) -> None:
        if self.dm.cache_images():  # DATALOADER.IMAGE_CACHE_SIDE: decoded once, before the first step
            self.train_loader_x, self.train_loader_u = self.dm.train_loader_x, self.dm.train_loader_u
        directory = self.cfg.RESUME or self.cfg.OUTPUT_DIR
        if self.cfg.RESUME and not os.path.isfile(os.path.join(directory, RESUME_FILE)) and any(
            pointed_checkpoint(os.path.join(directory, n)) is None for n in self.get_model_names()
        ):
            raise FileNotFoundError(f'RESUME "{directory}" has no checkpoint for the models '
                                    f"{self.get_model_names()} (expected {RESUME_FILE} or <dir>/<model>/checkpoint)")
        for leftover in glob.glob(os.path.join(self.output_dir, ".tmp-*")) + glob.glob(
                os.path.join(self.output_dir, "*", ".tmp-*")):
            with contextlib.suppress(FileNotFoundError):  # another process of the same run removed it first
                os.remove(leftover)
                print(f"Removed {leftover} (left by a write that was cut off)")
        self.start_epoch = self.resume_model_if_exist(directory)
        if self.start_epoch > 0:
            self._restore_best_result(directory)
        # every process has read the saved state before any writes the next one: a run resumed at the end of an
        # epoch reaches rank 0's next save without a collective, and a slower rank would read that save instead
        barrier()
        if self.cfg.TEST.FINAL_MODEL == "best_val" and not self.cfg.TEST.NO_TEST:
            self.selected_on = self.selection_split()
            if self.selected_on == "test":
                print(f"Note: TEST.FINAL_MODEL best_val, but {self.cfg.DATASET.NAME} has no val split: the model is "
                      "selected on the test split, as Dassl does (results.json records selected_on: test; "
                      "TEST.FINAL_MODEL last_step keeps test data out of the choice)")
        self.init_writer(os.path.join(self.output_dir, "tensorboard"))
        self.time_start = time.time()
        self._state_time = time.monotonic()

    def _restore_best_result(self, directory: str) -> None:
        """On resume with best_val, recover the best val result so far from ``model-best.pth.tar``."""
        if self.cfg.TEST.FINAL_MODEL != "best_val" or self.best_result > -np.inf:
            return
        names = self.get_model_names()
        path = os.path.join(directory, names[0], "model-best.pth.tar")
        if os.path.exists(path):
            val_result = load_checkpoint(path).get("val_result")
            if val_result is not None:
                self.best_result = val_result

    def after_epoch(self) -> None:
        last_epoch = (self.epoch + 1) == self.max_epoch
        freq = self.cfg.TRAIN.CHECKPOINT_FREQ
        meet_checkpoint_freq = freq > 0 and (self.epoch + 1) % freq == 0
        if not self.cfg.TEST.NO_TEST and self.cfg.TEST.FINAL_MODEL == "best_val":
            self.validating = True
            try:
                curr_result = self.test(split="val")
            finally:
                self.validating = False
            if curr_result > self.best_result:
                self.best_result = curr_result
                self.save_model(self.epoch, self.output_dir, val_result=curr_result, model_name="model-best.pth.tar")
        if meet_checkpoint_freq or last_epoch:
            self.save_model(self.epoch, self.output_dir)
        best = float(self.best_result) if np.isfinite(self.best_result) else None
        self.save_resume_state(self.epoch, best)
        self._state_time = time.monotonic()

    def after_train(self) -> None:
        print("Finish training")
        self.deploy()
        if not self.cfg.TEST.NO_TEST:
            self.test()
        resume_file = os.path.join(self.output_dir, RESUME_FILE)
        if is_main() and os.path.isfile(resume_file):  # finished: the Dassl checkpoints above are what stays
            os.remove(resume_file)
        elapsed = round(time.time() - self.time_start)
        print(f"Elapsed: {datetime.timedelta(seconds=elapsed)}")
        self.close_writer()

    def deploy(self) -> None:
        """Hook, once after training (before the final test, also when TEST.NO_TEST skips it): put the final model in
        place; with TEST.FINAL_MODEL best_val (and a final test) that is the reloaded ``model-best.pth.tar``."""
        if self.cfg.TEST.NO_TEST:
            return
        if self.cfg.TEST.FINAL_MODEL == "best_val":
            print("Deploy the model with the best val performance")
            self.load_model(self.output_dir)
        else:
            print("Deploy the last-epoch model")

    def before_test(self) -> None:
        """Hook before every evaluation (models already in eval mode), e.g. to compute a classifier once for it."""

    def after_test(self) -> None:
        """Hook after every evaluation, e.g. to drop what ``before_test`` computed."""

    @torch.no_grad()
    def test(self, split: str | None = None) -> float:
        """Evaluate on ``split`` (default TEST.SPLIT): ``before_test`` → ``evaluate_split`` → ``after_test``."""
        self.set_model_mode("eval")
        self.before_test()
        result = self.evaluate_split(split or self.cfg.TEST.SPLIT)
        self.after_test()
        return result

    def selection_split(self) -> str:
        """The split best_val selects on: "val", or "test" when the dataset has no val split (no val loader, or its
        val is its test list, as CoOp's ImageNet)."""
        dataset = self.dm.dataset
        return "val" if self.val_loader is not None and dataset.val is not dataset.test else "test"

    def split_loader(self, split: str) -> tuple[str, DataLoader]:
        """The split actually evaluated and its loader ("val" falls back to test when there is no val set)."""
        if split == "val" and self.val_loader is not None:
            return split, self.val_loader
        return "test", self.test_loader

    def evaluate_split(self, split: str) -> float:
        """The evaluation loop: evaluator over ``split``, scalars, results.json (final evaluations only)."""
        self.evaluator.reset()
        split, data_loader = self.split_loader(split)
        print(f"Evaluate on the *{split}* set")
        outputs, labels, index = [], [], []
        for batch in tqdm(data_loader, desc=f"eval {split}", disable=not is_main()):
            input, label = self.parse_batch_test(batch)
            outputs.append(self.model_inference(input).cpu())
            labels.append(label.cpu())
            index.append(batch["index"])
        self.evaluator.process(*gather_in_order(torch.cat(index), torch.cat(outputs), torch.cat(labels)))
        results = self.evaluator.evaluate()
        for k, v in results.items():
            self.write_scalar(f"{split}/{k}", v, self.epoch)
        self.save_results(split, results)
        return list(results.values())[0]

    def extra_results(self) -> dict:
        """Hook: extra JSON-serialisable entries for results.json (e.g. PETR's routing statistics); overrides merge
        ``super().extra_results()`` with their own."""
        return {}

    def save_results(self, split: str, results: dict) -> None:
        """Write ``<OUTPUT_DIR>/results.json`` for a final evaluation (rank 0; skipped for per-epoch validation)."""
        if self.validating or not is_main():
            return
        cfg = self.cfg
        record = {
            "dataset": cfg.DATASET.NAME,
            "trainer": cfg.TRAINER.NAME,
            "config": cfg.get("CONFIG_NAME", ""),
            "backbone": cfg.MODEL.BACKBONE.NAME,
            "seed": cfg.SEED,
            "num_shots": cfg.DATASET.NUM_SHOTS,
            "split": split,
            "subsample_classes": cfg.DATASET.get("SUBSAMPLE_CLASSES", "all"),
            "accuracy": float(results["accuracy"]),
            "error": float(results["error_rate"]),
            "macro_f1": float(results["macro_f1"]),
            "selected_on": self.selected_on,
        }
        if "perclass_accuracy" in results:
            record["perclass_accuracy"] = float(results["perclass_accuracy"])
        record.update(self.extra_results())
        commit_inputs()  # run.json names every file these results came from before they exist
        write_json(record, os.path.join(self.output_dir, RESULTS_FILE))

    def parse_batch_test(self, batch: dict):
        return batch["img"].to(self.device), batch["label"].to(self.device)

    def model_inference(self, input: torch.Tensor) -> torch.Tensor:
        return self.model(input)

    # ----- the training loop -------------------------------------------------------------------------------
    def train_loaders(self) -> dict[str, DataLoader]:
        """The loaders a step draws one batch from each, in ``forward_backward``'s argument order."""
        raise NotImplementedError

    def epoch_length(self, loaders: dict[str, DataLoader]) -> int:
        """Steps per epoch (TrainerX: the batches of train_x)."""
        return len(loaders["train_x"])

    def run_epoch(self) -> None:
        """One epoch of ``forward_backward`` steps, from the start or from the position of a step-level resume
        state. Loss summaries are read every PRINT_FREQ steps (``sync_losses``), not after every step."""
        self.set_model_mode("train")
        loaders = self.train_loaders()
        set_sampler_epoch(loaders.values(), self.epoch)
        self.num_batches = self.epoch_length(loaders)
        position, self.resume_step = self.resume_step, None
        streams = {name: LoaderStream(loader) for name, loader in loaders.items()}
        try:
            for name, stream in streams.items():
                stream.start(position["streams"][name] if position else None)
            losses, batch_time, data_time = MetricMeter(), AverageMeter(), AverageMeter()
            end = time.time()
            for batch_idx in range(position["batch"] if position else 0, self.num_batches):
                self.batch_idx = batch_idx
                batches = [stream.next() for stream in streams.values()]
                data_time.update(time.time() - end)
                loss_summary = self.forward_backward(*batches)
                batch_time.update(time.time() - end)
                losses.update(loss_summary, tag=(self.epoch, batch_idx))
                self._log_iteration(batch_time, data_time, losses)
                self.after_step(streams, losses)
                end = time.time()
            self.sync_losses(losses)
        finally:  # the epoch's loader workers end with it, on an error or a preemption too
            for stream in streams.values():
                stream.close()

    def sync_losses(self, losses: MetricMeter) -> None:
        """Read the pending loss summaries (one device sync) and stop on a non-finite one (``check_finite``)."""
        self.check_finite(losses.sync())

    def after_step(self, streams: dict[str, LoaderStream], losses: MetricMeter) -> None:
        """After each step: on a preemption request write a step-level resume state and raise ``Preempted``; every
        ``TRAIN.STEP_RESUME_MINUTES`` minutes write one and go on (a hard kill then loses at most that much)."""
        minutes = self.cfg.TRAIN.get("STEP_RESUME_MINUTES", 0.0)
        preempt, due = any_rank(preemption.requested() is not None,
                                minutes > 0 and time.monotonic() - self._state_time >= 60.0 * minutes)
        if not (preempt or due):
            return
        self.sync_losses(losses)  # never save the weights of a non-finite step
        step = {"batch": self.batch_idx + 1, "streams": {name: s.state() for name, s in streams.items()}}
        best = float(self.best_result) if np.isfinite(self.best_result) else None
        self.save_resume_state(self.epoch - 1, best, step=step)
        self._state_time = time.monotonic()
        where = f"epoch {self.epoch + 1}/{self.max_epoch}, batch {self.batch_idx + 1}/{self.num_batches}"
        if preempt:
            raise preemption.Preempted(f"preempted ({preemption.requested() or 'another process'}): the state at "
                                       f"{where} is saved; rerun the same command to continue")
        print(f"Saved the step-level resume state ({where})")

    def _log_iteration(self, batch_time: AverageMeter, data_time: AverageMeter, losses: MetricMeter) -> None:
        """Every PRINT_FREQ batches: read the loss summaries, print Dassl's epoch/batch line and write the running
        averages."""
        nb = self.num_batches
        freq = self.cfg.TRAIN.PRINT_FREQ
        if (self.batch_idx + 1) % freq != 0 and nb >= freq:
            return
        self.sync_losses(losses)
        remaining = nb - self.batch_idx - 1 + (self.max_epoch - self.epoch - 1) * nb
        eta = datetime.timedelta(seconds=int(batch_time.avg * remaining))
        print(
            f"epoch [{self.epoch + 1}/{self.max_epoch}] batch [{self.batch_idx + 1}/{nb}] "
            f"time {batch_time.val:.3f} ({batch_time.avg:.3f}) data {data_time.val:.3f} ({data_time.avg:.3f}) "
            f"{losses} lr {self.get_current_lr():.4e} eta {eta}"
        )
        n_iter = self.epoch * nb + self.batch_idx
        for name, meter in losses.meters.items():
            self.write_scalar("train/" + name, meter.avg, n_iter)
        self.write_scalar("train/lr", self.get_current_lr(), n_iter)


class TrainerX(SimpleTrainer):
    """Training on labelled data only: ``forward_backward(batch)`` per batch of ``train_loader_x``."""

    def train_loaders(self) -> dict[str, DataLoader]:
        return {"train_x": self.train_loader_x}

    def parse_batch_train(self, batch: dict):
        return batch["img"].to(self.device), batch["label"].to(self.device), batch["domain"].to(self.device)


class TrainerXU(SimpleTrainer):
    """Training on labelled + unlabelled data: ``forward_backward(batch_x, batch_u)``.

    ``TRAIN.COUNT_ITER`` sets the epoch length: ``train_x``, ``train_u`` or ``smaller_one``; the shorter loader
    restarts when exhausted.
    """

    def train_loaders(self) -> dict[str, DataLoader]:
        if self.train_loader_u is None:
            raise ValueError(f"{type(self).__name__} needs unlabelled data, but the dataset has an empty train_u")
        return {"train_x": self.train_loader_x, "train_u": self.train_loader_u}

    def epoch_length(self, loaders: dict[str, DataLoader]) -> int:
        len_x, len_u = len(loaders["train_x"]), len(loaders["train_u"])
        count_iter = self.cfg.TRAIN.COUNT_ITER
        lengths = {"train_x": len_x, "train_u": len_u, "smaller_one": min(len_x, len_u)}
        if count_iter not in lengths:
            raise ValueError(f"Unknown TRAIN.COUNT_ITER {count_iter!r}; choose one of {', '.join(lengths)}")
        return lengths[count_iter]

    def parse_batch_train(self, batch_x: dict, batch_u: dict):
        return (batch_x["img"].to(self.device), batch_x["label"].to(self.device), batch_u["img"].to(self.device))


def build_trainer(cfg) -> SimpleTrainer:
    """Instantiate ``cfg.TRAINER.NAME`` from the trainer registry (with a "did you mean" hint when unknown)."""
    name = cfg.TRAINER.NAME
    check_availability(name, TRAINER_REGISTRY.registered_names(), kind="trainer (TRAINER.NAME / --trainer)")
    if cfg.VERBOSE:
        print(f"Loading trainer: {name}")
    return TRAINER_REGISTRY.get(name)(cfg)
