"""Training-free routers that send each test sample to PETR's seen or unseen prompt branch, and the logits dumps.

Every router looks at the concatenated logits ``q̃ = [q_s, q_u]`` (width ``2C``, ``C`` = all classes of the task)
and is fitted on the seen (base) train images only. ``MahalanobisRouter`` is PETR's router; the others are the
paper's routing comparison behind the same interface (``ROUTERS``, ``build_router``).

Score convention: ``score(logits)`` is an *outlier score*, higher = more unseen-like (pytorch-ood's convention).
A sample goes to the seen branch when ``score <= threshold``, with ``threshold`` = the ``percentile``-th percentile
of the fit scores (so about ``percentile`` % of the seen train samples are routed to the seen branch). Only the
Mahalanobis distance (a non-negative distance) is scaled by ``lam``: ``threshold = lam · P_percentile(d_fit)``;
the other routers keep ``lam`` for reporting only, because scaling a signed score has no meaning.

Router scores:
- ``mahalanobis``: ``sqrt((q̃-μ)ᵀ Σ⁺ (q̃-μ))`` with the fit mean and 1/N covariance (pseudo-inverse when singular).
- ``max_conf``: ``-max softmax(q_s)``; ``entropy``: softmax entropy of ``q_s``; ``energy``: ``-T·logsumexp(q_s/T)``.
- ``iforest`` / ``ocsvm``: ``-score_samples`` of scikit-learn's IsolationForest / OneClassSVM fitted on ``q̃``;
  ``lof``: LocalOutlierFactor(novelty=True), fit scores from ``negative_outlier_factor_`` (scikit-learn forbids
  ``score_samples`` on the training set).
- ``average``: no routing, ``combine`` returns ``(q_s + q_u) / 2``; ``oracle``: the true subset flag
  (``set_truth(is_seen)`` before routing), an upper bound.
``decide(q̃)`` returns the route flags and the final logits in one pass; ``combine(q̃)`` only the logits.
Checkpoints stay pickle-free: scikit-learn routers store their fit data and parameters and refit on load
(deterministic: ``random_state`` is fixed).

Dump contract (PETR evaluation writes these in its run directory; tools/router_ablation.py, lambda_sweep.py and
plot_routing_scores.py read them, so routing studies need no model):
- ``logits_<split>.pt``: ``{"q_s": Float[M, C], "q_u": Float[M, C], "labels": Long[M] (all-class ids),
  "is_seen": Bool[M] (sample is from the base/seen subset), "eval_labels": Long[K] (class ids of the evaluated
  subset; predictions are the argmax restricted to them)}``;
- ``router_fit_logits.pt``: ``{"q": Float[N, 2C]}``, ``q̃`` of the seen (base) train images, test transform;
- ``train_u_logits.pt``: ``{"q": Float[Nu, 2C]}``, ``q̃`` of the unseen (novel) train images.
Beside them, ``router.pth.tar`` (the fitted router, tensors only) and ``router.json`` (its settings and summary).
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Any

import numpy as np
import torch

from engine.checkpoint import atomic_torch_save
from engine.inputs import open_input
from engine.registry import check_availability

DEFAULT_LAMBDA = 1.4
"""The paper's λ: the Mahalanobis threshold is λ times the fit distances' percentile."""
DEFAULT_PERCENTILE = 99.0
LOGITS_DUMP_KEYS = ("q_s", "q_u", "labels", "is_seen", "eval_labels")
FIT_DUMP_NAME = "router_fit_logits.pt"
TRAIN_U_DUMP_NAME = "train_u_logits.pt"
ROUTER_FILE = "router.pth.tar"
ROUTER_JSON = "router.json"
QUANTILES = {"min": 0.0, "p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
_CHUNK = 4096  # rows per matrix product in the Mahalanobis distance (bounds memory on large test sets)


def logits_dump_name(split: str) -> str:
    """File name of the evaluation dump for ``split`` (``logits_<split>.pt``)."""
    return f"logits_{split}.pt"


def save_logits_dump(path: str, q_s: torch.Tensor, q_u: torch.Tensor, labels: torch.Tensor,
                     is_seen: torch.Tensor, eval_labels: torch.Tensor) -> None:
    """Write an evaluation dump (see the module docstring) atomically, on CPU."""
    dump = {"q_s": q_s.detach().float().cpu(), "q_u": q_u.detach().float().cpu(), "labels": labels.long().cpu(),
            "is_seen": is_seen.bool().cpu(), "eval_labels": eval_labels.long().cpu()}
    _check_logits_dump(dump, path)
    atomic_torch_save(dump, path)


def save_q_dump(path: str, q: torch.Tensor) -> None:
    """Write ``{"q": q̃}`` (router fit or unseen-train logits) atomically, on CPU."""
    atomic_torch_save({"q": _as_matrix(q, path).float().cpu()}, path)


def load_logits_dump(path: str) -> dict[str, torch.Tensor]:
    """Read and validate an evaluation dump written by ``save_logits_dump``."""
    dump = _load(path)
    _check_logits_dump(dump, path)
    return dump


def load_q_dump(path: str) -> torch.Tensor:
    """Read ``{"q": Float[N, 2C]}`` and return ``q``."""
    dump = _load(path)
    if not isinstance(dump, dict) or "q" not in dump:
        raise ValueError(f"{path}: expected a dict with key 'q' (concatenated logits [N, 2C]); re-run the evaluation")
    return _as_matrix(dump["q"], path)


def _load(path: str) -> Any:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Logits dump not found: {path}")
    with open_input(path, "router") as f:
        return torch.load(f, map_location="cpu", weights_only=True)


def _check_logits_dump(dump: Any, path: str) -> None:
    missing = [k for k in LOGITS_DUMP_KEYS if not isinstance(dump, dict) or k not in dump]
    if missing:
        raise ValueError(f"{path}: logits dump lacks keys {missing}; expected {list(LOGITS_DUMP_KEYS)}")
    m = dump["q_s"].shape[0]
    if dump["q_s"].ndim != 2 or dump["q_u"].shape != dump["q_s"].shape:
        raise ValueError(f"{path}: q_s {tuple(dump['q_s'].shape)} and q_u {tuple(dump['q_u'].shape)} must be [M, C]")
    if dump["labels"].shape != (m,) or dump["is_seen"].shape != (m,):
        raise ValueError(f"{path}: labels and is_seen must have shape ({m},)")
    ids = dump["eval_labels"]
    if ids.ndim != 1 or ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= dump["q_s"].shape[1]:
        raise ValueError(f"{path}: eval_labels must be a non-empty list of class ids < C={dump['q_s'].shape[1]}")


def _as_matrix(x: Any, what: str) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{what}: expected logits of shape [N, D] with N > 0, got {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        raise ValueError(f"{what}: logits contain NaN or inf")
    return x


def split_branches(logits: torch.Tensor, num_classes: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``q̃ = [q_s, q_u]`` of width ``2C`` into ``(q_s, q_u)``."""
    width = logits.shape[-1]
    if width % 2 or (num_classes is not None and width != 2 * num_classes):
        expected = "an even width" if num_classes is None else f"width 2*{num_classes}"
        raise ValueError(f"concatenated logits must have {expected} ([q_s, q_u]), got width {width}")
    return logits[..., : width // 2], logits[..., width // 2:]


def restricted_argmax(logits: torch.Tensor, class_ids: torch.Tensor) -> torch.Tensor:
    """Argmax over the columns ``class_ids`` only, returned as all-class ids (the evaluated subset's prediction)."""
    class_ids = class_ids.to(logits.device).long()
    return class_ids[logits[:, class_ids].argmax(dim=1)]


def routing_metrics(route_seen: torch.Tensor, is_seen: torch.Tensor) -> dict[str, float]:
    """Routing accuracy (percent) on the seen and unseen subsets and overall, and the share sent to each branch."""
    route_seen, is_seen = route_seen.bool().cpu(), is_seen.bool().cpu()
    if route_seen.shape != is_seen.shape:
        raise ValueError(f"route_seen {tuple(route_seen.shape)} and is_seen {tuple(is_seen.shape)} differ in shape")
    correct = route_seen == is_seen

    def pct(mask: torch.Tensor) -> float:
        return 100.0 * mask.double().mean().item() if mask.numel() else math.nan

    return {
        "route_acc_seen": pct(correct[is_seen]),
        "route_acc_unseen": pct(correct[~is_seen]),
        "route_acc": pct(correct),
        "share_seen": pct(route_seen),
        "share_unseen": pct(~route_seen),
        "n_seen": int(is_seen.sum()),
        "n_unseen": int((~is_seen).sum()),
    }


class Router:
    """Base router: ``fit`` on seen-train logits, outlier ``score``, ``threshold``, ``route_to_seen``, ``combine``."""

    name = ""
    routes = True  # False for the non-routing average combiner
    needs_truth = False  # True for the oracle
    uses_lam = False  # only distance-like scores are scaled by lam
    note = ""  # after fit: anything about the fit worth logging, in words ("" when there is nothing to say)

    def __init__(self, lam: float = DEFAULT_LAMBDA, percentile: float = DEFAULT_PERCENTILE) -> None:
        if not lam > 0:
            raise ValueError(f"router lam must be > 0, got {lam}")
        if not 0.0 <= percentile <= 100.0:
            raise ValueError(f"router percentile must be in [0, 100], got {percentile}")
        self.lam = float(lam)
        self.percentile = float(percentile)
        self.fit_scores: torch.Tensor | None = None

    def fit(self, seen_logits: torch.Tensor) -> Router:
        """Fit on the concatenated logits of the seen (base) train images; returns ``self``."""
        x = _as_matrix(seen_logits, f"{type(self).__name__}.fit(seen_logits)")
        self.fit_scores = self._fit(x).detach().double().cpu()
        return self

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        """Fit the router's statistics on ``x`` and return the outlier scores of the fit samples."""
        raise NotImplementedError

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        """Outlier score per sample (higher = more unseen-like)."""
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if self.fit_scores is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(seen_logits) or load_state_dict() first")

    @property
    def threshold(self) -> float:
        """``percentile``-th percentile of the fit scores (times ``lam`` for distance routers); NaN if no routing."""
        if not self.routes:
            return math.nan
        self._check_fitted()
        base = torch.quantile(self.fit_scores, self.percentile / 100.0).item()
        return self.lam * base if self.uses_lam else base

    def route_to_seen(self, logits: torch.Tensor) -> torch.Tensor:
        """BoolTensor[M]: True where the sample is answered by the seen branch (``score <= threshold``)."""
        return self.score(logits) <= self.threshold

    def decide(self, logits: torch.Tensor, num_classes: int | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Route flags (None for a router that does not route) and the final logits ``[M, C]`` in one pass."""
        q_s, q_u = split_branches(logits, num_classes)
        seen = self.route_to_seen(logits).to(logits.device)
        return seen, torch.where(seen[:, None], q_s, q_u)

    def combine(self, logits: torch.Tensor, num_classes: int | None = None) -> torch.Tensor:
        """Final logits ``[M, C]``: ``q_s`` where routed to the seen branch, else ``q_u``."""
        return self.decide(logits, num_classes)[1]

    def state_dict(self) -> dict[str, Any]:
        """Tensors and plain values only (loads with ``torch.load(weights_only=True)``)."""
        self._check_fitted()
        return {"name": self.name, "lam": self.lam, "percentile": self.percentile, "fit_scores": self.fit_scores,
                **self._extra_state()}

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> Router:
        """Restore a router saved by ``state_dict``; returns ``self``."""
        if state.get("name") != self.name:
            raise ValueError(f"router state is for {state.get('name')!r}, not {self.name!r}")
        missing = [k for k in ("lam", "percentile", "fit_scores", *self._extra_state_keys()) if k not in state]
        if missing:
            raise ValueError(f"{self.name} router state lacks keys {missing}")
        self.lam, self.percentile = float(state["lam"]), float(state["percentile"])
        self.fit_scores = state["fit_scores"].double().cpu()
        self._load_extra_state(state)
        return self

    def _extra_state_keys(self) -> tuple[str, ...]:
        return ()

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        """Parameters, threshold and fit-score quantiles (for ``router.json``)."""
        self._check_fitted()
        out: dict[str, Any] = {"router": self.name, "lam": self.lam, "uses_lam": self.uses_lam,
                               "percentile": self.percentile, "threshold": self.threshold,
                               "num_fit": int(self.fit_scores.numel())}
        if self.fit_scores.numel():
            q = torch.quantile(self.fit_scores, torch.tensor(list(QUANTILES.values()), dtype=torch.float64))
            out["fit_score_quantiles"] = dict(zip(QUANTILES, q.tolist()))
        return out


class MahalanobisRouter(Router):
    """PETR's router: unsquared Mahalanobis distance of ``q̃`` to the seen-train Gaussian, ``T = lam · P99``.

    A singular covariance is expected, not an error: each branch's logits are a feature vector times a fixed text
    classifier, so ``q̃`` spans at most the two feature widths (fewer than ``2C`` dimensions on many-class tasks),
    and ``N <= D`` fit images span even less. The precision is then the pseudo-inverse (eigenvalues below ``rcond``
    times the largest count as zero): the distance is measured within the span of the fit logits. ``note`` says so
    in words for the caller to log; nothing is raised or warned.
    """

    name = "mahalanobis"
    uses_lam = True

    def __init__(self, lam: float = DEFAULT_LAMBDA, percentile: float = DEFAULT_PERCENTILE,
                 rcond: float = 1e-10) -> None:
        super().__init__(lam, percentile)
        self.rcond = float(rcond)
        self.mean: torch.Tensor | None = None
        self.precision: torch.Tensor | None = None
        self.pseudo_inverse = False

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        x = x.detach().to(torch.float64)
        n, d = x.shape
        mean = x.mean(dim=0)
        centred = x - mean
        cov = centred.T @ centred / n
        eig = torch.linalg.eigvalsh(cov)
        rank = int((eig > self.rcond * eig.abs().max()).sum())
        self.pseudo_inverse = rank < d
        self.note = "" if not self.pseudo_inverse else (
            f"the covariance of the {n:,} fit logits has rank {rank} of {d} dimensions"
            f"{' (N <= D)' if n <= d else ''}: distances are measured within the span of the fit logits "
            f"(pseudo-inverse, eigenvalues below {self.rcond:g} x the largest count as zero)")
        self.mean = mean.cpu()
        self.precision = torch.linalg.pinv(cov, rtol=self.rcond, hermitian=True).cpu()
        return self.distance(x)

    def distance(self, logits: torch.Tensor) -> torch.Tensor:
        """Unsquared Mahalanobis distance ``[M]`` (float64, on the device of ``logits``)."""
        if self.mean is None:
            raise RuntimeError("MahalanobisRouter is not fitted: call fit(seen_logits) or load_state_dict() first")
        x = logits.detach().to(torch.float64)
        if x.ndim != 2 or x.shape[1] != self.mean.numel():
            raise ValueError(f"MahalanobisRouter: expected logits [M, {self.mean.numel()}], got {tuple(x.shape)}")
        mean, precision = self.mean.to(x.device), self.precision.to(x.device)
        parts = []
        for start in range(0, x.shape[0], _CHUNK):
            diff = x[start:start + _CHUNK] - mean
            parts.append(((diff @ precision) * diff).sum(dim=1).clamp_min(0.0).sqrt())
        return torch.cat(parts) if parts else x.new_zeros(0)

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        return self.distance(logits)

    def _extra_state(self) -> dict[str, Any]:
        return {"rcond": self.rcond, "mean": self.mean, "precision": self.precision,
                "pseudo_inverse": self.pseudo_inverse}

    def _extra_state_keys(self) -> tuple[str, ...]:
        return ("rcond", "mean", "precision")

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.rcond = float(state["rcond"])
        self.mean = state["mean"].double().cpu()
        self.precision = state["precision"].double().cpu()
        self.pseudo_inverse = bool(state.get("pseudo_inverse", False))

    def summary(self) -> dict[str, Any]:
        out = super().summary()
        out.update(score="unsquared Mahalanobis distance", dim=int(self.mean.numel()),
                   pseudo_inverse=self.pseudo_inverse, rcond=self.rcond)
        return out


class _SeenBranchScoreRouter(Router):
    """Routers scoring the seen branch ``q_s`` alone; fitting only records the fit scores."""

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        return self.score(x)

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        q_s, _ = split_branches(logits)
        return self._branch_score(q_s.detach().to(torch.float64))

    def _branch_score(self, q_s: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class MaxConfidenceRouter(_SeenBranchScoreRouter):
    """Maximum softmax probability of the seen branch (score ``-MSP``)."""

    name = "max_conf"

    def _branch_score(self, q_s: torch.Tensor) -> torch.Tensor:
        return -q_s.softmax(dim=1).max(dim=1).values


class EntropyRouter(_SeenBranchScoreRouter):
    """Softmax entropy of the seen branch (nats)."""

    name = "entropy"

    def _branch_score(self, q_s: torch.Tensor) -> torch.Tensor:
        log_p = q_s.log_softmax(dim=1)
        return -(log_p.exp() * log_p).sum(dim=1)


class EnergyRouter(_SeenBranchScoreRouter):
    """Energy score of the seen branch, ``-T·logsumexp(q_s / T)``."""

    name = "energy"

    def __init__(self, lam: float = DEFAULT_LAMBDA, percentile: float = DEFAULT_PERCENTILE,
                 temperature: float = 1.0) -> None:
        super().__init__(lam, percentile)
        if not temperature > 0:
            raise ValueError(f"energy temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)

    def _branch_score(self, q_s: torch.Tensor) -> torch.Tensor:
        return -self.temperature * torch.logsumexp(q_s / self.temperature, dim=1)

    def _extra_state(self) -> dict[str, Any]:
        return {"temperature": self.temperature}

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.temperature = float(state.get("temperature", 1.0))


class _SklearnRouter(Router):
    """Adapter for scikit-learn novelty detectors fitted on ``q̃`` (score = ``-score_samples``)."""

    default_params: dict[str, Any] = {}

    def __init__(self, lam: float = DEFAULT_LAMBDA, percentile: float = DEFAULT_PERCENTILE, **params: Any) -> None:
        super().__init__(lam, percentile)
        self.params = {**self.default_params, **params}
        self.estimator = self._make_estimator()  # fails early on bad parameters
        self.fit_data: torch.Tensor | None = None

    def _make_estimator(self) -> Any:
        raise NotImplementedError

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        self.fit_data = x.detach().to(torch.float64).cpu()
        self.estimator = self._make_estimator().fit(self.fit_data.numpy())
        return torch.from_numpy(self._fit_outlier_scores(self.fit_data.numpy()))

    def _fit_outlier_scores(self, x: np.ndarray) -> np.ndarray:
        return -self.estimator.score_samples(x)

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        if self.fit_data is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(seen_logits) first")
        x = logits.detach().to(torch.float64).cpu().numpy()
        return torch.from_numpy(-self.estimator.score_samples(x)).to(logits.device)

    def _extra_state(self) -> dict[str, Any]:
        return {"params": dict(self.params), "fit_data": self.fit_data}

    def _extra_state_keys(self) -> tuple[str, ...]:
        return ("params", "fit_data")

    def _load_extra_state(self, state: dict[str, Any]) -> None:
        self.params = dict(state["params"])
        fit_scores = self.fit_scores
        self.fit(state["fit_data"])  # deterministic refit (fixed random_state), keeps checkpoints pickle-free
        if not torch.allclose(self.fit_scores, fit_scores, rtol=1e-6, atol=1e-9):
            warnings.warn(f"{self.name} router: refitted scores differ from the saved ones "
                          "(different scikit-learn version?)", RuntimeWarning, stacklevel=2)


class IsolationForestRouter(_SklearnRouter):
    """scikit-learn IsolationForest on ``q̃``."""

    name = "iforest"
    default_params = {"n_estimators": 100, "random_state": 0}

    def _make_estimator(self) -> Any:
        from sklearn.ensemble import IsolationForest

        return IsolationForest(**self.params)


class LOFRouter(_SklearnRouter):
    """scikit-learn LocalOutlierFactor (novelty=True) on ``q̃``; fit scores from ``negative_outlier_factor_``."""

    name = "lof"
    default_params = {"n_neighbors": 20}

    def _make_estimator(self) -> Any:
        from sklearn.neighbors import LocalOutlierFactor

        if self.params.get("novelty", True) is not True:
            raise ValueError("lof router needs novelty=True (it scores new samples)")
        return LocalOutlierFactor(**{**self.params, "novelty": True})

    def _fit_outlier_scores(self, x: np.ndarray) -> np.ndarray:
        return -self.estimator.negative_outlier_factor_


class OneClassSVMRouter(_SklearnRouter):
    """scikit-learn OneClassSVM (RBF kernel, gamma="scale") on ``q̃``."""

    name = "ocsvm"
    default_params = {"kernel": "rbf", "gamma": "scale", "nu": 0.5}

    def _make_estimator(self) -> Any:
        from sklearn.svm import OneClassSVM

        return OneClassSVM(**self.params)


class AverageLogitsRouter(Router):
    """No routing: the final logits are the mean of the two branches."""

    name = "average"
    routes = False

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        split_branches(x)
        return x.new_zeros(0, dtype=torch.float64)

    def route_to_seen(self, logits: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("the 'average' router does not route; use combine() for its logits")

    def decide(self, logits: torch.Tensor, num_classes: int | None = None) -> tuple[None, torch.Tensor]:
        q_s, q_u = split_branches(logits, num_classes)
        return None, (q_s + q_u) / 2


class OracleRouter(Router):
    """Upper bound: routes by the true subset flag given through ``set_truth(is_seen)``."""

    name = "oracle"
    needs_truth = True

    def __init__(self, lam: float = DEFAULT_LAMBDA, percentile: float = DEFAULT_PERCENTILE) -> None:
        super().__init__(lam, percentile)
        self.truth: torch.Tensor | None = None

    def set_truth(self, is_seen: torch.Tensor) -> OracleRouter:
        """Give the true subset flags of the samples routed next; returns ``self``."""
        self.truth = torch.as_tensor(is_seen).bool()
        return self

    def _fit(self, x: torch.Tensor) -> torch.Tensor:
        split_branches(x)
        return torch.zeros(x.shape[0], dtype=torch.float64)  # seen train samples: score 0, threshold 0

    def score(self, logits: torch.Tensor) -> torch.Tensor:
        if self.truth is None or self.truth.shape != (logits.shape[0],):
            raise RuntimeError(f"OracleRouter needs the true subset flags of these {logits.shape[0]} samples: "
                               "call set_truth(is_seen) before routing")
        return (~self.truth).to(device=logits.device, dtype=torch.float64)


ROUTERS: dict[str, type[Router]] = {
    cls.name: cls
    for cls in (MahalanobisRouter, AverageLogitsRouter, MaxConfidenceRouter, EntropyRouter, EnergyRouter,
                IsolationForestRouter, LOFRouter, OneClassSVMRouter, OracleRouter)
}


def build_router(name: str, lam: float = DEFAULT_LAMBDA, percentile: float = DEFAULT_PERCENTILE,
                 **kwargs: Any) -> Router:
    """Instantiate a router by registry name (``ROUTERS``); unknown names get a "did you mean"."""
    check_availability(name, ROUTERS, kind="router")
    return ROUTERS[name](lam=lam, percentile=percentile, **kwargs)


def router_from_state(state: dict[str, Any]) -> Router:
    """Rebuild any router from its ``state_dict``."""
    name = state.get("name") if isinstance(state, dict) else None
    check_availability(str(name), ROUTERS, kind="router in saved state")
    return ROUTERS[name]().load_state_dict(state)
