"""Test helpers for PETR: a tiny EuroSAT tree with enough base train images, tiny-run arguments, a NumPy router."""
from __future__ import annotations

import json
import os

import numpy as np

from tests.helpers_datasets import write_image, write_tree
from tests.helpers_run import train_argv

TRAIN_PER_CLASS = 6


def write_eurosat(root, train_per_class: int = TRAIN_PER_CLASS):
    """Tiny EuroSAT tree (5 classes: 3 base, 2 novel) with ``train_per_class`` train, 2 val and 2 test images each.

    More train images than the published-style tree, so the router's fit set (base train) has more samples than
    the 2C = 10 dimensions of q̃ and a well-conditioned covariance.
    """
    tree = write_tree("EuroSAT", root, mode="json")
    with open(tree.split_file) as f:
        split = json.load(f)
    for label, name in enumerate(tree.classnames):
        key = sorted({item[0].split("/")[0] for item in split["train"] if item[1] == label})[0]
        for i in range(train_per_class - 3):
            rel = f"{key}/extra_{i}.jpg"
            path = os.path.join(tree.dataset_dir, "2750", rel)
            write_image(path, seed=1000 + 10 * label + i)
            split["train"].append([rel, label, name])
            tree.truth[path] = (label, "train")
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    return tree


def petr_argv(root, out, student_file: str, teacher_file: str, *opts: str, flags: tuple = (),
              dataset: str = "eurosat") -> list[str]:
    """train.py arguments of a tiny PETR run (``flags`` such as --eval-only go before the KEY VALUE opts)."""
    return train_argv("PETR", "vit_b16_ep40_batch8_4ctx", root, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "8",
                      "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "2", "DATASET.NUM_SHOTS", "0",
                      "TRAINER.PETR.TEACHER_NAME", teacher_file, "TRAINER.PETR.KD_WEIGHT", "1000.0", *opts,
                      dataset=dataset, flags=flags, backbone=student_file)


def numpy_mahalanobis_route(fit: np.ndarray, x: np.ndarray, lam: float, percentile: float):
    """Reference router: unsquared Mahalanobis distance, 1/N covariance, T = lam · percentile of fit distances."""
    mu = fit.mean(axis=0)
    centred = fit - mu
    precision = np.linalg.inv(centred.T @ centred / fit.shape[0])

    def dist(z):
        return np.sqrt(np.einsum("ij,jk,ik->i", z - mu, precision, z - mu))

    threshold = lam * np.percentile(dist(fit), percentile)
    return dist(x) <= threshold, threshold, mu, precision
