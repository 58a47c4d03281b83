"""Dassl's ``Classification`` evaluator (accuracy, error, macro-F1, per-class block) and ``compute_accuracy``.

Deviation from Dassl, on purpose: percentages print with two decimals (``* accuracy: 75.00%``) so seed means
are not rounded twice; upstream ``parse_test_res.py`` regexes (``[\\.\\deE+-]+``) still match these lines.
"""
from __future__ import annotations

import os
from collections import OrderedDict, defaultdict

import numpy as np
import torch

from .registry import EVALUATOR_REGISTRY, check_availability


def macro_f1_score(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean F1 over the classes present in ``y_true`` (sklearn's ``f1_score(average="macro", labels=unique(y_true))``,
    0 for a class never predicted right), in NumPy so that evaluation does not import sklearn."""
    scores = []
    for label in np.unique(y_true):
        tp = np.sum((y_pred == label) & (y_true == label))
        wrong = np.sum((y_pred == label) != (y_true == label))  # false positives + false negatives
        scores.append(2 * tp / (2 * tp + wrong) if tp else 0.0)
    return float(np.mean(scores))

class EvaluatorBase:
    """Interface: ``reset()``, ``process(model_output, ground_truth)``, ``evaluate() -> OrderedDict``."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg

    def reset(self) -> None:
        raise NotImplementedError

    def process(self, mo: torch.Tensor, gt: torch.Tensor) -> None:
        raise NotImplementedError

    def evaluate(self) -> OrderedDict:
        raise NotImplementedError


@EVALUATOR_REGISTRY.register()
class Classification(EvaluatorBase):
    """Top-1 classification metrics over all processed batches."""

    def __init__(self, cfg, lab2cname: dict[int, str] | None = None, **kwargs) -> None:
        super().__init__(cfg)
        self._lab2cname = lab2cname
        self._per_class_res: dict[int, list[bool]] | None = None
        self.reset()

    def reset(self) -> None:
        self._correct = 0
        self._total = 0
        self._y_true: list[int] = []
        self._y_pred: list[int] = []
        if self.cfg.TEST.PER_CLASS_RESULT:
            if self._lab2cname is None:
                raise ValueError("TEST.PER_CLASS_RESULT needs lab2cname (class names) for the evaluator")
            self._per_class_res = defaultdict(list)

    @property
    def y_true(self) -> list[int]:
        """Labels of every sample processed since the last ``reset``."""
        return list(self._y_true)

    @property
    def y_pred(self) -> list[int]:
        """Predicted labels (argmax) of every sample processed since the last ``reset``."""
        return list(self._y_pred)

    def process(self, mo: torch.Tensor, gt: torch.Tensor) -> None:
        """Accumulate predictions ``argmax(mo, 1)`` against labels ``gt``."""
        pred = mo.argmax(dim=1)
        matches = pred.eq(gt).cpu()
        self._correct += int(matches.sum().item())
        self._total += gt.shape[0]
        self._y_true.extend(gt.cpu().tolist())
        self._y_pred.extend(pred.cpu().tolist())
        if self._per_class_res is not None:
            for label, hit in zip(gt.cpu().tolist(), matches.tolist()):
                self._per_class_res[label].append(bool(hit))

    def evaluate(self) -> OrderedDict:
        """Return accuracy, error_rate, macro_f1 (percent) and print Dassl's ``=> result`` block."""
        if self._total == 0:
            raise RuntimeError("Classification.evaluate(): no samples were processed (empty evaluation split?)")
        acc = 100.0 * self._correct / self._total
        err = 100.0 - acc
        macro_f1 = 100.0 * macro_f1_score(np.asarray(self._y_true), np.asarray(self._y_pred))
        results = OrderedDict(accuracy=acc, error_rate=err, macro_f1=macro_f1)
        print(
            "=> result\n"
            f"* total: {self._total:,}\n"
            f"* correct: {self._correct:,}\n"
            f"* accuracy: {acc:.2f}%\n"
            f"* error: {err:.2f}%\n"
            f"* macro_f1: {macro_f1:.2f}%"
        )
        if self._per_class_res is not None:
            results["perclass_accuracy"] = self._print_per_class()
        if self.cfg.TEST.COMPUTE_CMAT:
            self._save_cmat()
        return results

    def _print_per_class(self) -> float:
        print("=> per-class result")
        accs = []
        for label in sorted(self._per_class_res):
            hits = self._per_class_res[label]
            correct, total = sum(hits), len(hits)
            acc = 100.0 * correct / total
            accs.append(acc)
            name = self._lab2cname.get(label, "?")
            print(f"* class: {label} ({name})\ttotal: {total:,}\tcorrect: {correct:,}\tacc: {acc:.2f}%")
        mean_acc = float(np.mean(accs))
        print(f"* average: {mean_acc:.2f}%")
        return mean_acc

    def _save_cmat(self) -> None:
        from sklearn.metrics import confusion_matrix  # only here: importing sklearn would slow every train.py start

        from .checkpoint import atomic_torch_save

        cmat = confusion_matrix(self._y_true, self._y_pred, normalize="true")
        path = os.path.join(self.cfg.OUTPUT_DIR, "cmat.pt")
        atomic_torch_save(torch.from_numpy(cmat), path)
        print(f"Confusion matrix is saved to {path}")


def build_evaluator(cfg, **kwargs) -> EvaluatorBase:
    """Instantiate ``cfg.TEST.EVALUATOR`` from the registry."""
    name = cfg.TEST.EVALUATOR
    check_availability(name, EVALUATOR_REGISTRY.registered_names(), kind="evaluator (TEST.EVALUATOR)")
    if cfg.VERBOSE:
        print(f"Loading evaluator: {name}")
    return EVALUATOR_REGISTRY.get(name)(cfg, **kwargs)


def compute_accuracy(output, target: torch.Tensor, topk: tuple[int, ...] = (1,)) -> list[torch.Tensor]:
    """Top-k accuracies in percent (one 1-element tensor per k); ``output`` may be a tuple (first item used)."""
    if isinstance(output, (tuple, list)):
        output = output[0]
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    correct = pred.t().eq(target.view(1, -1).expand_as(pred.t()))
    return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch_size) for k in topk]
