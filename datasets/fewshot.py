"""Few-shot sampling with a portable JSON cache: ``<dataset_dir>/split_fewshot/shot_{K}-seed_{SEED}.json``.

The cache holds ``{"train": [[relpath, label, classname], ...], "val": [...]}`` with paths relative to the dataset
folder, so moving the data root keeps it valid. Sampling uses a local ``random.Random(seed)``: the same seed gives
the same shots whatever ran before. Train gets K images per class, val ``min(K, 4)`` (CoOp's rule).
"""
from __future__ import annotations

import os
import random
from collections import defaultdict
from collections.abc import Sequence

from engine.dataset_base import Datum
from engine.errors import InvalidInputError
from engine.utils import read_json, write_json

from .splits import SplitData, encode_items, make_datum

VAL_SHOTS_CAP = 4
"""CoOp samples ``min(K, 4)`` validation images per class."""


def fewshot_path(dataset_dir: str, num_shots: int, seed: int) -> str:
    """Where the few-shot cache of (K, seed) lives."""
    return os.path.join(dataset_dir, "split_fewshot", f"shot_{num_shots}-seed_{seed}.json")


def sample_per_class(items: Sequence[Datum], num_shots: int, rng: random.Random) -> list[Datum]:
    """``num_shots`` random items per label (all of them when a class has fewer), labels in first-seen order."""
    by_label: dict[int, list[Datum]] = defaultdict(list)
    for item in items:
        by_label[item.label].append(item)
    output: list[Datum] = []
    for group in by_label.values():
        output.extend(rng.sample(group, num_shots) if len(group) >= num_shots else group)
    return output


def warn_short_classes(items: Sequence[Datum], lab2cname: dict[int, str], num_shots: int, split_file: str) -> None:
    """Log a warning naming the classes with fewer than ``num_shots`` images (they train on all they have)."""
    counts: dict[int, int] = defaultdict(int)
    for item in items:
        counts[item.label] += 1
    short = [f"{lab2cname.get(label, label)} ({n})" for label, n in sorted(counts.items()) if n < num_shots]
    if short:
        shown = ", ".join(short[:10]) + (f", ... ({len(short) - 10} more)" if len(short) > 10 else "")
        print(f"warning: DATASET.NUM_SHOTS is {num_shots}, but {len(short)} of {len(counts)} classes have fewer "
              f"train images in {split_file}; they use every image they have: {shown}")


def check_all_classes(items: Sequence[Datum], lab2cname: dict[int, str], split: str, source: str) -> None:
    """Raise ValueError naming the first class without any image in ``items``."""
    present = {item.label for item in items}
    for label, classname in lab2cname.items():
        if label not in present:
            raise InvalidInputError(f"Class {classname!r} (label {label}) has no image in the few-shot {split} set "
                                    f"({source}); delete that file to sample again, or check the split file")


def _decode(entries: list, data: SplitData, cache: str) -> list[Datum]:
    items = []
    for entry in entries:
        relpath, label, classname = entry
        if data.lab2cname.get(int(label)) != classname:
            raise InvalidInputError(f"Few-shot file {cache} does not match {data.split_file} (label {label} is "
                                    f"{classname!r} there); delete it to sample again")
        items.append(make_datum(os.path.join(data.dataset_dir, relpath), int(label), classname, cache, data.name))
    return items


def fewshot_splits(data: SplitData, num_shots: int, seed: int) -> tuple[list[Datum], list[Datum] | None]:
    """K-shot train and ``min(K, 4)``-shot val of ``data``, read from or written to the JSON cache.

    ``num_shots < 1`` returns the full splits. Every class must keep at least one image in each split.
    """
    if num_shots < 1:
        return data.train, data.val
    warn_short_classes(data.train, data.lab2cname, num_shots, data.split_file)
    cache = fewshot_path(data.dataset_dir, num_shots, seed)
    if os.path.isfile(cache):
        print(f"Loading few-shot data from {cache}")
        content = read_json(cache)
        if not isinstance(content, dict) or "train" not in content:
            raise InvalidInputError(f"Few-shot file {cache} must hold a JSON object with a 'train' list; delete it")
        train = _decode(content["train"], data, cache)
        val = _decode(content.get("val") or [], data, cache) if data.val is not None else None
        source = cache
    else:
        rng = random.Random(seed)
        train = sample_per_class(data.train, num_shots, rng)
        val = sample_per_class(data.val, min(num_shots, VAL_SHOTS_CAP), rng) if data.val is not None else None
        write_json({"train": encode_items(train, data.dataset_dir),
                    "val": encode_items(val or [], data.dataset_dir)}, cache)
        print(f"Saved {num_shots}-shot data (seed {seed}) to {cache}")
        source = f"sampled from {data.split_file}"
    check_all_classes(train, data.lab2cname, "train", source)
    if val is not None:
        check_all_classes(val, data.lab2cname, "val", source)
    return train, val
