"""PETR+X: PETR's training-free routing on a finished run of any tuned method X (``TRAINER.PETRX.TUNED_TRAINER``).

θ_s is X's prediction with its learned weights over every class of the task (X's trainer reads its run: ``tuned_model``,
``trainers/routing/tuned.py``; the catalog's routable rows: CoOp, CoCoOp, MaPLe, IVLP, CLIP-Adapter, PromptSRC, ...),
θ_u the dataset's hand-crafted template ensemble on the frozen CLIP, and the router sees ``q̃ = [q_s, q_u]``. Nothing is
trained: the run reads X's checkpoint from ``TUNED_MODEL_DIR`` (ours or upstream's, Dassl layout, through the engine's
restricted loader), fits the router on ``router_x`` when it deploys, and evaluates. ``router_x`` holds X's training
images when NUM_SHOTS and SEED are those of X's run (the base classes' few-shot images in base2novel, the source's in
cross/dg), as PETR+CoOp's. An eval-only run (``--model-dir`` = that run's folder) reads its router, checked to have been
fitted on the same X checkpoint (sha256 in ``router.json``); θ_s is read from ``TUNED_MODEL_DIR`` again. X's run is
checked against what it records (``trainers/prompting/tuned_run.py``): another trainer, dataset or CLIP is refused, an
unfinished run or one that records neither is noted.
"""
from __future__ import annotations

import torch

from engine import TRAINER_REGISTRY, TrainerX
from engine.digests import file_digest
from engine.errors import ConfigError
from engine.precision import PREC_RULE
from engine.schema import Choice, Int, KeyTable, Text

from .catalog import TUNED_TRAINERS
from .prompting.backbone import ClipWeightsCheck, cosine_logits, load_backbone
from .prompting.tuned_run import TunedRun
from .prompting.unseen_branch import ensemble_classifier
from .routing.routed import ROUTER_KEYS, BranchScorer, RoutedTrainerMixin
from .routing.tuned import borrowed_keys, run_checkpoint, tuned_trainer


@TRAINER_REGISTRY.register()
class PETRX(RoutedTrainerMixin, ClipWeightsCheck, TrainerX):
    """PETR+X trainer: no models of its own; θ_s from a finished X run, the router in the run directory."""

    DATA_ROLE = "seen_unseen"
    NS = "PETRX"
    CONFIG_KEYS: KeyTable = {
        "TUNED_TRAINER": ("CoOp", Choice(TUNED_TRAINERS)),  # the catalog's routable trainers
        "TUNED_MODEL_DIR": ("", Text()),  # the tuned run's folder (its <model>/checkpoint names the file)
        "TUNED_LOAD_EPOCH": (0, Int(0, note="0: the last saved epoch")),
        "PREC": ("fp16", PREC_RULE),
        **ROUTER_KEYS,
    }

    @classmethod
    def borrowed_keys(cls, cfg) -> tuple[str, ...]:
        """The keys of the tuned trainer's namespace that its loader reads (its ``TUNED_BORROWS``)."""
        return borrowed_keys(cfg.TRAINER.PETRX.TUNED_TRAINER)

    @classmethod
    def plugged_run(cls, cfg) -> tuple[str, type] | None:
        """The tuned run (``TUNED_MODEL_DIR``), whose recorded settings θ_s is read with."""
        ns = cfg.TRAINER.PETRX
        return (ns.TUNED_MODEL_DIR, tuned_trainer(ns.TUNED_TRAINER)) if ns.TUNED_MODEL_DIR else None

    def check_cfg(self, cfg) -> None:
        super().check_cfg(cfg)
        ns = cfg.TRAINER.PETRX
        tuned_trainer(ns.TUNED_TRAINER)
        if not ns.TUNED_MODEL_DIR:
            raise ConfigError(f"TRAINER.PETRX.TUNED_MODEL_DIR is empty: give the folder of a finished "
                              f"{ns.TUNED_TRAINER} run (PETR+X trains nothing; see scripts/petr_x/)")

    def build_model(self) -> None:
        cfg, ns = self.cfg, self.ns
        classnames = self.dm.dataset.classnames
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        tuned = tuned_trainer(ns.TUNED_TRAINER)
        self.plugin_source = run_checkpoint(ns.TUNED_MODEL_DIR, tuned.TUNED_MODEL, ns.TUNED_LOAD_EPOCH,
                                            ns.TUNED_TRAINER, "TRAINER.PETRX.TUNED_MODEL_DIR",
                                            "TRAINER.PETRX.TUNED_LOAD_EPOCH")
        print(f"Seen branch θ_s: {ns.TUNED_TRAINER} of {self.plugin_source} over all {len(classnames)} classes")
        tuned_run = TunedRun.read(ns.TUNED_MODEL_DIR)
        notes = tuned_run.check(cfg, ns.TUNED_TRAINER)
        for note in notes:
            print(f"Note: {note}")
        model = tuned.tuned_model(self.clip_model, cfg, self.plugin_source, self.autocast)
        self.tuned_scorer = model.class_scorer(classnames)
        with self.autocast():
            self.templates, self.ensemble_text = ensemble_classifier(self.clip_model, cfg.DATASET.NAME, classnames,
                                                                     self.device)
        self.routing.provenance = {"tuned_trainer": ns.TUNED_TRAINER,
                                   "tuned_checkpoint_sha256": file_digest(self.plugin_source)}
        self.routing.notes = {"tuned_run_state": tuned_run.state, "tuned_run_notes": notes}

    def branch_scorer(self) -> BranchScorer:
        """``branch_logits``: θ_s and θ_u are fixed for the whole run."""
        return self.branch_logits

    @torch.no_grad()
    def branch_logits(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q_s, q_u) [B, C] each: X's logits, and the template ensemble's on the plain CLIP image features."""
        with self.autocast():
            image = self.clip_model.encode_image(images)
        return self.tuned_scorer(images), cosine_logits(self.clip_model, image, self.ensemble_text)

    def extra_results(self) -> dict:
        return {**super().extra_results(), "plugin": True, "tuned_checkpoint": self.plugin_source,
                **self.routing.provenance, **self.routing.notes, "num_templates": len(self.templates)}
