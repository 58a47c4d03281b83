"""PETR logits dumps (contract: trainers/routing/routers.py) grouped per method / dataset / seed, and router scores
on them.

A unit's dumps may be spread over a ``train_base`` and a ``test_new`` run folder of the same seed; the analyses
(router ablation, λ sweep, score plots, the demo's AUROC) need no model, only these files.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from analysis.errors import ResultsError
from analysis.layout import dataset_sort_key, parse_run_path, seed_key, seed_of
from engine.utils import read_json
from trainers.routing.routers import (
    DEFAULT_LAMBDA,
    DEFAULT_PERCENTILE,
    FIT_DUMP_NAME,
    ROUTER_JSON,
    TRAIN_U_DUMP_NAME,
    build_router,
    load_logits_dump,
    load_q_dump,
)


@dataclass
class DumpUnit:
    """The dumps of one method / dataset / seed, possibly spread over a train_base and a test_new folder."""

    method: str
    dataset: str
    seed: str
    dirs: list[str] = field(default_factory=list)

    def _first(self, name: str) -> str | None:
        paths = [os.path.join(d, name) for d in self.dirs if os.path.isfile(os.path.join(d, name))]
        return paths[0] if paths else None

    def _required(self, name: str) -> str:
        path = self._first(name)
        if path is None:
            raise ResultsError(f"no {name} in {', '.join(self.dirs)} (PETR evaluation writes it)")
        return path

    @property
    def fit_path(self) -> str:
        """The seen-train logits the routers are fitted on."""
        return self._required(FIT_DUMP_NAME)

    @property
    def train_u_path(self) -> str:
        """The unseen-train logits (for the λ sweep)."""
        return self._required(TRAIN_U_DUMP_NAME)

    @property
    def logits_paths(self) -> list[str]:
        """Every ``logits_<split>.pt`` test dump of the unit."""
        return sorted(p for d in self.dirs for p in glob.glob(os.path.join(d, "logits_*.pt")))

    @cached_property
    def saved_router(self) -> dict:
        """The run's ``router.json`` (empty when the run has none), read once."""
        path = self._first(ROUTER_JSON)
        return read_json(path) if path else {}

    def router_settings(self, lam: float | None = None, percentile: float | None = None) -> tuple[float, float]:
        """λ and percentile to use on this unit: the given ones, else the run's ``router.json``, else the defaults."""
        saved = self.saved_router
        return (float(saved.get("lam", DEFAULT_LAMBDA)) if lam is None else lam,
                float(saved.get("percentile", DEFAULT_PERCENTILE)) if percentile is None else percentile)

    @property
    def label(self) -> str:
        """``dataset seed S`` for messages."""
        return f"{self.dataset} seed {self.seed}" if self.seed else self.dataset


def unit_key(directory: str) -> tuple[str, str, str]:
    """``(method, dataset, seed)`` of a dump folder: from the base-to-novel layout, else ``<dataset>/seed<S>``."""
    rp = parse_run_path(directory)
    if rp is not None:
        return f"{rp.trainer}/{rp.config}", rp.dataset, seed_key(rp.seed)
    path = Path(os.path.abspath(directory))
    seed = seed_of(path.name)
    if seed is not None:
        return "", path.parent.name, str(seed)
    return "", path.name, ""


def _holds_dumps(filenames: Sequence[str]) -> bool:
    return any(f in (FIT_DUMP_NAME, TRAIN_U_DUMP_NAME) or (f.startswith("logits_") and f.endswith(".pt"))
               for f in filenames)


def find_units(dirs: Sequence[str]) -> list[DumpUnit]:
    """Every folder under ``dirs`` holding PETR dumps, grouped by (method, dataset, seed)."""
    units: dict[tuple[str, str, str], DumpUnit] = {}
    for top in dirs:
        if not os.path.isdir(top):
            raise ResultsError(f"directory not found: {top}")
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            if not _holds_dumps(filenames):
                continue
            key = unit_key(dirpath)
            unit = units.setdefault(key, DumpUnit(*key))
            if dirpath not in unit.dirs:
                unit.dirs.append(dirpath)
    if not units:
        raise ResultsError(f"no PETR logits dumps ({FIT_DUMP_NAME}, logits_<split>.pt) under {', '.join(dirs)}")
    for unit in units.values():  # the train_base folder first, so its fit dump wins
        unit.dirs.sort(key=lambda d: (parse_run_path(d) is None or parse_run_path(d).role != "train_base", d))
    return sorted(units.values(), key=lambda u: (u.method, dataset_sort_key(u.dataset), u.seed))


def load_test_dumps(unit: DumpUnit) -> list[dict[str, torch.Tensor]]:
    """The unit's test dumps (at least one, else a :class:`ResultsError`)."""
    dumps = [load_logits_dump(p) for p in unit.logits_paths]
    if not dumps:
        raise ResultsError(f"no logits_<split>.pt dumps for {unit.label} in {', '.join(unit.dirs)}")
    return dumps


def unit_scores(unit: DumpUnit, router_name: str, lam: float | None = None,
                percentile: float | None = None) -> tuple[np.ndarray, np.ndarray, float]:
    """Outlier scores of the base and novel test samples of ``unit`` and the router's threshold (λ and percentile
    as ``DumpUnit.router_settings``)."""
    lam, percentile = unit.router_settings(lam, percentile)
    router = build_router(router_name, lam=lam, percentile=percentile).fit(load_q_dump(unit.fit_path))
    dumps = load_test_dumps(unit)
    scores = torch.cat([router.score(torch.cat([d["q_s"], d["q_u"]], dim=1)) for d in dumps]).cpu().numpy()
    is_seen = torch.cat([d["is_seen"] for d in dumps]).numpy()
    return scores[is_seen], scores[~is_seen], router.threshold
