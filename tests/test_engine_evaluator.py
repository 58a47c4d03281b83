"""Classification evaluator: printed block and metrics vs scikit-learn; per-class block; compute_accuracy."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score

from engine import Classification, build_evaluator, compute_accuracy, get_cfg_default


def _data(n=1234, c=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, c - 1, (n,), generator=g)  # class c-1 never occurs in y_true
    logits = torch.randn(n, c, generator=g)
    logits[torch.arange(n), labels] += 1.0  # better than chance
    return logits, labels


def test_block_and_metrics_match_sklearn(capsys):
    cfg = get_cfg_default()
    logits, labels = _data()
    ev = build_evaluator(cfg, lab2cname={i: f"c{i}" for i in range(5)})
    assert isinstance(ev, Classification)
    for chunk in range(0, len(labels), 500):
        ev.process(logits[chunk:chunk + 500], labels[chunk:chunk + 500])
    capsys.readouterr()
    res = ev.evaluate()
    y_true, y_pred = labels.numpy(), logits.numpy().argmax(1)
    acc = 100 * accuracy_score(y_true, y_pred)
    f1 = 100 * f1_score(y_true, y_pred, average="macro", labels=np.unique(y_true))
    assert res["accuracy"] == pytest.approx(acc) and res["error_rate"] == pytest.approx(100 - acc)
    assert res["macro_f1"] == pytest.approx(f1)
    correct = int((y_true == y_pred).sum())
    expected = (f"=> result\n* total: 1,234\n* correct: {correct:,}\n* accuracy: {acc:.2f}%\n"
                f"* error: {100 - acc:.2f}%\n* macro_f1: {f1:.2f}%\n")
    assert capsys.readouterr().out == expected


def test_per_class_block_and_cmat(tmp_path, capsys):
    cfg = get_cfg_default()
    cfg.TEST.PER_CLASS_RESULT = True
    cfg.TEST.COMPUTE_CMAT = True
    cfg.OUTPUT_DIR = str(tmp_path)
    logits, labels = _data(n=60, c=3, seed=1)
    ev = Classification(cfg, lab2cname={0: "cat", 1: "dog", 2: "cow"})
    ev.process(logits, labels)
    capsys.readouterr()
    res = ev.evaluate()
    out = capsys.readouterr().out
    y_true, y_pred = labels.numpy(), logits.numpy().argmax(1)
    per_class = [100 * np.mean(y_pred[y_true == k] == k) for k in np.unique(y_true)]
    assert res["perclass_accuracy"] == pytest.approx(np.mean(per_class))
    n0 = int((y_true == 0).sum())
    c0 = int(((y_true == 0) & (y_pred == 0)).sum())
    assert f"* class: 0 (cat)\ttotal: {n0:,}\tcorrect: {c0:,}\tacc: {per_class[0]:.2f}%" in out
    assert f"* average: {np.mean(per_class):.2f}%" in out
    cmat = torch.load(tmp_path / "cmat.pt", weights_only=True)
    np.testing.assert_allclose(cmat.numpy(), confusion_matrix(y_true, y_pred, normalize="true"))


def test_empty_evaluation_raises():
    with pytest.raises(RuntimeError, match="no samples"):
        Classification(get_cfg_default()).evaluate()


def test_compute_accuracy_topk_vs_numpy():
    logits, labels = _data(n=50, c=6, seed=2)
    top1, top3 = compute_accuracy((logits, None), labels, topk=(1, 3))
    order = np.argsort(-logits.numpy(), axis=1)
    ref1 = 100 * np.mean(order[:, 0] == labels.numpy())
    ref3 = 100 * np.mean((order[:, :3] == labels.numpy()[:, None]).any(1))
    assert top1.shape == (1,) and top1.item() == pytest.approx(ref1) and top3.item() == pytest.approx(ref3)


@pytest.mark.parametrize("seed", range(5))
def test_macro_f1_matches_sklearn(seed):
    """NumPy macro-F1 = sklearn's over the classes present, also with predicted classes absent from y_true."""
    from engine.evaluator import macro_f1_score

    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 6, size=200)
    y_pred = np.where(rng.random(200) < 0.5, y_true, rng.integers(0, 9, size=200))
    y_true[y_true == 3] = 4  # class 3 absent from y_true, still predicted
    ref = f1_score(y_true, y_pred, average="macro", labels=np.unique(y_true), zero_division=0)
    assert macro_f1_score(y_true, y_pred) == pytest.approx(ref)
