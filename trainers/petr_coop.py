"""PETR+CoOp: a CoOp soft prompt (seen branch) and CLIP's hand-crafted prompt ensemble (unseen branch), routed.

Both branches classify the same plain CLIP image features, so one image forward yields ``q_s`` (CoOp's context
around every class name of the task) and ``q_u`` (the dataset's template ensemble, ``ENSEMBLE_TEMPLATES``); the
router sees ``q̃ = [q_s, q_u]`` over all classes. The CoOp context ``θ_s`` is either trained in the same run (CoOp's
cross-entropy over the labelled base classes of ``train_x``; the source classes in cross/dg) or taken from an
existing CoOp run directory (``TRAINER.PETRCOOP.COOP_MODEL_DIR``): the training-free plug-in, where the run only
fits the router and evaluates. Prompt-learner settings come from ``TRAINER.COOP`` (N_CTX, CTX_INIT,
CLASS_TOKEN_POSITION); the context must be generic (CSC False) to reach classes it was not trained on.
Router fitting, persistence and the routed evaluation: ``trainers/evaluation.RoutedEvaluationMixin``.
"""
from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

from clip.classifier import zeroshot_text_features
from engine import (
    TRAINER_REGISTRY,
    build_lr_scheduler,
    build_optimizer,
    count_num_param,
    load_checkpoint,
)
from engine.checkpoint import load_model_state, pointed_checkpoint
from engine.dataset_base import UNLABELED
from engine.errors import ConfigError

from .backbone import load_backbone
from .coop import CoOp, CoOpPromptLearner, coop_text_features
from .evaluation import RoutedEvaluationMixin
from .templates import ensemble_templates

MODEL_NAME = "prompt_learner"
HOW_TO_TRAIN_COOP = "train CoOp first (bash scripts/coop/base2new_train.sh <dataset> <seed>)"


def coop_checkpoint_path(run_dir: str, epoch: int = 0) -> str:
    """``<run_dir>/prompt_learner/model.pth.tar-<epoch>``; epoch 0 = the file named in ``prompt_learner/checkpoint``."""
    folder = os.path.join(run_dir, MODEL_NAME)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"TRAINER.PETRCOOP.COOP_MODEL_DIR {run_dir} has no {MODEL_NAME}/ folder (not a CoOp "
                                f"run directory); {HOW_TO_TRAIN_COOP}")
    if epoch > 0:
        path = os.path.join(folder, f"model.pth.tar-{epoch}")
    else:
        path = pointed_checkpoint(folder)
        if path is None:
            raise FileNotFoundError(f"{folder} has no 'checkpoint' file naming the last saved model; set "
                                    "TRAINER.PETRCOOP.COOP_LOAD_EPOCH to the epoch to load")
    if not os.path.isfile(path):
        saved = sorted(n for n in os.listdir(folder) if n.startswith("model"))
        raise FileNotFoundError(f"CoOp checkpoint not found: {path} (TRAINER.PETRCOOP.COOP_LOAD_EPOCH {epoch}); "
                                f"saved there: {saved or 'nothing'}")
    return path


@TRAINER_REGISTRY.register()
class PETRCoOp(RoutedEvaluationMixin, CoOp):
    """PETR+CoOp trainer: model ``prompt_learner`` (CoOp's ``ctx``, checkpoint-compatible) + router in the run dir."""

    DATA_ROLE = "seen_unseen"
    NS = "PETRCOOP"

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        if cfg.TRAINER.COOP.CSC:
            raise ConfigError("PETRCoOp needs a generic CoOp context (TRAINER.COOP.CSC False): a class-specific "
                              "context has no rows for the novel or target classes the router also scores")

    def build_model(self) -> None:
        cfg, coop, ns = self.cfg, self.cfg.TRAINER.COOP, self.ns
        ds = self.dm.dataset
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        train_names = self._training_classes()
        print(f"Seen branch θ_s: a CoOp context learned on {len(train_names)} seen classes")
        self.prompt_learner = CoOpPromptLearner(self.clip_model, train_names, coop.N_CTX, coop.CTX_INIT, False,
                                                coop.CLASS_TOKEN_POSITION).to(self.device)
        self.task_learner = self.prompt_learner
        if train_names != list(ds.classnames):  # the same context around every class name of the task
            self.task_learner = CoOpPromptLearner(self.clip_model, ds.classnames, coop.N_CTX, coop.CTX_INIT, False,
                                                  coop.CLASS_TOKEN_POSITION).to(self.device)
            self.task_learner.ctx = self.prompt_learner.ctx
        self.templates = ensemble_templates(cfg.DATASET.NAME)
        print(f"Unseen branch θ_u: {len(self.templates)} hand-crafted template(s) of {cfg.DATASET.NAME} on the frozen "
              f"CLIP, {len(ds.classnames)} classes")
        with self.autocast():
            self.ensemble_text = zeroshot_text_features(self.clip_model, ds.classnames, self.templates, self.device)
        print(f"Trainable parameters: {count_num_param(self.prompt_learner):,} (the CLIP weights are frozen)")
        self.optim = build_optimizer(self.prompt_learner, cfg.OPTIM)
        self.sched = build_lr_scheduler(self.optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, self.prompt_learner, self.optim, self.sched)
        self.coop_source, self.coop_epoch = "", 0
        if ns.COOP_MODEL_DIR:
            self.load_coop_run(ns.COOP_MODEL_DIR, ns.COOP_LOAD_EPOCH)

    def load_coop_run(self, directory: str, epoch: int = 0) -> None:
        """θ_s from a CoOp run directory (the plug-in): its ``prompt_learner`` context of ``epoch`` (0 = last)."""
        self.coop_source = coop_checkpoint_path(directory, epoch)
        checkpoint = load_checkpoint(self.coop_source)
        load_model_state(self.prompt_learner, checkpoint, self.coop_source)
        self.coop_epoch = int(checkpoint.get("epoch") or epoch or 1)
        print(f"Loaded the CoOp context of {self.coop_source} (epoch {self.coop_epoch})")

    def _training_classes(self) -> list[str]:
        """Class names θ_s is trained on (base classes; source classes in cross/dg) and the label → index map."""
        ds = self.dm.dataset
        lab2cname = ds.splits.source_lab2cname or {k: ds.lab2cname[k] for k in self.seen_labels()}
        labels = sorted(lab2cname)
        index = torch.full((labels[-1] + 1,), UNLABELED, dtype=torch.long)
        index[labels] = torch.arange(len(labels))
        self.train_label_index = index.to(self.device)
        return [lab2cname[k] for k in labels]

    def parse_batch_train(self, batch: dict):
        """CoOp's batch with labels mapped to positions among the training classes (CE over those classes only)."""
        images, labels, domains = super().parse_batch_train(batch)
        if bool((labels < 0).any()) or int(labels.max()) >= self.train_label_index.numel():
            raise ConfigError("PETRCoOp: train_x holds images without a seen-class label; the CoOp branch needs "
                              "labelled base (or source) images")
        index = self.train_label_index[labels]
        if bool((index < 0).any()):
            raise ConfigError("PETRCoOp: train_x holds labels outside the seen classes; check "
                              "DATASET.SUBSAMPLE_CLASSES")
        return images, index, domains

    def train(self) -> None:
        """Train θ_s then route; with COOP_MODEL_DIR, the training-free plug-in: fit the router and evaluate only."""
        if not self.coop_source:
            super().train()
            return
        print(f"Training-free plug-in: θ_s = {self.coop_source}, nothing is trained; fitting the router and "
              "evaluating")
        self.save_model(self.coop_epoch - 1, self.output_dir)  # the run folder holds its θ_s (--eval-only --model-dir)
        if self.cfg.TEST.NO_TEST:
            self.router = self.fit_router(self.output_dir)
        else:
            self.test()

    @torch.no_grad()
    def evaluation_classifier(self) -> torch.Tensor:
        """[2C, D] float32: CoOp's text features of every task class, then the ensemble's (the two classifiers)."""
        with self.autocast():
            coop = coop_text_features(self.clip_model, self.task_learner)
        return torch.cat([coop.float(), self.ensemble_text.float()])

    def branch_scorer(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """``branch_logits`` with both classifiers computed once for the pass (θ_s is fixed meanwhile): the
        evaluation's classifier while one runs, else a fresh one."""
        classifier = self.eval_classifier if self.eval_classifier is not None else self.evaluation_classifier()
        return lambda images: self.branch_logits(images, classifier)

    @torch.no_grad()
    def branch_logits(self, images: torch.Tensor, classifier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_s, q_u) [B, C] each: one plain CLIP image forward scored by ``classifier`` (evaluation_classifier)."""
        with self.autocast():
            image = self.clip_model.encode_image(images)
        logits = self.clip_model.logit_scale.exp().float() * F.normalize(image.float(), dim=-1) @ classifier.t()
        q_s, q_u = logits.split(classifier.shape[0] // 2, dim=1)
        return q_s, q_u

    def extra_results(self) -> dict:
        return {**super().extra_results(), "plugin": bool(self.coop_source), "coop_checkpoint": self.coop_source,
                "num_templates": len(self.templates)}
