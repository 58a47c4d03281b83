"""Procedurally drawn coloured shapes: the classes, the image renderer and the CoOp-layout dataset writer.

48 classes ("red circle", ...) = 8 colours x 6 shapes. Images are rendered from seeded NumPy generators, so the
same parameters always give the same pixels. Two visual styles exist: ``PRETRAIN`` (the tiny CLIPs' pretraining
stream: large shapes, small rotations, mostly gradient backgrounds, neutral light) and ``DOWNSTREAM`` (the dataset
users train and test on: somewhat smaller, more rotated and more displaced shapes, mostly striped noisy
backgrounds, a dim warm light). The shift lowers zero-shot accuracy; the lighting part is one a classifier on the
frozen features can undo, the geometry part needs the image encoder to adapt (visual prompts).

Two base/novel splits hold the same images and differ only in label order (CoOp: base = first ceil(n/2) labels):
``DemoShapes`` is a checkerboard over colour x shape (every colour and every shape has base and novel classes),
``DemoShapesHard`` puts every shape of four colours (red, orange, yellow, green) in base and those of the other four
in novel, so novel classes hold colours that base training never shows (the pretrained CLIP knows all of them).
A third order, novel shapes (circle, square, triangle in base), was tried for the demo and dropped: the tiny CLIPs
recognise shape too poorly for any router to tell a novel shape from a base one (AUROC 80%, docs/demo.md).

Cross-dataset transfer and domain generalisation have their own datasets (``datasets.demo_specs.DEMO_DATASETS``):
the source ``DemoNet`` (24 classes: every shape in red, orange, yellow, green), cross-dataset targets with other
classes (``DemoCool``, ``DemoSoft``, ``DemoFancy``) and test-only shifted renderings of the source's classes, the toy
ImageNet-V2/-Sketch/-A/-R: a fresh draw (``DemoNetV2``), outline drawings (``SKETCH``), striped shapes on busy
backgrounds (``TEXTURE``) and a cold, varying light (``RELIT``).

Command line: ``python -m demo.shapes --data DATA`` writes one folder per dataset under ``DATA`` (``demo_shapes/``,
``demo_shapes_hard/``, ``demonet/``, ...; each skipped when already written with the same parameters).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import math
import os
import shutil
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from PIL import Image, ImageDraw
from tqdm import tqdm

from datasets.demo_specs import DATASET_DIRS, DEMO_DATASETS, IMAGE_DIR, DemoDataset, split_file
from engine.utils import mkdir_if_missing, read_json, write_json

GENERATOR_VERSION = 2
MANIFEST = "manifest.json"

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "orange": (245, 135, 20),
    "yellow": (240, 220, 40),
    "green": (40, 160, 60),
    "blue": (35, 80, 215),
    "purple": (130, 50, 180),
    "pink": (250, 130, 200),
    "brown": (120, 72, 30),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "heart")
CLASSNAMES: list[str] = [f"{c} {s}" for c in COLOURS for s in SHAPES]
"""Class names in canonical order (colour-major); a canonical label indexes this list."""

SPLIT_NAMES: dict[str, str] = {"DemoShapes": "checkerboard", "DemoShapesHard": "novel_colours"}
"""Registered dataset name -> the label order it uses."""

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

_SPLIT_IDS = {"train": 0, "val": 1, "test": 2}
_SUPERSAMPLE = 4


def label_order(dataset_name: str) -> list[int]:
    """Canonical class indices in the label order of ``dataset_name``; the first ceil(48/2) are the base classes."""
    n_shapes = len(SHAPES)
    canonical = range(len(CLASSNAMES))
    if SPLIT_NAMES.get(dataset_name) == "checkerboard":
        is_base = [(k // n_shapes + k % n_shapes) % 2 == 0 for k in canonical]
    elif SPLIT_NAMES.get(dataset_name) == "novel_colours":
        is_base = [k // n_shapes < len(COLOURS) // 2 for k in canonical]
    else:
        raise ValueError(f"unknown demo dataset {dataset_name!r}; expected one of {sorted(SPLIT_NAMES)}")
    return [k for k in canonical if is_base[k]] + [k for k in canonical if not is_base[k]]


@dataclass(frozen=True)
class Style:
    """Random ranges of one rendering style (fractions of the image size where lengths are concerned)."""

    stripe_prob: float
    gradient_prob: float
    noise_std: tuple[float, float]
    radius: tuple[float, float]
    stretch: float
    brightness: tuple[float, float]
    colour_jitter: float
    rotation: float = 180.0
    """Largest rotation in degrees either way (180: any angle)."""
    offset: float = 1.0
    """How far the centre may move from the image centre, as a fraction of the room the shape leaves."""
    lighting: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Per-channel gain of the whole scene (a global lighting / camera colour cast)."""
    relight: float = 0.0
    """Per-image random lighting: each channel's gain is further scaled by U(1 - relight, 1)."""


DOWNSTREAM = Style(stripe_prob=0.5, gradient_prob=0.15, noise_std=(4.0, 18.0), radius=(0.27, 0.44), stretch=0.12,
                   brightness=(0.8, 1.15), colour_jitter=12.0, rotation=30.0, offset=0.6, lighting=(0.8, 0.72, 0.62))
PRETRAIN = Style(stripe_prob=0.15, gradient_prob=0.6, noise_std=(2.0, 10.0), radius=(0.3, 0.45), stretch=0.08,
                 brightness=(0.85, 1.1), colour_jitter=10.0, rotation=20.0, offset=0.5)
PRETRAIN_RELIT = replace(PRETRAIN, relight=0.4)
"""The teacher's pretraining stream: ``PRETRAIN`` under random lighting (more varied data, as larger web-scale CLIPs
are more robust to distribution shift), which makes its zero-shot robust to the downstream lighting."""


@dataclass(frozen=True)
class ShiftedStyle(Style):
    """A style that also changes how the shape and the background are drawn (the domain-generalisation targets).

    A subclass, so that ``Style`` (whose fields name the cached tiny CLIPs' pretraining stream) keeps its fields.
    """

    fill: str = "solid"
    """solid (the class colour), outline (a stroke of the class colour, no fill) or stripes (the class colour and a
    dark tone of it in alternating stripes)."""
    background: str = "grey"
    """grey (``Style``'s grey mixes), light (a plain light grey) or busy (a grid of random colours under stripes)."""
    stroke: float = 0.1
    """Outline width as a fraction of the image size."""


SKETCH = ShiftedStyle(**{**asdict(DOWNSTREAM), "noise_std": (2.0, 6.0), "lighting": (1.0, 1.0, 1.0)},
                      fill="outline", background="light")
"""Outline drawings (ImageNet-Sketch): the shape's boundary in its colour on a plain light background, mild noise."""
TEXTURE = ShiftedStyle(**{**asdict(DOWNSTREAM), "radius": (0.22, 0.34), "noise_std": (10.0, 30.0)},
                       fill="stripes", background="busy")
"""Heavy texture (ImageNet-A): smaller shapes in high-contrast stripes on busy multicoloured backgrounds, more noise."""
RELIT = replace(DOWNSTREAM, lighting=(0.65, 0.8, 1.0), relight=0.3)
"""Other lighting (ImageNet-R): the downstream geometry under a cold cast and a random per-image relighting."""
STYLES: dict[str, Style] = {"downstream": DOWNSTREAM, "sketch": SKETCH, "texture": TEXTURE, "relit": RELIT}
"""Style name (``DemoDataset.style``) -> style."""


def _regular(n: int, radius: float, start: float = math.pi / 2) -> np.ndarray:
    angles = start + 2 * math.pi * np.arange(n) / n
    return radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)


def _star() -> np.ndarray:
    radii = np.where(np.arange(10) % 2 == 0, 1.25, 0.5)
    angles = math.pi / 2 + 2 * math.pi * np.arange(10) / 10
    return radii[:, None] * np.stack([np.cos(angles), np.sin(angles)], axis=1)


def _cross() -> np.ndarray:
    a, b = 1.05, 0.36
    return np.array([(b, a), (b, b), (a, b), (a, -b), (b, -b), (b, -a),
                     (-b, -a), (-b, -b), (-a, -b), (-a, b), (-b, b), (-b, a)], dtype=float)


def _heart() -> np.ndarray:
    t = np.linspace(0, 2 * math.pi, 48, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
    pts = np.stack([x, y + 2.5], axis=1)
    return 1.2 * pts / np.abs(pts).max()


_OUTLINES: dict[str, np.ndarray] = {
    "circle": _regular(48, 1.0),
    "square": _regular(4, 1.2, start=math.pi / 4),
    "triangle": _regular(3, 1.3),
    "star": _star(),
    "cross": _cross(),
    "heart": _heart(),
}
"""Unit-size outlines (x right, y up) of similar area, so size does not give the shape away."""


def _fill(style: Style) -> str:
    return style.fill if isinstance(style, ShiftedStyle) else "solid"


def _shape_mask(rng: np.random.Generator, shape: str, size: int, style: Style) -> np.ndarray:
    """Anti-aliased [size, size] coverage in [0, 1] of one randomly placed, rotated and stretched shape."""
    radius = rng.uniform(*style.radius) * size
    stretch = 1.0 + rng.uniform(-style.stretch, style.stretch)
    theta = math.radians(rng.uniform(-style.rotation, style.rotation))
    room = max(0.0, size / 2 - 1.1 * radius)
    cx, cy = size / 2 + rng.uniform(-1, 1, size=2) * room * style.offset
    pts = _OUTLINES[shape] * np.array([stretch, 1.0 / stretch])
    rot = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]])
    pts = pts @ rot.T * radius
    big = size * _SUPERSAMPLE
    xy = (np.stack([cx + pts[:, 0], cy - pts[:, 1]], axis=1) * _SUPERSAMPLE).ravel().tolist()
    canvas = Image.new("L", (big, big), 0)
    if _fill(style) == "outline":
        width = max(1, round(style.stroke * big))
        ImageDraw.Draw(canvas).line(xy + xy[:2], fill=255, width=width, joint="curve")
    else:
        ImageDraw.Draw(canvas).polygon(xy, fill=255)
    return np.asarray(canvas.resize((size, size), Image.Resampling.BOX), dtype=np.float32) / 255.0


def _projection(phi: np.ndarray, size: int) -> np.ndarray:
    """[n, size, size] pixel coordinates projected on the direction of angle ``phi`` (one angle per image)."""
    coords = np.arange(size, dtype=np.float32)
    cos, sin = np.cos(phi).astype(np.float32), np.sin(phi).astype(np.float32)
    return cos[:, None, None] * coords[None, None, :] + sin[:, None, None] * coords[None, :, None]


def _stripes(proj: np.ndarray, period: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """[n, size, size] 0/1 stripes along ``proj`` with one period (pixels) and phase (fraction) per image."""
    return ((proj / period[:, None, None] + phase[:, None, None]) % 1.0 < 0.5).astype(np.float32)


def _random_stripes(rng: np.random.Generator, n: int, size: int, period: tuple[float, float]) -> np.ndarray:
    """[n, size, size] 0/1 stripes of random direction, period (pixels, in ``period``) and phase."""
    phi = rng.uniform(0, math.pi, size=n)
    return _stripes(_projection(phi, size), rng.uniform(*period, size=n), rng.uniform(0, 1, size=n))


def _light_backgrounds(rng: np.random.Generator, n: int, size: int, style: Style) -> np.ndarray:
    """[n, size, size, 3] plain light grey backgrounds with a faint tint (paper under a sketch)."""
    tone = rng.uniform(200, 240, size=(n, 1, 1, 1)) + rng.normal(0, 4, size=(n, 1, 1, 3))
    return np.broadcast_to(tone.astype(np.float32), (n, size, size, 3)).copy()


def _busy_backgrounds(rng: np.random.Generator, n: int, size: int, style: Style, cells: int = 4) -> np.ndarray:
    """[n, size, size, 3] busy backgrounds: a ``cells`` x ``cells`` grid of random colours, shaded by stripes."""
    grid = rng.uniform(20, 235, size=(n, cells, cells, 3)).astype(np.float32)
    index = np.arange(size) * cells // size
    shade = 0.55 + 0.45 * _random_stripes(rng, n, size, (2.5, 6.0))
    return grid[:, index][:, :, index] * shade[..., None]


def _backgrounds(rng: np.random.Generator, n: int, size: int, style: Style) -> np.ndarray:
    """[n, size, size, 3] float backgrounds: two low-saturation greys mixed flat, as a gradient or as stripes."""
    grey = rng.uniform(70, 190, size=(n, 2, 1))
    tint = rng.normal(0, 10, size=(n, 2, 3))
    tones = grey + tint
    kind = rng.uniform(size=n)
    phi = rng.uniform(0, math.pi, size=n)
    period = rng.uniform(3.0, 8.0, size=n)
    phase = rng.uniform(0, 1, size=n)
    proj = _projection(phi, size)
    stripes = _stripes(proj, period, phase)
    ramp = (proj - proj.min(axis=(1, 2), keepdims=True)) / np.ptp(proj, axis=(1, 2), keepdims=True)
    flat = np.zeros_like(proj)
    mix = np.where((kind < style.stripe_prob)[:, None, None], stripes,
                   np.where((kind < style.stripe_prob + style.gradient_prob)[:, None, None], ramp, flat))
    tones = tones.astype(np.float32)
    return tones[:, None, None, 0] * (1 - mix[..., None]) + tones[:, None, None, 1] * mix[..., None]


_BACKGROUNDS = {"grey": _backgrounds, "light": _light_backgrounds, "busy": _busy_backgrounds}
DARK_TONE = 0.4
"""Brightness of the dark stripes of a striped shape, relative to its colour."""


def render(rng: np.random.Generator, labels: list[int] | np.ndarray, size: int = 32,
           style: Style = DOWNSTREAM) -> np.ndarray:
    """Draw one image per canonical label; returns uint8 [N, size, size, 3]. Consumes ``rng`` deterministically."""
    n = len(labels)
    masks = np.stack([_shape_mask(rng, SHAPES[int(k) % len(SHAPES)], size, style) for k in labels])
    base = np.array([COLOURS[CLASSNAMES[int(k)].split()[0]] for k in labels], dtype=np.float64)
    colour = base * rng.uniform(*style.brightness, size=(n, 1)) + rng.normal(0, style.colour_jitter, size=(n, 3))
    images = _BACKGROUNDS[style.background if isinstance(style, ShiftedStyle) else "grey"](rng, n, size, style)
    colour = colour.astype(np.float32)[:, None, None, :]
    if _fill(style) == "stripes":  # the class colour alternating with a dark tone of it
        stripes = _random_stripes(rng, n, size, (2.5, 5.0))[..., None]
        colour = colour * (stripes + DARK_TONE * (1 - stripes))
    images = images * (1 - masks[..., None]) + colour * masks[..., None]
    images *= np.asarray(style.lighting, dtype=np.float32)
    if style.relight:
        images *= rng.uniform(1 - style.relight, 1, size=(n, 1, 1, 3)).astype(np.float32)
    noise_std = rng.uniform(*style.noise_std, size=(n, 1, 1, 1)).astype(np.float32)
    images += rng.standard_normal(size=images.shape, dtype=np.float32) * noise_std
    return np.clip(np.rint(images), 0, 255).astype(np.uint8)


def sample_batch(rng: np.random.Generator, batch_size: int, size: int = 32,
                 style: Style = PRETRAIN) -> tuple[np.ndarray, np.ndarray]:
    """A fresh batch of uniformly drawn classes: (uint8 images [B, size, size, 3], canonical labels [B])."""
    labels = rng.integers(0, len(CLASSNAMES), size=batch_size)
    return render(rng, labels, size, style), labels


@dataclass(frozen=True)
class GenParams:
    """Everything the written datasets depend on; per dataset, the digest of the fields it uses (``tree_digest``)
    decides whether its written tree can be reused."""

    train_per_class: int = 200
    val_per_class: int = 20
    test_per_class: int = 50
    size: int = 32
    seed: int = 0
    version: int = GENERATOR_VERSION
    xd_train_per_class: int = 32
    """Train images per class of the cross-dataset / DG datasets (DemoNet, DemoCool, ...; DG targets have none)."""
    xd_val_per_class: int = 10
    xd_test_per_class: int = 50

    def digest(self) -> str:
        """Digest of every field."""
        return _digest(asdict(self))

    def counts(self, spec: DemoDataset) -> dict[str, int]:
        """Images per class of each split of the dataset described by ``spec``."""
        if spec.kind == "b2n":
            return {"train": self.train_per_class, "val": self.val_per_class, "test": self.test_per_class}
        if spec.test_only:
            return {"test": self.xd_test_per_class}
        return {"train": self.xd_train_per_class, "val": self.xd_val_per_class, "test": self.xd_test_per_class}

    def tree_digest(self, name: str) -> str:
        """Digest of what the tree of demo dataset ``name`` depends on. The base-to-novel trees hash the fields they
        have always used (so trees written before the cross-dataset sets existed stay valid)."""
        spec = DEMO_DATASETS[name]
        shared = {"size": self.size, "seed": self.seed, "version": self.version}
        if spec.kind == "b2n":
            return _digest({**shared, **{f"{split}_per_class": n for split, n in self.counts(spec).items()}})
        return _digest({**shared, "counts": self.counts(spec), "spec": asdict(spec),
                        "style": asdict(STYLES[spec.style])})


def _digest(values: dict) -> str:
    return hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:16]


DEFAULT_PARAMS = GenParams()


def dataset_classes(name: str) -> list[int]:
    """Canonical class indices of demo dataset ``name`` in its label order (canonical order but for the b2n ones)."""
    spec = DEMO_DATASETS[name]
    if spec.kind == "b2n":
        return label_order(name)
    return [k for k, classname in enumerate(CLASSNAMES)
            if (not spec.colours or classname.split()[0] in spec.colours)
            and (not spec.shapes or classname.split()[1] in spec.shapes)]


def render_split_class(split: str, k: int, n: int, params: GenParams, spec: DemoDataset = DEMO_DATASETS["DemoShapes"]
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` images of canonical class ``k`` in ``split`` of ``spec``'s stream (seeded by seed, split, class and
    stream; stream 0, the base-to-novel draw, by the first three only) in ``spec``'s style."""
    key = [params.seed, _SPLIT_IDS[split], k] + ([spec.stream] if spec.stream else [])
    return render(np.random.default_rng(key), [k] * n, params.size, STYLES[spec.style]), np.full(n, k)


def render_split(split: str, params: GenParams, per_class: int | None = None, dataset: str = "DemoShapes"
                 ) -> tuple[np.ndarray, np.ndarray]:
    """All classes of one split of demo ``dataset`` in canonical order: (uint8 images, canonical labels).

    Identical to the pixels ``generate`` writes (the first ``per_class`` images of each class), so evaluations
    may skip the PNG files.
    """
    spec = DEMO_DATASETS[dataset]
    n = params.counts(spec)[split]
    parts = [render_split_class(split, k, n, params, spec) for k in sorted(dataset_classes(dataset))]
    keep = n if per_class is None else min(per_class, n)
    return np.concatenate([p[0][:keep] for p in parts]), np.concatenate([p[1][:keep] for p in parts])


def to_model_input(images: np.ndarray) -> torch.Tensor:
    """uint8 [B, H, W, 3] -> float [B, 3, H, W], scaled to [0, 1] and normalised with CLIP's mean and std."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(CLIP_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CLIP_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def folder_name(classname: str) -> str:
    """Class folder name: spaces become underscores ("red circle" -> "red_circle")."""
    return classname.replace(" ", "_")


def _label_order_name(name: str) -> str:
    return SPLIT_NAMES.get(name, "canonical")


def _is_current(dataset_dir: str, name: str, params: GenParams) -> bool:
    path = os.path.join(dataset_dir, MANIFEST)
    if not (os.path.isfile(path) and os.path.isfile(os.path.join(dataset_dir, split_file(name)))):
        return False
    manifest = read_json(path)
    return manifest.get("params_hash") == params.tree_digest(name) and manifest.get("split") == _label_order_name(name)


def _encode_png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def _num_images(name: str, params: GenParams) -> int:
    return len(dataset_classes(name)) * sum(params.counts(DEMO_DATASETS[name]).values())


def _write_stream(names: list[str], dirs: dict[str, str], params: GenParams, bar: tqdm) -> None:
    """Draw the images of one seed stream once and write them, a split file and (last) a manifest to each folder of
    ``names`` (datasets sharing the stream: same classes, counts and style; only the label order differs)."""
    spec = DEMO_DATASETS[names[0]]
    counts = params.counts(spec)
    offsets = dict(zip(counts, np.cumsum([0, *counts.values()]).tolist()))
    records: dict[str, list[tuple[str, int]]] = {"train": [], "val": [], "test": []}
    content = hashlib.sha256()
    for k in sorted(dataset_classes(names[0])):
        folder = folder_name(CLASSNAMES[k])
        for name in names:
            mkdir_if_missing(os.path.join(dirs[name], IMAGE_DIR, folder))
        for split, n in counts.items():
            images, _ = render_split_class(split, k, n, params, spec)
            for i, img in enumerate(images):
                relpath = f"{folder}/{offsets[split] + i:05d}.png"
                data = _encode_png(img)
                content.update(data)
                for name in names:
                    with open(os.path.join(dirs[name], IMAGE_DIR, relpath), "wb") as f:
                        f.write(data)
                records[split].append((relpath, k))
            bar.update(n)
    for name in names:
        relabel = {canonical: label for label, canonical in enumerate(dataset_classes(name))}
        split_json = {
            split: sorted(([rel, relabel[k], CLASSNAMES[k]] for rel, k in items), key=lambda r: (r[1], r[0]))
            for split, items in records.items()
        }
        write_json(split_json, os.path.join(dirs[name], split_file(name)))
        write_json({"generator_version": GENERATOR_VERSION, "params": asdict(params),
                    "params_hash": params.tree_digest(name), "split": _label_order_name(name),
                    "content_sha256": content.hexdigest(), "num_images": _num_images(name, params)},
                   os.path.join(dirs[name], MANIFEST))


def generate(root: str, params: GenParams = DEFAULT_PARAMS, force: bool = False,
             verbose: bool = True, names: Collection[str] | None = None) -> dict[str, str]:
    """Write one folder per demo dataset under ``root`` (images, split JSON, manifest), or only those of ``names``;
    returns name -> folder.

    A folder whose manifest says it was written with the same parameters is kept (unless ``force``); the others are
    (re)written, each image drawn once even where two folders hold it.
    """
    unknown = sorted(set(names or ()) - set(DATASET_DIRS))
    if unknown:
        raise ValueError(f"unknown demo datasets {unknown}; expected some of {sorted(DATASET_DIRS)}")
    root = os.path.abspath(os.path.expanduser(root))
    dirs = {name: os.path.join(root, folder) for name, folder in DATASET_DIRS.items() if names is None or name in names}
    todo = [name for name, d in dirs.items() if force or not _is_current(d, name, params)]
    if not todo:
        if verbose:
            print(f"Demo datasets already generated in {root} (params {params.digest()}); skipping")
        return dirs
    for name in todo:  # a tree this writer made before (it has a manifest) goes whole, few-shot caches too
        if os.path.isfile(os.path.join(dirs[name], MANIFEST)):
            shutil.rmtree(dirs[name])
    streams: dict[int, list[str]] = {}
    for name in todo:
        streams.setdefault(DEMO_DATASETS[name].stream, []).append(name)
    start_time = time.time()
    total = sum(_num_images(names[0], params) for names in streams.values())
    with tqdm(total=total, desc="Drawing demo images", unit="img", disable=not verbose) as bar:
        for names in streams.values():
            _write_stream(names, dirs, params, bar)
    if verbose:
        print(f"Wrote {total} images with split files to {', '.join(dirs[name] for name in todo)} in "
              f"{time.time() - start_time:.1f} s")
    return dirs


def preview(path: str, size: int = 32, style: Style = DOWNSTREAM, per_class: int = 4, seed: int = 0) -> None:
    """Save a grid with ``per_class`` images of every class (one row per class) to ``path``."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(len(CLASSNAMES)), per_class)
    images = render(rng, labels, size, style)
    grid = images.reshape(len(COLOURS), len(SHAPES), per_class, size, size, 3)
    grid = grid.transpose(0, 3, 1, 2, 4, 5).reshape(len(COLOURS) * size, len(SHAPES) * per_class * size, 3)
    Image.fromarray(grid).save(path)


def main(argv: list[str] | None = None) -> None:
    """Command line of the generator."""
    parser = argparse.ArgumentParser(description="Write the demo dataset of coloured shapes in CoOp's layout.")
    parser.add_argument("--data", "--root", dest="root", required=True,
                        help="the datasets folder (DATA); writes one folder per demo dataset")
    for prefix, which in (("", "base-to-novel datasets"), ("xd_", "cross-dataset / DG datasets (DemoNet, ...)")):
        for split in ("train", "val", "test"):
            key = f"{prefix}{split}_per_class"
            parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=getattr(GenParams, key),
                                help=f"{split} images per class, {which}")
    parser.add_argument("--size", type=int, default=GenParams.size, help="image side in pixels")
    parser.add_argument("--seed", type=int, default=GenParams.seed, help="the seed of every drawing")
    parser.add_argument("--force", action="store_true", help="regenerate even when the manifest matches")
    parser.add_argument("--preview", metavar="PNG", help="also save a grid of samples (rows: colours)")
    parser.add_argument("--preview-style", choices=sorted(STYLES), default="downstream",
                        help="the drawing style of the preview's samples")
    args = parser.parse_args(argv)
    params = GenParams(train_per_class=args.train_per_class, val_per_class=args.val_per_class,
                       test_per_class=args.test_per_class, size=args.size, seed=args.seed,
                       xd_train_per_class=args.xd_train_per_class, xd_val_per_class=args.xd_val_per_class,
                       xd_test_per_class=args.xd_test_per_class)
    generate(args.root, params, force=args.force)
    if args.preview:
        preview(args.preview, args.size, STYLES[args.preview_style])


if __name__ == "__main__":
    main()
