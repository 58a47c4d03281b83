"""Evaluation in the all-class label space: restriction to the evaluated classes, and the routed decision and its
statistics (used by ``trainers/routed.Routing``, PETR's router component).

A sample counts as seen when its label is a base class of a base-to-novel task; in cross/dg every target sample is
unseen (the seen branch learned the source classes only).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from tabulate import tabulate

from .routers import Router, restricted_argmax, routing_metrics


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


def json_safe(metrics: dict) -> dict:
    """``metrics`` with NaN values as None (JSON has no NaN)."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
