"""PETR's router as a component of a two-branch trainer: fitted when the trainer deploys, stored in the run folder,
applied at every evaluation, reported in ``results.json``.

A routed trainer is an engine trainer that provides ``branch_scorer()`` (:class:`RoutedTrainer`) and declares the
router keys (``ROUTER_KEYS``, here) in its ``TRAINER.<NS>`` namespace (its ``CONFIG_KEYS``); both are checked when it is
built, before any data is read. It holds a :class:`Routing` (``self.routing``) and hands it four engine hooks
(:class:`RoutedTrainerMixin`, nothing else):

- ``deploy``: fit the router on ``q̃ = [q_s, q_u]`` of the deployed model for ``dataset.splits.router_x`` (test
  transform) and save it in the run folder (``router.pth.tar`` tensors only + ``router.json``) with the fit dumps;
- ``load_model``: an eval-only run reads the router saved beside the loaded weights, at its first evaluation;
- ``evaluate_split``: route each sample, answer with the argmax of the chosen branch over the evaluated classes, log
  Dassl's accuracy block and the routing table, dump the logits (trainers/routing/routers.py docstring);
- ``extra_results``: the routing fields of ``results.json``.

A plug-in run (``plugin_source``: θ_s read from a finished run) goes through the same lifecycle with zero epochs:
``before_train``, then ``after_train``'s ``deploy`` (the router fit) and final test. A sample counts as seen when its
label is a base class of a base-to-novel task; in cross/dg every target sample is unseen (θ_s learned the source
classes only).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch
from tqdm import tqdm

from engine.checkpoint import atomic_torch_save, load_checkpoint
from engine.distributed import gather_in_order, is_main
from engine.errors import ConfigError, InvalidInputError
from engine.inputs import read_input_json
from engine.registry import check_availability
from engine.schema import POSITIVE, Bool, Choice, Int, KeyTable, Number
from engine.utils import write_json

from .evaluation import json_safe, route_and_score, routing_table, seen_mask
from .routers import (
    DEFAULT_LAMBDA,
    DEFAULT_PERCENTILE,
    FIT_DUMP_NAME,
    ROUTER_FILE,
    ROUTER_JSON,
    ROUTERS,
    TRAIN_U_DUMP_NAME,
    Router,
    build_router,
    logits_dump_name,
    router_from_state,
    save_logits_dump,
    save_q_dump,
)

ROUTER_KEYS: KeyTable = {
    "ROUTER": ("mahalanobis", Choice(ROUTERS)),  # trainers/routing/routers.py ROUTERS
    "LAMBDA": (DEFAULT_LAMBDA, POSITIVE),  # Mahalanobis threshold = λ · percentile of the fit distances
    "PERCENTILE": (DEFAULT_PERCENTILE, Number(0, 100, low_open=True)),
    "REFIT_ROUTER": (False, Bool()),  # eval-only runs: fit a new router instead of reading the run's router.pth.tar
    "ROUTER_MAX_IMAGES": (0, Int(0, note="0: every image")),  # cap on router_x / train_u-dump images
    "DUMP_TRAIN_U": (True, Bool()),  # write train_u_logits.pt beside the router
}
"""The router keys every routed trainer (PETR, PETRCoOp, PETRX) has in its namespace, declared once."""

BranchScorer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
"""images [B, 3, H, W] -> (q_s, q_u), each [B, C] float32 logits over all C classes of the task."""


@runtime_checkable
class RoutedTrainer(Protocol):
    """What a routed trainer provides beyond the engine trainer (``engine.SimpleTrainer``) it is."""

    def branch_scorer(self) -> BranchScorer:
        """The two branches as one function, fixed for one pass over a loader (the models do not change meanwhile),
        so per-pass work such as text classifiers is done once here."""
        ...


class Routing:
    """The router of one routed trainer: its settings (``TRAINER.<NS>`` router keys), the deployed router, where an
    eval-only run reads it, and the routing fields of the final evaluation.

    ``provenance``: plain values naming the inputs the router is fitted for (e.g. the tuned checkpoint of PETR+X),
    written to ``router.json`` and compared when an eval-only run reads the router; ``notes``: plain values saying
    what may be wrong with those inputs (e.g. an unfinished tuned run), written to ``router.json``, not compared.
    """

    def __init__(self, trainer: RoutedTrainer, cfg) -> None:
        name = type(trainer).__name__
        if not isinstance(trainer, RoutedTrainer):
            raise TypeError(f"{name} cannot be routed: it lacks branch_scorer(), the function images -> (q_s, q_u) "
                            "over all classes of the task (trainers/routing/routed.py RoutedTrainer)")
        ns = trainer.NS
        opts = cfg.TRAINER.get(ns) if ns else None
        missing = [key for key in ROUTER_KEYS if opts is None or key not in opts]
        if missing:
            raise ConfigError(f"{name}: TRAINER.{ns or '<NS>'} lacks the router keys {missing}; declare them with "
                              "ROUTER_KEYS in its CONFIG_KEYS (trainers/routing/routed.py)")
        check_availability(opts.ROUTER, ROUTERS, kind=f"router (TRAINER.{ns}.ROUTER)")
        self.trainer, self.ns, self.opts = trainer, ns, opts
        self.router: Router | None = None
        self.source_dir = ""
        self.provenance: dict = {}
        self.notes: dict = {}
        self._results: dict = {}

    # ----- scoring ----------------------------------------------------------------------------------------
    @torch.no_grad()
    def collect(self, loader, desc: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q_s, q_u [M, C] (float32, CPU) and labels [M] of every sample of ``loader``, in the loader's dataset order
        (under torchrun each process scores its shard and every process receives all rows)."""
        trainer = self.trainer
        trainer.set_model_mode("eval")
        score = trainer.branch_scorer()
        q_s, q_u, labels, index = [], [], [], []
        for batch in tqdm(loader, desc=desc, disable=not is_main()):
            s, u = score(batch["img"].to(trainer.device))
            q_s.append(s.float().cpu())
            q_u.append(u.float().cpu())
            labels.append(batch["label"].cpu())
            index.append(batch["index"])
        return gather_in_order(torch.cat(index), torch.cat(q_s), torch.cat(q_u), torch.cat(labels))

    def _subset_loader(self, items, what: str):
        """Test-transform loader over ``items``, a seeded random subset when ROUTER_MAX_IMAGES caps it."""
        cap = self.opts.ROUTER_MAX_IMAGES
        if cap > 0 and len(items) > cap:
            generator = torch.Generator().manual_seed(max(self.trainer.cfg.SEED, 0))
            keep = sorted(torch.randperm(len(items), generator=generator)[:cap].tolist())
            print(f"{what}: using {cap:,} of {len(items):,} images (TRAINER.{self.ns}.ROUTER_MAX_IMAGES)")
            items = [items[i] for i in keep]
        return self.trainer.dm.build_loader(items, is_train=False)

    # ----- fit, store, load -------------------------------------------------------------------------------
    def fit(self, save_dir: str | None) -> Router:
        """Fit the configured router on q̃ of the router_x images; with ``save_dir``, save it and the dumps there."""
        trainer, opts = self.trainer, self.opts
        splits = trainer.dm.dataset.splits
        if not splits.router_x:
            raise ConfigError(f"{trainer.cfg.DATASET.NAME}: the dataset has no router_x images to fit the router on")
        q_s, q_u, _ = self.collect(self._subset_loader(splits.router_x, "router fit"), "router fit")
        q = torch.cat([q_s, q_u], dim=1)
        router = build_router(opts.ROUTER, lam=opts.LAMBDA, percentile=opts.PERCENTILE).fit(q)
        print(f"Router {router.name} fitted on {q.shape[0]:,} seen train images: threshold {router.threshold:.4g}")
        if router.note:
            print(f"Router note: {router.note}")
        if save_dir:
            self.save(router, save_dir, num_classes=q_s.shape[1])
            if is_main():
                save_q_dump(os.path.join(save_dir, FIT_DUMP_NAME), q)
            if opts.DUMP_TRAIN_U and splits.train_u:
                u_s, u_u, _ = self.collect(self._subset_loader(splits.train_u, "train_u dump"), "train_u logits")
                if is_main():
                    save_q_dump(os.path.join(save_dir, TRAIN_U_DUMP_NAME), torch.cat([u_s, u_u], dim=1))
        return router

    def save(self, router: Router, directory: str, num_classes: int) -> None:
        """``router.pth.tar`` (tensors, plain values) and ``router.json`` (λ, percentile, T, quantiles, provenance),
        by rank 0."""
        if not is_main():
            return
        cfg = self.trainer.cfg
        atomic_torch_save({"router": router.state_dict(), "num_classes": num_classes},
                          os.path.join(directory, ROUTER_FILE))
        write_json({**router.summary(), "num_classes": num_classes, "dataset": cfg.DATASET.NAME,
                    "protocol": self.trainer.dm.dataset.splits.protocol, **self.provenance, **self.notes},
                   os.path.join(directory, ROUTER_JSON))
        print(f"Router saved to {os.path.join(directory, ROUTER_FILE)} (+ {ROUTER_JSON})")

    def load(self, directory: str) -> Router:
        """The router saved in ``directory``, with this run's λ/percentile; refitted when another router is asked."""
        opts, key = self.opts, f"TRAINER.{self.ns}"
        path = os.path.join(directory, ROUTER_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"No router in {directory} ({ROUTER_FILE} is written at the end of training); evaluate a finished "
                f"run directory, or add {key}.REFIT_ROUTER True to fit one from the seen train images")
        saved = load_checkpoint(path, role="router")
        num_classes = len(self.trainer.dm.dataset.lab2cname)
        if saved["router"].get("name") != opts.ROUTER:
            print(f"Router in {path} is {saved['router'].get('name')!r}, {key}.ROUTER is {opts.ROUTER!r}: fitting "
                  f"{opts.ROUTER!r} on the seen train images")
            return self.fit(self.trainer.output_dir)
        if saved["num_classes"] != num_classes:
            raise InvalidInputError(f"{path} was fitted on logits over {saved['num_classes']} classes, but this task "
                                    f"has {num_classes}; add {key}.REFIT_ROUTER True to fit a new one")
        self._check_provenance(directory)
        router = router_from_state(saved["router"])
        if (router.lam, router.percentile) != (opts.LAMBDA, opts.PERCENTILE):
            print(f"Router λ/percentile {router.lam:g}/{router.percentile:g} from {path} replaced by this run's "
                  f"{opts.LAMBDA:g}/{opts.PERCENTILE:g}")
            router.lam, router.percentile = float(opts.LAMBDA), float(opts.PERCENTILE)
        print(f"Load router {path} ({router.name}, threshold {router.threshold:.4g})")
        return router

    def _check_provenance(self, directory: str) -> None:
        """The saved router must have been fitted for this run's inputs (``provenance``)."""
        if not self.provenance:
            return
        path = os.path.join(directory, ROUTER_JSON)
        saved = read_input_json(path, "router") if os.path.isfile(path) else {}
        differ = [key for key, value in self.provenance.items() if saved.get(key) != value]
        if differ:
            shown = "; ".join(f"{key}: saved {saved.get(key)!r}, this run {self.provenance[key]!r}" for key in differ)
            raise InvalidInputError(f"the router in {directory} was fitted for other inputs ({shown}); evaluate "
                                    f"with the inputs of that run, or add TRAINER.{self.ns}.REFIT_ROUTER True to fit "
                                    "a new one")

    # ----- lifecycle --------------------------------------------------------------------------------------
    def deploy(self) -> None:
        """Fit and save the router of the deployed model (also without a final test: the run still needs it)."""
        self.router = self.fit(self.trainer.output_dir)

    def use_saved(self, directory: str) -> None:
        """The deployed model was loaded from ``directory``: its router is read there at the first evaluation."""
        self.router, self.source_dir = None, directory

    def deployed(self) -> Router:
        """The router of the deployed model: loaded from ``source_dir``, or fitted (REFIT_ROUTER, or no folder)."""
        if self.router is None:
            if self.source_dir and not self.opts.REFIT_ROUTER:
                self.router = self.load(self.source_dir)
            else:
                self.router = self.fit(self.trainer.output_dir)
        return self.router

    # ----- evaluation -------------------------------------------------------------------------------------
    def evaluate(self, split: str) -> float:
        """Routed evaluation on ``split``; logs the accuracy block and routing table, dumps logits, saves results."""
        trainer = self.trainer
        split, loader = trainer.split_loader(split)
        validating = trainer.validating
        # while validating, the model changes every epoch: a temporary router, nothing saved
        router = self.fit(None) if validating else self.deployed()
        print(f"Evaluate on the *{split}* set")
        q_s, q_u, labels = self.collect(loader, f"eval {split}")
        splits = trainer.dm.dataset.splits
        is_seen = seen_mask(labels, splits.base_labels)
        result = route_and_score(q_s, q_u, labels, is_seen, splits.eval_labels, router)
        trainer.evaluator.reset()
        trainer.evaluator.process(result.logits, labels)
        results = trainer.evaluator.evaluate()
        print(f"=> routing ({split})\n{routing_table(result.metrics)}")
        for k, v in results.items():
            trainer.write_scalar(f"{split}/{k}", v, trainer.epoch)
        if not validating:
            dump = logits_dump_name(split)
            if is_main():
                save_logits_dump(os.path.join(trainer.output_dir, dump), q_s, q_u, labels, is_seen,
                                 torch.as_tensor(splits.eval_labels))
            self._results = {**json_safe(result.metrics), "protocol": splits.protocol, "num_classes": q_s.shape[1],
                             "num_eval_classes": len(splits.eval_labels), "logits_dump": dump}
        trainer.save_results(split, results)
        return list(results.values())[0]

    def results(self) -> dict:
        """The routing fields of the last final evaluation (for ``results.json``)."""
        return dict(self._results)


class RoutedTrainerMixin:
    """Hands the engine hooks of a routed trainer to its :class:`Routing` (``self.routing``, built before the data).

    ``plugin_source``: the checkpoint θ_s was read from when the run trains nothing (a plug-in), else "".
    """

    routing: Routing
    plugin_source = ""

    def __init__(self, cfg) -> None:
        self.routing = Routing(self, cfg)
        super().__init__(cfg)

    def train(self) -> None:
        """The engine's training; a plug-in trains zero epochs (its router is fitted when it deploys)."""
        if self.plugin_source:
            print(f"Training-free plug-in: θ_s = {self.plugin_source}, nothing is trained; the router is fitted when "
                  "the run deploys, then the final test")
            self.max_epoch = 0
        super().train()

    def resume_model_if_exist(self, directory: str) -> int:
        """A plug-in has nothing to resume (θ_s comes from ``plugin_source``)."""
        return 0 if self.plugin_source else super().resume_model_if_exist(directory)

    def deploy(self) -> None:
        super().deploy()
        self.routing.deploy()

    def load_model(self, directory: str, epoch: int | str | None = None) -> None:
        super().load_model(directory, epoch)
        self.routing.use_saved(directory)

    def evaluate_split(self, split: str) -> float:
        return self.routing.evaluate(split)

    def extra_results(self) -> dict:
        return {**self.routing.results(), **super().extra_results()}
