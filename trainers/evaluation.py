"""Evaluation in the all-class label space: restriction to the evaluated classes, and PETR's routed evaluation.

``RoutedEvaluationMixin`` is shared by PETR and PETRCoOp. A trainer using it provides ``branch_scorer()`` (a
function images -> (q_s, q_u), both branches over all classes of the task, fixed for one pass over a loader) and
its ``TRAINER.<NS>`` namespace with the router keys (trainers/config.py ``ROUTER_KEYS``). The mixin fits the
router when the engine deploys the trained model (``deploy``) on ``dataset.splits.router_x`` (test transform),
saves it in the run directory (``router.pth.tar`` tensors only + ``router.json``), reloads it in eval-only runs at
the first evaluation, and evaluates: route each test sample, answer with the argmax of the chosen branch over the
evaluated classes, log Dassl's accuracy block plus routing statistics, dump the logits (trainers/routing.py
docstring) and add the routing fields to ``results.json``.

A sample counts as seen when its label is a base class of a base-to-novel task; in cross/dg every target sample is
unseen (the seen branch learned the source classes only).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tabulate import tabulate
from tqdm import tqdm

from engine.checkpoint import atomic_torch_save, load_checkpoint
from engine.distributed import gather_in_order, is_main
from engine.errors import ConfigError, InvalidInputError
from engine.utils import write_json

from .routing import (
    FIT_DUMP_NAME,
    ROUTER_FILE,
    ROUTER_JSON,
    TRAIN_U_DUMP_NAME,
    Router,
    build_router,
    logits_dump_name,
    restricted_argmax,
    router_from_state,
    routing_metrics,
    save_logits_dump,
    save_q_dump,
)


def restrict_to_labels(logits: torch.Tensor, eval_labels) -> torch.Tensor:
    """Copy of ``logits`` [B, C] with every column outside ``eval_labels`` set to -inf (argmax stays all-class ids)."""
    ids = torch.as_tensor(eval_labels, dtype=torch.long, device=logits.device)
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= logits.shape[1]:
        raise ValueError(f"eval_labels must be non-empty class ids < {logits.shape[1]} (the logits' width)")
    out = torch.full_like(logits, float("-inf"))
    out[:, ids] = logits[:, ids]
    return out


def seen_mask(labels: torch.Tensor, seen_labels) -> torch.Tensor:
    """BoolTensor: True where a label is one of ``seen_labels``."""
    seen = torch.as_tensor(list(seen_labels), dtype=torch.long)
    return torch.isin(labels.long().cpu(), seen)


def _accuracy(logits: torch.Tensor, labels: torch.Tensor, eval_labels: torch.Tensor) -> float:
    pred = restricted_argmax(logits, eval_labels)
    return 100.0 * (pred == labels).double().mean().item()


@dataclass
class RoutedResult:
    """Final logits (restricted to the evaluated classes), per-sample routing decision and the routing metrics."""

    logits: torch.Tensor
    route_seen: torch.Tensor | None
    metrics: dict


def route_and_score(q_s: torch.Tensor, q_u: torch.Tensor, labels: torch.Tensor, is_seen: torch.Tensor,
                    eval_labels, router: Router) -> RoutedResult:
    """Route ``q̃ = [q_s, q_u]``, answer from the chosen branch, and measure routing and single-branch accuracies."""
    eval_ids = torch.as_tensor(list(eval_labels), dtype=torch.long)
    q = torch.cat([q_s, q_u], dim=1)
    if router.needs_truth:
        router.set_truth(is_seen)
    route, final = router.decide(q, q_s.shape[1])
    metrics = {"router": router.name, "lambda": router.lam, "percentile": router.percentile,
               "threshold": router.threshold}
    if route is not None:
        metrics.update(routing_metrics(route, is_seen))
    metrics.update(
        acc_seen_branch=_accuracy(q_s, labels, eval_ids),
        acc_unseen_branch=_accuracy(q_u, labels, eval_ids),
        acc_oracle=_accuracy(torch.where(is_seen[:, None], q_s, q_u), labels, eval_ids),
    )
    return RoutedResult(restrict_to_labels(final, eval_ids), route, metrics)


def routing_table(metrics: dict) -> str:
    """The routing statistics of one evaluation as a table."""
    rows = [["router", f"{metrics['router']} (λ={metrics['lambda']:g}, P{metrics['percentile']:g}, "
                       f"threshold {metrics['threshold']:.4g})"]]
    if "route_acc" in metrics:
        rows += [
            ["routing accuracy, seen (base) samples", _pct(metrics["route_acc_seen"], metrics["n_seen"])],
            ["routing accuracy, unseen (novel) samples", _pct(metrics["route_acc_unseen"], metrics["n_unseen"])],
            ["routing accuracy, all", _pct(metrics["route_acc"])],
            ["share routed to seen / unseen branch", f"{metrics['share_seen']:.2f}% / {metrics['share_unseen']:.2f}%"],
        ]
    rows += [["seen branch only (θ_s) accuracy", _pct(metrics["acc_seen_branch"])],
             ["unseen branch only (θ_u) accuracy", _pct(metrics["acc_unseen_branch"])],
             ["oracle routing accuracy", _pct(metrics["acc_oracle"])]]
    return tabulate(rows, tablefmt="simple")


def _pct(value: float, n: int | None = None) -> str:
    text = "n/a" if math.isnan(value) else f"{value:.2f}%"
    return text if n is None else f"{text} (n={n:,})"


def _json_safe(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}


class RoutedEvaluationMixin:
    """Router fitting/persistence and the routed evaluation for two-branch trainers (PETR, PETRCoOp).

    ``router`` is the deployed router: fitted in ``deploy``, or (eval-only) read from the folder ``load_model``
    loaded the weights from, at the first evaluation.
    """

    router: Router | None = None
    router_dir = ""
    _routing_extras: dict | None = None

    # ----- what the trainer provides ---------------------------------------------------------------------
    def branch_scorer(self) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """A function images -> (q_s, q_u), each [B, C] over all classes of the task, for one pass over a loader."""
        raise NotImplementedError

    # ----- helpers ----------------------------------------------------------------------------------------
    def seen_labels(self) -> list[int]:
        """Class ids whose test samples should go to the seen branch: the base classes (none in cross/dg)."""
        return self.dm.dataset.splits.base_labels

    def new_router(self) -> Router:
        ns = self.ns
        return build_router(ns.ROUTER, lam=ns.LAMBDA, percentile=ns.PERCENTILE)

    @torch.no_grad()
    def collect_branch_logits(self, loader, desc: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q_s, q_u [M, C] (float32, CPU) and labels [M] of every sample of ``loader``, in the loader's dataset order
        (under torchrun each process scores its shard and every process receives all rows)."""
        self.set_model_mode("eval")
        score = self.branch_scorer()
        q_s, q_u, labels, index = [], [], [], []
        for batch in tqdm(loader, desc=desc, disable=not is_main()):
            s, u = score(batch["img"].to(self.device))
            q_s.append(s.float().cpu())
            q_u.append(u.float().cpu())
            labels.append(batch["label"].cpu())
            index.append(batch["index"])
        return gather_in_order(torch.cat(index), torch.cat(q_s), torch.cat(q_u), torch.cat(labels))

    def _subset_loader(self, items, what: str):
        """Test-transform loader over ``items``, a seeded random subset when ROUTER_MAX_IMAGES caps it."""
        cap = self.ns.ROUTER_MAX_IMAGES
        if cap > 0 and len(items) > cap:
            generator = torch.Generator().manual_seed(max(self.cfg.SEED, 0))
            keep = sorted(torch.randperm(len(items), generator=generator)[:cap].tolist())
            print(f"{what}: using {cap:,} of {len(items):,} images (TRAINER.{self.NS}.ROUTER_MAX_IMAGES)")
            items = [items[i] for i in keep]
        return self.dm.build_loader(items, is_train=False)

    # ----- router lifecycle -------------------------------------------------------------------------------
    def fit_router(self, save_dir: str | None) -> Router:
        """Fit the configured router on q̃ of the router_x images; with ``save_dir``, save it and the dumps there."""
        splits = self.dm.dataset.splits
        if not splits.router_x:
            raise ConfigError(f"{self.cfg.DATASET.NAME}: the dataset has no router_x images to fit the router on")
        q_s, q_u, _ = self.collect_branch_logits(self._subset_loader(splits.router_x, "router fit"), "router fit")
        q = torch.cat([q_s, q_u], dim=1)
        router = self.new_router().fit(q)
        print(f"Router {router.name} fitted on {q.shape[0]:,} seen train images: threshold {router.threshold:.4g}")
        if save_dir:
            self.save_router(router, save_dir, num_classes=q_s.shape[1])
            if is_main():
                save_q_dump(os.path.join(save_dir, FIT_DUMP_NAME), q)
            if self.ns.DUMP_TRAIN_U and splits.train_u:
                u_s, u_u, _ = self.collect_branch_logits(self._subset_loader(splits.train_u, "train_u dump"),
                                                         "train_u logits")
                if is_main():
                    save_q_dump(os.path.join(save_dir, TRAIN_U_DUMP_NAME), torch.cat([u_s, u_u], dim=1))
        return router

    def save_router(self, router: Router, directory: str, num_classes: int) -> None:
        """``router.pth.tar`` (tensors, plain values) and ``router.json`` (λ, percentile, T, quantiles), by rank 0."""
        if not is_main():
            return
        atomic_torch_save({"router": router.state_dict(), "num_classes": num_classes},
                          os.path.join(directory, ROUTER_FILE))
        write_json({**router.summary(), "num_classes": num_classes, "dataset": self.cfg.DATASET.NAME,
                    "protocol": self.dm.dataset.splits.protocol}, os.path.join(directory, ROUTER_JSON))
        print(f"Router saved to {os.path.join(directory, ROUTER_FILE)} (+ {ROUTER_JSON})")

    def load_router(self, directory: str) -> Router:
        """The router saved in ``directory``, with this run's λ/percentile; refitted when another router is asked."""
        ns = self.ns
        path = os.path.join(directory, ROUTER_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"No router in {directory} ({ROUTER_FILE} is written at the end of training); evaluate a finished "
                f"run directory, or add TRAINER.{self.NS}.REFIT_ROUTER True to fit one from the seen train images")
        saved = load_checkpoint(path)
        num_classes = len(self.dm.dataset.lab2cname)
        if saved["router"].get("name") != ns.ROUTER:
            print(f"Router in {path} is {saved['router'].get('name')!r}, TRAINER.{self.NS}.ROUTER is "
                  f"{ns.ROUTER!r}: fitting {ns.ROUTER!r} on the seen train images")
            return self.fit_router(self.output_dir)
        if saved["num_classes"] != num_classes:
            raise InvalidInputError(f"{path} was fitted on logits over {saved['num_classes']} classes, "
                                    f"but this task has {num_classes}; add TRAINER.{self.NS}.REFIT_ROUTER True to "
                                    "fit a new one")
        router = router_from_state(saved["router"])
        if (router.lam, router.percentile) != (ns.LAMBDA, ns.PERCENTILE):
            print(f"Router λ/percentile {router.lam:g}/{router.percentile:g} from {path} replaced by this run's "
                  f"{ns.LAMBDA:g}/{ns.PERCENTILE:g}")
            router.lam, router.percentile = float(ns.LAMBDA), float(ns.PERCENTILE)
        print(f"Load router {path} ({router.name}, threshold {router.threshold:.4g})")
        return router

    def load_model(self, directory: str, epoch: int | str | None = None) -> None:
        """Load both branches; their router (saved beside them, or refitted) is read at the first evaluation."""
        super().load_model(directory, epoch)
        self.router, self.router_dir = None, directory

    def deployed_router(self) -> Router:
        """The router of the deployed model: loaded from ``router_dir``, or fitted (REFIT_ROUTER, or no folder)."""
        if self.router is None:
            if self.router_dir and not self.ns.REFIT_ROUTER:
                self.router = self.load_router(self.router_dir)
            else:
                self.router = self.fit_router(self.output_dir)
        return self.router

    def deploy(self) -> None:
        """Fit the router on the deployed model (also without a final test: the run still needs its router)."""
        super().deploy()
        self.router = self.fit_router(self.output_dir)

    # ----- evaluation -------------------------------------------------------------------------------------
    def evaluate_split(self, split: str) -> float:
        """Routed evaluation on ``split``; logs the accuracy block and routing table, dumps logits, saves results."""
        split, loader = self.split_loader(split)
        validating = self.validating
        # while validating, the model changes every epoch: a temporary router, nothing saved
        router = self.fit_router(None) if validating else self.deployed_router()
        print(f"Evaluate on the *{split}* set")
        q_s, q_u, labels = self.collect_branch_logits(loader, f"eval {split}")
        splits = self.dm.dataset.splits
        is_seen = seen_mask(labels, self.seen_labels())
        result = route_and_score(q_s, q_u, labels, is_seen, splits.eval_labels, router)
        self.evaluator.reset()
        self.evaluator.process(result.logits, labels)
        results = self.evaluator.evaluate()
        print(f"=> routing ({split})\n{routing_table(result.metrics)}")
        for k, v in results.items():
            self.write_scalar(f"{split}/{k}", v, self.epoch)
        if not validating:
            dump = logits_dump_name(split)
            if is_main():
                save_logits_dump(os.path.join(self.output_dir, dump), q_s, q_u, labels, is_seen,
                                 torch.as_tensor(splits.eval_labels))
            self._routing_extras = {**_json_safe(result.metrics), "protocol": splits.protocol,
                                    "num_classes": q_s.shape[1], "num_eval_classes": len(splits.eval_labels),
                                    "logits_dump": dump}
        self.save_results(split, results)
        return list(results.values())[0]

    def extra_results(self) -> dict:
        return {**(self._routing_extras or {}), **super().extra_results()}
