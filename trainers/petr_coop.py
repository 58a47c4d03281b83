"""PETR+CoOp: a CoOp soft prompt (seen branch) and CLIP's hand-crafted prompt ensemble (unseen branch), routed.

Both branches classify the same plain CLIP image features, so one image forward yields ``q_s`` (CoOp's context
around every class name of the task) and ``q_u`` (the dataset's template ensemble, ``ENSEMBLE_TEMPLATES``); the
router sees ``q̃ = [q_s, q_u]`` over all classes. The CoOp context ``θ_s`` is either trained in the same run (CoOp's
cross-entropy over the labelled base classes of ``train_x``; the source classes in cross/dg) or taken from an
existing CoOp run directory (``TRAINER.PETRCOOP.COOP_MODEL_DIR``): the training-free plug-in, which copies that
context into its run folder, trains zero epochs and deploys like a trained run (router fit, final test). PETR+X
(trainers/petr_x.py) is the same plug-in for any prompt learner. Prompt-learner settings come from
``TRAINER.COOP`` (N_CTX, CTX_INIT, CLASS_TOKEN_POSITION); the context must be generic (CSC False) to reach classes it
was not trained on. The router is the trainer's ``routing`` component (trainers/routing/routed.py).
"""
from __future__ import annotations

import torch

from engine import TRAINER_REGISTRY, build_lr_scheduler, build_optimizer, count_num_param, load_checkpoint
from engine.checkpoint import load_model_state
from engine.dataset_base import UNLABELED
from engine.errors import ConfigError
from engine.precision import PREC_RULE
from engine.schema import Int, KeyTable, Text

from .coop import MODEL_NAME, CoOp, coop_text_features
from .prompting.backbone import cosine_logits, load_backbone
from .prompting.unseen_branch import ensemble_classifier
from .routing.routed import ROUTER_KEYS, BranchScorer, RoutedTrainerMixin
from .routing.tuned import run_checkpoint


def coop_checkpoint_path(run_dir: str, epoch: int = 0) -> str:
    """``<run_dir>/prompt_learner/model.pth.tar-<epoch>``; epoch 0 = the file named in ``prompt_learner/checkpoint``."""
    return run_checkpoint(run_dir, MODEL_NAME, epoch, "CoOp", "TRAINER.PETRCOOP.COOP_MODEL_DIR",
                          "TRAINER.PETRCOOP.COOP_LOAD_EPOCH")


@TRAINER_REGISTRY.register()
class PETRCoOp(RoutedTrainerMixin, CoOp):
    """PETR+CoOp trainer: model ``prompt_learner`` (CoOp's ``ctx``, checkpoint-compatible) + router in the run dir."""

    DATA_ROLE = "seen_unseen"
    NS = "PETRCOOP"
    CONFIG_KEYS: KeyTable = {
        "COOP_MODEL_DIR": ("", Text()),
        "COOP_LOAD_EPOCH": (0, Int(0, note="0: the last saved epoch")),
        "PREC": ("fp16", PREC_RULE),
        **ROUTER_KEYS,
    }
    RECORDED_KEYS = CoOp.RECORDED_KEYS
    LEARNER_NS = CoOp.NS
    """Its CoOp branch's settings (``RECORDED_KEYS``) are CoOp's keys (borrowed), not of its namespace."""

    @classmethod
    def borrowed_keys(cls, cfg) -> tuple[str, ...]:
        """The CoOp prompt learner's settings, read from CoOp's namespace."""
        return tuple(f"TRAINER.{cls.LEARNER_NS}.{key}" for key in cls.RECORDED_KEYS)

    @classmethod
    def plugged_run(cls, cfg) -> tuple[str, type] | None:
        """The plug-in's CoOp run (``COOP_MODEL_DIR``), whose recorded prompt settings its CoOp branch takes."""
        return (cfg.TRAINER.PETRCOOP.COOP_MODEL_DIR, CoOp) if cfg.TRAINER.PETRCOOP.COOP_MODEL_DIR else None

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        if cfg.TRAINER.COOP.CSC:
            raise ConfigError("PETRCoOp needs a generic CoOp context (TRAINER.COOP.CSC False): a class-specific "
                              "context has no rows for the novel or target classes the router also scores")

    def build_model(self) -> None:
        cfg, ns = self.cfg, self.ns
        ds = self.dm.dataset
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        train_names = self._training_classes()
        print(f"Seen branch θ_s: a CoOp context learned on {len(train_names)} seen classes")
        self.prompt_learner = self.context_learner(train_names, csc=False)
        self.task_learner = self.prompt_learner
        if train_names != list(ds.classnames):  # the same context around every class name of the task
            self.task_learner = self.context_learner(ds.classnames, csc=False)
            self.task_learner.ctx = self.prompt_learner.ctx
        with self.autocast():
            self.templates, self.ensemble_text = ensemble_classifier(self.clip_model, cfg.DATASET.NAME, ds.classnames,
                                                                     self.device)
        print(f"Trainable parameters: {count_num_param(self.prompt_learner):,} (the CLIP weights are frozen)")
        self.optim = build_optimizer(self.prompt_learner, cfg.OPTIM)
        self.sched = build_lr_scheduler(self.optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, self.prompt_learner, self.optim, self.sched)
        self.coop_epoch = 0
        if ns.COOP_MODEL_DIR:
            self.load_coop_run(ns.COOP_MODEL_DIR, ns.COOP_LOAD_EPOCH)

    def load_coop_run(self, directory: str, epoch: int = 0) -> None:
        """θ_s from a CoOp run directory (the plug-in): its ``prompt_learner`` context of ``epoch`` (0 = last)."""
        self.plugin_source = coop_checkpoint_path(directory, epoch)
        checkpoint = load_checkpoint(self.plugin_source)
        load_model_state(self.prompt_learner, checkpoint, self.plugin_source)
        self.coop_epoch = int(checkpoint.get("epoch") or epoch or 1)
        print(f"Loaded the CoOp context of {self.plugin_source} (epoch {self.coop_epoch})")

    def _training_classes(self) -> list[str]:
        """Class names θ_s is trained on (base classes; source classes in cross/dg) and the label → index map."""
        ds = self.dm.dataset
        lab2cname = ds.splits.source_lab2cname or {k: ds.lab2cname[k] for k in ds.splits.base_labels}
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
        """Train θ_s, deploy (router fit) and test; a plug-in first copies its θ_s into the run folder (so
        ``--eval-only --model-dir`` reads it there) and trains zero epochs."""
        if self.plugin_source:
            self.save_model(self.coop_epoch - 1, self.output_dir, is_best=self.cfg.TEST.FINAL_MODEL == "best_val")
        super().train()

    def branch_scorer(self) -> BranchScorer:
        """``branch_logits`` with both classifiers computed once for the pass (θ_s is fixed meanwhile)."""
        classifier = self.branch_classifier()
        return lambda images: self.branch_logits(images, classifier)

    @torch.no_grad()
    def branch_classifier(self) -> torch.Tensor:
        """[2C, D] float32: CoOp's text features of every task class, then the ensemble's (the two classifiers)."""
        with self.autocast():
            coop = coop_text_features(self.clip_model, self.task_learner)
        return torch.cat([coop.float(), self.ensemble_text.float()])

    @torch.no_grad()
    def branch_logits(self, images: torch.Tensor, classifier: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_s, q_u) [B, C] each: one plain CLIP image forward scored by ``classifier`` (branch_classifier)."""
        with self.autocast():
            image = self.clip_model.encode_image(images)
        q_s, q_u = cosine_logits(self.clip_model, image, classifier).split(classifier.shape[0] // 2, dim=1)
        return q_s, q_u

    def extra_results(self) -> dict:
        return {**super().extra_results(), "plugin": bool(self.plugin_source), "coop_checkpoint": self.plugin_source,
                "num_templates": len(self.templates)}
