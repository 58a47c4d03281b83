"""Few-shot sampling with a portable JSON cache: ``<dataset_dir>/split_fewshot/shot_{K}-seed_{SEED}.json``.

The cache holds ``{"digest": ..., "train": [[relpath, label, classname], ...], "val": [...]}`` with paths relative to
the dataset folder, so moving the data root keeps it valid. ``digest`` hashes everything the sample depends on (K,
the seed, the val cap and the train/val lists it was drawn from); a file whose digest differs from the current split
is refused, never used or overwritten. A file of an earlier version (no digest) is used, with a note, when its
images lie in the splits they stand for; every file is checked for that. Sampling uses a local
``random.Random(seed)``: the same seed gives the same shots whatever ran before. Train gets K images per class, val
``min(K, 4)`` (CoOp's rule).

``DATASET.FEWSHOT_DIR`` moves the files to ``<FEWSHOT_DIR>/<dataset folder>/``; without it, a read-only dataset
folder (a shared mount) falls back to ``<OUTPUT_DIR>/split_fewshot/<dataset folder>/``, with a note.
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import hashlib
import os
import random
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

from engine.dataset_base import Datum
from engine.errors import ConfigError, InvalidInputError
from engine.inputs import declare_cache, read_input_json, record_input
from engine.utils import write_json

from .files import FEWSHOT_FOLDER, fewshot_path
from .split_files import checked_entry
from .splits import SplitData, encode_items, make_datum, relative_paths, shown

VAL_SHOTS_CAP = 4
"""CoOp samples ``min(K, 4)`` validation images per class."""
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)


_COMPARING = contextvars.ContextVar("fewshot_comparing", default=False)


@contextlib.contextmanager
def comparing() -> Iterator[None]:
    """Inside: no few-shot file is written, and one that does not fit the current split (sampled from another one) is
    passed over instead of refused; the sample is drawn in memory from the current split. A finished run's data is
    compared with what a rerun would train on this way (a changed split is a data difference, not unreadable data),
    before anything is written."""
    token = _COMPARING.set(True)
    try:
        yield
    finally:
        _COMPARING.reset(token)


def sample_digest(data: SplitData, num_shots: int, seed: int) -> str:
    """SHA-256 of what a few-shot sample depends on: K, the seed, the val cap and the train and val lists (relative
    path, label and class name of each item, in order)."""
    digest = hashlib.sha256(f"shots={num_shots} seed={seed} val_cap={VAL_SHOTS_CAP}\n".encode())
    for split, items in (("train", data.train), ("val", data.val or [])):
        digest.update(f"[{split}]\n".encode())
        for rel, item in zip(relative_paths(items, data.dataset_dir), items):
            digest.update(f"{rel}\t{item.label}\t{item.classname}\n".encode())
    return digest.hexdigest()


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
        shown_classes = ", ".join(short[:10]) + (f", ... ({len(short) - 10} more)" if len(short) > 10 else "")
        print(f"warning: DATASET.NUM_SHOTS is {num_shots}, but {len(short)} of {len(counts)} classes have fewer "
              f"train images in {split_file}; they use every image they have: {shown_classes}")


def check_all_classes(items: Sequence[Datum], lab2cname: dict[int, str], split: str, source: str) -> None:
    """Raise ValueError naming the first class without any image in ``items``."""
    present = {item.label for item in items}
    for label, classname in lab2cname.items():
        if label not in present:
            raise InvalidInputError(f"Class {classname!r} (label {label}) has no image in the few-shot {split} set "
                                    f"({source}); delete that file to sample again, or check the split file")


def _decode(entries: object, split: str, data: SplitData, cache: str) -> list[Datum]:
    """The ``split`` entries of the few-shot file ``cache`` as records of ``data``'s images (each entry checked:
    ``datasets.split_files.checked_entry``)."""
    fix = "delete it to sample again"
    if not isinstance(entries, list):
        raise InvalidInputError(f"Few-shot file {cache}: its {split} entries are no list; {fix}")
    items = []
    for entry in entries:
        relpath, label, classname = checked_entry(entry, f"Few-shot file {cache}", split, fix)
        if data.lab2cname.get(label) != classname:
            raise InvalidInputError(f"Few-shot file {cache} does not match {data.split_file} (label {label} is "
                                    f"{classname!r} there); {fix}")
        items.append(make_datum(os.path.join(data.dataset_dir, relpath), label, classname, cache, data.name))
    return items


def _check_within(items: list[Datum], split: str, pool: Sequence[Datum] | None, cache: str, data: SplitData) -> None:
    """Every few-shot ``split`` item is a distinct image of that split of ``data`` (never a test image)."""
    paths = [item.impath for item in items]
    twice = sorted(p for p, n in Counter(paths).items() if n > 1)
    if twice:
        raise InvalidInputError(f"Few-shot file {cache} lists {shown(twice, data.dataset_dir)} more than once in "
                                f"{split}; delete it to sample again")
    outside = sorted(set(paths) - {item.impath for item in pool or ()})
    if outside:
        where = "test" if set(outside) & {item.impath for item in data.test} else "no"
        raise InvalidInputError(f"Few-shot file {cache} lists {shown(outside, data.dataset_dir)} in {split}, which "
                                f"{data.split_file} has in its {where} split; move the file away to sample again")


def _read_cache(cache: str, data: SplitData, digest: str) -> tuple[list[Datum], list[Datum] | None]:
    print(f"Loading few-shot data from {cache}")
    content = read_input_json(cache, "fewshot")
    if not isinstance(content, dict) or not isinstance(content.get("train"), list):
        raise InvalidInputError(f"Few-shot file {cache} must hold a JSON object with a 'train' list; delete it")
    found = content.get("digest")
    if found is not None and found != digest:
        raise InvalidInputError(f"Few-shot file {cache} was sampled from other data than {data.split_file} holds now "
                                f"(digest {str(found)[:12]}, now {digest[:12]}); move it away (nothing was deleted) "
                                "to sample again from the current split, or restore the split it came from")
    train = _decode(content["train"], "train", data, cache)
    _check_within(train, "train", data.train, cache, data)
    val = None
    if data.val is not None:
        val = _decode(content.get("val") or [], "val", data, cache)
        _check_within(val, "val", data.val, cache, data)
    if found is None:
        print(f"Note: few-shot file {cache} records no digest of its split (an earlier version wrote it); its images "
              "all lie in the current train and val splits, so it is used; move it away to sample again")
    return train, val


def _write_cache(content: dict, data: SplitData, num_shots: int, seed: int, folder: str, fallback: str) -> str:
    """Write the few-shot file into ``folder``; where that is read-only, into ``fallback`` (with a note)."""
    cache = fewshot_path(data.dataset_dir, num_shots, seed, folder)
    declare_cache(os.path.dirname(cache), "few-shot samples")
    try:
        write_json(content, cache)
        return cache
    except OSError as e:
        if e.errno not in _READ_ONLY:
            raise
        if not fallback:
            raise ConfigError(f"Cannot write the few-shot file {cache} ({e.strerror}); set DATASET.FEWSHOT_DIR to "
                              "a writable folder") from None
    written = fewshot_path(data.dataset_dir, num_shots, seed, fallback)
    declare_cache(os.path.dirname(written), "few-shot samples")
    write_json(content, written)
    print(f"Note: {os.path.dirname(cache)} is read-only; wrote the few-shot file to {written} instead (set "
          "DATASET.FEWSHOT_DIR to share one folder across runs)")
    return written


def fewshot_folders(data: SplitData, fewshot_dir: str = "", output_dir: str = "") -> tuple[str, str]:
    """The folder of ``data``'s few-shot files and the fallback where it is read-only ("" for none):
    ``<fewshot_dir>/<dataset folder>`` (no fallback) when set, else ``<dataset_dir>/split_fewshot`` and
    ``<output_dir>/split_fewshot/<dataset folder>``."""
    name = os.path.basename(os.path.normpath(data.dataset_dir))
    if fewshot_dir:
        return os.path.join(os.path.abspath(fewshot_dir), name), ""
    fallback = os.path.join(os.path.abspath(output_dir), FEWSHOT_FOLDER, name) if output_dir else ""
    return os.path.join(data.dataset_dir, FEWSHOT_FOLDER), fallback


def fewshot_splits(data: SplitData, num_shots: int, seed: int, fewshot_dir: str = "", output_dir: str = ""
                   ) -> tuple[list[Datum], list[Datum] | None]:
    """K-shot train and ``min(K, 4)``-shot val of ``data``, read from or written to the JSON cache (its folders:
    ``fewshot_folders``).

    ``num_shots < 1`` returns the full splits. Every class must keep at least one image in each split.
    """
    if num_shots < 1:
        return data.train, data.val
    warn_short_classes(data.train, data.lab2cname, num_shots, data.split_file)
    folder, fallback = fewshot_folders(data, fewshot_dir, output_dir)
    digest = sample_digest(data, num_shots, seed)
    found = [path for path in (fewshot_path(data.dataset_dir, num_shots, seed, f) for f in (folder, fallback) if f)
             if os.path.isfile(path)]
    train = val = None
    if found:
        try:
            train, val = _read_cache(found[0], data, digest)
            source = found[0]
        except InvalidInputError:  # stale, or listing images outside the split (an earlier version's file)
            if not _COMPARING.get():
                raise
    if train is None:  # none, or one that does not fit the split while comparing: the sample a rerun would draw
        rng = random.Random(seed)
        train = sample_per_class(data.train, num_shots, rng)
        val = sample_per_class(data.val, min(num_shots, VAL_SHOTS_CAP), rng) if data.val is not None else None
        source = f"sampled from {data.split_file}"
        if not _COMPARING.get():
            content = {"digest": digest, "train": encode_items(train, data.dataset_dir),
                       "val": encode_items(val or [], data.dataset_dir)}
            cache = _write_cache(content, data, num_shots, seed, folder, fallback)
            record_input(cache, "fewshot")
            print(f"Saved {num_shots}-shot data (seed {seed}) to {cache}")
    check_all_classes(train, data.lab2cname, "train", source)
    if val is not None:
        check_all_classes(val, data.lab2cname, "val", source)
    return train, val
