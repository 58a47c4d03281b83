"""Fabricated output trees (results.json and upstream log.txt formats) and PETR logits dumps for the results tests."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import torch
from yacs.config import CfgNode

from engine.runs import seed_of
from trainers.routing.routers import FIT_DUMP_NAME, TRAIN_U_DUMP_NAME, logits_dump_name, save_logits_dump, save_q_dump

CFG_LINES = "TEST:\n  EVALUATOR: Classification\n  FINAL_MODEL: {final}\n  SPLIT: test\n"


def result_block(acc: float, total: int = 1000, decimals: int = 1) -> str:
    """Dassl's evaluator block (CoOp/PromptKD print one decimal)."""
    correct = round(total * acc / 100)
    return (f"=> result\n* total: {total:,}\n* correct: {correct:,}\n* accuracy: {acc:.{decimals}f}%\n"
            f"* error: {100 - acc:.{decimals}f}%\n* macro_f1: {acc - 1:.{decimals}f}%\n")


def coop_train_log(final_acc: float) -> str:
    """CoOp-style training log: epochs, ``Finish training``, then the final test block."""
    epochs = "".join(f"epoch [{e}/2] batch [1/1] time 0.1 (0.1) data 0.0 (0.0) loss 1.0 (1.0) acc 50.0 (50.0) "
                     f"lr 2.0000e-03 eta 0:00:01\n" for e in (1, 2))
    return (CFG_LINES.format(final="last_step") + epochs + "Checkpoint saved to out/prompt_learner/model.pth.tar-2\n"
            "Finish training\nDeploy the last-epoch model\nEvaluate on the *test* set\n"
            + result_block(final_acc) + "Elapsed: 0:00:05\n")


def coop_test_log(acc: float) -> str:
    """CoOp/CoCoOp eval-only log (test_new): no ``Finish training``, one ``=> result`` block."""
    return ("Loading weights to prompt_learner from \"out/prompt_learner/model.pth.tar-2\" (epoch = 2)\n"
            "Evaluate on the *test* set\n" + result_block(acc))


def promptkd_log(val_accs: list[float], final_acc: float) -> str:
    """PromptKD training log: per-epoch ``*val*`` blocks (base), then the best-val novel test."""
    parts = [CFG_LINES.format(final="best_val")]
    for e, acc in enumerate(val_accs, 1):
        parts.append(f"epoch [{e}/{len(val_accs)}] batch [1/1] loss 1.0 (1.0) lr 5.0000e-03 eta 0:00:01\n"
                     "Evaluate on the *val* set\n" + result_block(acc))
        if acc == max(val_accs[:e]):
            parts.append("Checkpoint saved to out/VLPromptLearner/model-best.pth.tar\n")
    parts.append("Finish training\nDeploy the model with the best val performance\n"
                 "Evaluate on the *test* set\n" + result_block(final_acc) + "Elapsed: 0:00:09\n")
    return "".join(parts)


def upstream_cfg(trainer: str, dataset: str, seed: int, subsample: str = "all", modal: str = "") -> CfgNode:
    """The keys of an upstream Dassl run's merged config that the results library reads (printed at the top of its
    log: ``helpers_upstream.write_dassl_log``); ``modal``: PromptKD's TRAINER.MODAL."""
    return CfgNode({"DATASET": {"NAME": dataset, "SUBSAMPLE_CLASSES": subsample}, "SEED": seed,
                    "TRAINER": {"NAME": trainer, **({"MODAL": modal} if modal else {})}})


def write_text(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def write_results_json(run_dir: str, accuracy: float, **extra) -> None:
    """This project's results.json (percent accuracy); its seed that of its ``seed<S>`` / ``seed_<S>`` folder (else 1),
    its ``dataset`` and ``subsample_classes`` fields only when given."""
    os.makedirs(run_dir, exist_ok=True)
    seed = seed_of(os.path.basename(os.path.normpath(run_dir)))
    record = {"trainer": extra.pop("trainer", "PETR"), "config": "cfg", "seed": 1 if seed is None else seed,
              "split": "test", "accuracy": accuracy, "macro_f1": accuracy - 1.0, **extra}
    with open(os.path.join(run_dir, "results.json"), "w") as f:
        json.dump(record, f)


def make_seed_runs(directory: str, accs: list[float], fmt: str = "json", seed_style: str = "seed{}") -> None:
    """One run folder per seed (1..n) under ``directory``, as CoOp's ``parse_test_res.py`` expects them.

    ``fmt``: ``json`` (this project's results.json), ``train_log`` (upstream training log, read after ``Finish
    training``) or ``test_log`` (upstream eval-only log, read with ``--test-log``).
    """
    logs = {"train_log": coop_train_log, "test_log": coop_test_log}
    for seed, acc in enumerate(accs, 1):
        path = os.path.join(directory, seed_style.format(seed))
        if fmt == "json":
            write_results_json(path, acc)
        else:
            write_text(os.path.join(path, "log.txt"), logs[fmt](acc))


def run_dir(root: str, role: str, dataset: str, trainer: str, cfg: str, seed: int, shots: str = "shots_16",
            seed_style: str = "seed{}") -> str:
    return os.path.join(root, role, dataset, shots, trainer, cfg, seed_style.format(seed))


def make_b2n_tree(root: str, trainer: str, cfg: str, results: dict[str, tuple[list[float], list[float]]],
                  fmt: str = "json", shots: str = "shots_16", **record) -> None:
    """train_base + test_new runs; ``results[dataset] = (base per seed, novel per seed)``, seeds 1..n; ``record``:
    more results.json fields.

    ``fmt="json"``: results.json (ours); ``fmt="log"``: upstream CoOp logs (train log with ``Finish training`` for
    base, eval-only ``=> result`` log for novel).
    """
    for ds, (base, novel) in results.items():
        for seed, (b, n) in enumerate(zip(base, novel), 1):
            base_dir = run_dir(root, "train_base", ds, trainer, cfg, seed, shots)
            new_dir = run_dir(root, "test_new", ds, trainer, cfg, seed, shots)
            if fmt == "json":
                write_results_json(base_dir, b, dataset=ds, trainer=trainer, subsample_classes="base", **record)
                write_results_json(new_dir, n, dataset=ds, trainer=trainer, subsample_classes="new", **record)
            else:
                write_text(os.path.join(base_dir, "log.txt"), coop_train_log(b))
                write_text(os.path.join(new_dir, "log.txt"), coop_test_log(n))


def make_promptkd_tree(root: str, results: dict[str, list[tuple[list[float], float]]], cfg: str = "kdcfg") -> None:
    """PromptKD's single ``seed_S`` folder under train_base: ``results[dataset][seed-1] = (val accs, novel)``."""
    for ds, runs in results.items():
        for seed, (val, final) in enumerate(runs, 1):
            d = run_dir(root, "train_base", ds, "PromptKD", cfg, seed, "shots_0", seed_style="seed_{}")
            write_text(os.path.join(d, "log.txt"), promptkd_log(val, final))


@dataclass
class SyntheticDumps:
    """What ``make_dumps`` wrote, as NumPy arrays, for independent reference computations."""

    fit_q: np.ndarray  # [N, 2C]
    train_u_q: np.ndarray  # [Nu, 2C]
    q_s: np.ndarray  # [M, C] base test then novel test
    q_u: np.ndarray
    labels: np.ndarray
    is_seen: np.ndarray
    base_ids: np.ndarray
    novel_ids: np.ndarray


def _branch_logits(rng: np.random.Generator, labels: np.ndarray, num_classes: int, seen: bool) -> np.ndarray:
    """Seen samples: peaked seen-branch logits; unseen samples: peaked unseen-branch logits (plus noise)."""
    m = len(labels)
    q_s = rng.normal(0, 1.0, size=(m, num_classes))
    q_u = rng.normal(0, 1.0, size=(m, num_classes))
    strong, weak = (q_s, q_u) if seen else (q_u, q_s)
    strong[np.arange(m), labels] += 6.0
    weak[np.arange(m), labels] += rng.normal(1.0, 1.5, size=m)
    if not seen:
        q_s += rng.normal(0, 2.0, size=(m, 1))  # shifts the unseen samples away from the seen fit Gaussian
    return np.concatenate([q_s, q_u], axis=1)


def make_dumps(base_dir: str, new_dir: str | None = None, num_classes: int = 6, n_fit: int = 120, n_test: int = 60,
               seed: int = 0) -> SyntheticDumps:
    """Write router_fit_logits.pt, train_u_logits.pt and logits_test.pt (base) in ``base_dir`` and the novel
    logits_test.pt in ``new_dir`` (or logits_new.pt next to the base dump when ``new_dir`` is None)."""
    rng = np.random.default_rng(seed)
    c = num_classes
    base_ids, novel_ids = np.arange(c // 2), np.arange(c // 2, c)
    fit_q = _branch_logits(rng, rng.choice(base_ids, n_fit), c, seen=True)
    train_u_q = _branch_logits(rng, rng.choice(novel_ids, n_fit), c, seen=False)
    yb, yn = rng.choice(base_ids, n_test), rng.choice(novel_ids, n_test)
    qb, qn = _branch_logits(rng, yb, c, seen=True), _branch_logits(rng, yn, c, seen=False)
    save_q_dump(os.path.join(base_dir, FIT_DUMP_NAME), torch.from_numpy(fit_q))
    save_q_dump(os.path.join(base_dir, TRAIN_U_DUMP_NAME), torch.from_numpy(train_u_q))

    def dump(path: str, q: np.ndarray, y: np.ndarray, seen: bool, ids: np.ndarray) -> None:
        t = torch.from_numpy(q).float()
        save_logits_dump(path, t[:, :c], t[:, c:], torch.from_numpy(y), torch.full((len(y),), seen),
                         torch.from_numpy(ids))

    dump(os.path.join(base_dir, logits_dump_name("test")), qb, yb, True, base_ids)
    novel_path = os.path.join(new_dir, logits_dump_name("test")) if new_dir else os.path.join(
        base_dir, logits_dump_name("new"))
    dump(novel_path, qn, yn, False, novel_ids)
    q = np.concatenate([qb, qn]).astype(np.float32).astype(np.float64)  # as stored (float32)
    return SyntheticDumps(fit_q=fit_q.astype(np.float32).astype(np.float64),
                          train_u_q=train_u_q.astype(np.float32).astype(np.float64), q_s=q[:, :c], q_u=q[:, c:],
                          labels=np.concatenate([yb, yn]), is_seen=np.r_[np.ones(n_test, bool), np.zeros(n_test, bool)],
                          base_ids=base_ids, novel_ids=novel_ids)
