"""How good a tiny CLIP is on the demo data: zero-shot accuracy (all / base / novel classes, single template vs
the held-out ensemble, colour and shape parts) and a linear probe on frozen image features.

Command line: ``python -m demo.evaluate FILE [FILE ...] [--probe]`` prints one table per model.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from tabulate import tabulate
from tqdm import tqdm

import clip
from clip.classifier import template_ensemble
from demo.captions import EVAL_ENSEMBLE, EVAL_TEMPLATE
from demo.shapes import (
    CLASSNAMES,
    DEFAULT_PARAMS,
    SHAPES,
    SPLIT_NAMES,
    GenParams,
    label_order,
    render_split,
    to_model_input,
)


@torch.no_grad()
def text_classifier(model: torch.nn.Module, templates: Sequence[str],
                    tokenize: Callable[[list[str]], torch.Tensor]) -> torch.Tensor:
    """Normalised class embeddings [48, D] (canonical order) of the template ensemble (clip.classifier's)."""
    return template_ensemble(lambda texts: model.encode_text(tokenize(texts)), CLASSNAMES, templates)


@torch.no_grad()
def image_features(model: torch.nn.Module, images: np.ndarray, batch_size: int = 500) -> torch.Tensor:
    """Normalised image embeddings of uint8 [N, H, W, 3] images."""
    chunks = [model.encode_image(to_model_input(images[i:i + batch_size])) for i in range(0, len(images), batch_size)]
    return F.normalize(torch.cat(chunks), dim=-1)


def subset_accuracy(scores: torch.Tensor, labels: np.ndarray, classes: Sequence[int]) -> float:
    """Accuracy (%) on the images of ``classes`` with the argmax restricted to those classes (CoOp's subsets)."""
    classes_t = torch.as_tensor(list(classes))
    keep = torch.from_numpy(np.isin(labels, classes_t.numpy()))
    pred = classes_t[scores[keep][:, classes_t].argmax(dim=1)]
    return 100.0 * (pred == torch.from_numpy(labels)[keep]).float().mean().item()


def zero_shot_rows(image_feats: torch.Tensor, labels: np.ndarray, classifiers: dict[str, torch.Tensor]
                   ) -> list[list]:
    """One row per classifier: 48-way accuracy with its colour / shape parts, then base and novel per split."""
    n_shapes = len(SHAPES)
    rows = []
    for name, weights in classifiers.items():
        scores = image_feats @ weights.t()
        pred = scores.argmax(dim=1).numpy()
        row = [name, 100 * np.mean(pred == labels), 100 * np.mean(pred // n_shapes == labels // n_shapes),
               100 * np.mean(pred % n_shapes == labels % n_shapes)]
        for dataset in SPLIT_NAMES:
            order = label_order(dataset)
            m = math.ceil(len(order) / 2)
            row += [subset_accuracy(scores, labels, order[:m]), subset_accuracy(scores, labels, order[m:])]
        rows.append(row)
    return rows


def linear_probe(train_feats: torch.Tensor, train_labels: np.ndarray, test_feats: torch.Tensor,
                 test_labels: np.ndarray, classes: Sequence[int]) -> float:
    """Accuracy (%) of a logistic regression on frozen features, trained and tested on ``classes`` only."""
    tr = np.isin(train_labels, classes)
    te = np.isin(test_labels, classes)
    clf = LogisticRegression(max_iter=2000, C=10.0)
    clf.fit(train_feats[tr].numpy(), train_labels[tr])
    return 100.0 * clf.score(test_feats[te].numpy(), test_labels[te])


def evaluate(model: torch.nn.Module, tokenize: Callable[[list[str]], torch.Tensor], params: GenParams = DEFAULT_PARAMS,
             probe_per_class: int = 0, test_per_class: int | None = None) -> tuple[list[str], list[list]]:
    """Zero-shot table (headers, rows) of ``model`` on the demo test split; with a linear-probe row when asked."""
    test_images, test_labels = render_split("test", params, test_per_class)
    feats = image_features(model, test_images)
    classifiers = {"single template": text_classifier(model, [EVAL_TEMPLATE], tokenize),
                   f"ensemble ({len(EVAL_ENSEMBLE)})": text_classifier(model, EVAL_ENSEMBLE, tokenize)}
    headers = ["classifier", "all 48", "colour", "shape"]
    for dataset in SPLIT_NAMES:
        headers += [f"{dataset} base", f"{dataset} novel"]
    rows = zero_shot_rows(feats, test_labels, classifiers)
    if probe_per_class:
        train_images, train_labels = render_split("train", params, probe_per_class)
        train_feats = image_features(model, train_images)
        row = ["linear probe", linear_probe(train_feats, train_labels, feats, test_labels, range(len(CLASSNAMES))),
               "", ""]
        for dataset in SPLIT_NAMES:
            order = label_order(dataset)
            m = math.ceil(len(order) / 2)
            row += [linear_probe(train_feats, train_labels, feats, test_labels, order[:m]),
                    linear_probe(train_feats, train_labels, feats, test_labels, order[m:])]
        rows.append(row)
    return headers, rows


def quick_check(step: int, model: torch.nn.Module) -> None:
    """One line of single-template zero-shot accuracy on 10 test images per class (a pretraining progress hook)."""
    headers, rows = evaluate(model, clip.tokenize, test_per_class=10)
    tqdm.write(f"step {step}: " + ", ".join(f"{h} {v:.1f}" for h, v in zip(headers[1:], rows[0][1:])))


def print_zero_shot(path: str, probe_per_class: int = 0) -> None:
    """Load a tiny CLIP file with ``clip.load_model`` and print its evaluation table (accuracies in %)."""
    model = clip.load_model(path)
    headers, rows = evaluate(model, clip.tokenize, probe_per_class=probe_per_class)
    print(f"Zero-shot accuracy (%) of {path} on the demo test set (chance: all 2.1, base/novel 4.2)")
    print(tabulate(rows, headers=headers, floatfmt=".1f"))


def main(argv: list[str] | None = None) -> None:
    """Command line of the evaluation."""
    parser = argparse.ArgumentParser(description="Zero-shot accuracy and linear probe of tiny demo CLIPs.")
    parser.add_argument("files", nargs="+", help="tiny CLIP files (OpenAI-format state dicts)")
    parser.add_argument("--probe", type=int, default=100, metavar="N",
                        help="train images per class for the linear probe (0: no probe)")
    args = parser.parse_args(argv)
    for path in args.files:
        print_zero_shot(path, args.probe)


if __name__ == "__main__":
    main()
