"""The demo's cross-dataset and domain-generalisation datasets: the table, the readers, the shifted styles and the
per-folder regeneration of ``demo.shapes.generate``."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import yaml
from PIL import Image
from scipy import ndimage

from datasets.catalog import register_datasets
from datasets.demo_specs import DEMO_DATASETS
from demo import shapes
from engine import DATASET_REGISTRY
from engine.dataset_base import build_dataset
from tests.helpers_datasets import make_cfg

register_datasets()

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = shapes.GenParams(train_per_class=1, val_per_class=1, test_per_class=1, seed=5, xd_train_per_class=3,
                        xd_val_per_class=2, xd_test_per_class=2)
SHAPES = ["circle", "square", "triangle", "star", "cross", "heart"]
WARM = [f"{c} {s}" for c in ("red", "orange", "yellow", "green") for s in SHAPES]
EXPECTED_CLASSES = {
    "DemoNet": WARM,
    "DemoCool": [f"{c} {s}" for c in ("blue", "purple") for s in SHAPES],
    "DemoSoft": [f"{c} {s}" for c in ("pink", "brown") for s in SHAPES],
    "DemoFancy": [f"{c} {s}" for c in ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown")
                  for s in ("star", "cross", "heart")],
    **{name: WARM for name in ("DemoNetV2", "DemoNetSketch", "DemoNetA", "DemoNetR")},
}
"""Classes in label order, written out by hand (canonical order: colour-major, then shape)."""
FOLDERS = {"DemoNet": "demonet", "DemoCool": "democool", "DemoSoft": "demosoft", "DemoFancy": "demofancy",
           "DemoNetV2": "demonetv2", "DemoNetSketch": "demonet_sketch", "DemoNetA": "demonet_a",
           "DemoNetR": "demonet_r"}
TEST_ONLY = {"DemoNetV2", "DemoNetSketch", "DemoNetA", "DemoNetR"}


@pytest.fixture(scope="module")
def tiny_tree(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("demo_xd")
    shapes.generate(str(root), TINY, verbose=False)
    return str(root)


def test_table_registers_every_dataset_with_a_config():
    assert {n: s.folder for n, s in DEMO_DATASETS.items() if n in FOLDERS} == FOLDERS
    assert len(set(FOLDERS.values()) | {"demo_shapes", "demo_shapes_hard"}) == len(DEMO_DATASETS)
    for name, spec in DEMO_DATASETS.items():
        assert DATASET_REGISTRY.get(name).dataset_dir == spec.folder
        with open(os.path.join(REPO, "configs", "datasets", f"{spec.folder}.yaml")) as f:
            assert yaml.safe_load(f)["DATASET"]["NAME"] == name
        assert set(spec.colours) <= set(shapes.COLOURS) and set(spec.shapes) <= set(SHAPES)
    for name, classes in EXPECTED_CLASSES.items():
        assert [shapes.CLASSNAMES[k] for k in shapes.dataset_classes(name)] == classes
    assert len(set(EXPECTED_CLASSES["DemoFancy"]) & set(WARM)) == 12  # half of DemoFancy are source classes
    # datasets sharing a seed stream share their images, so they must draw the same classes alike
    streams = {}
    for name, spec in DEMO_DATASETS.items():
        streams.setdefault(spec.stream, []).append(name)
    assert streams[0] == ["DemoShapes", "DemoShapesHard"] and all(len(v) == 1 for k, v in streams.items() if k)


@pytest.mark.parametrize("name", sorted(EXPECTED_CLASSES))
def test_reader_of_each_transfer_dataset(tiny_tree, name):
    data = DATASET_REGISTRY.get(name).read_root(tiny_tree)
    classes = EXPECTED_CLASSES[name]
    assert data.lab2cname == dict(enumerate(classes))
    assert data.test_only == (name in TEST_ONLY)
    assert len(data.test) == 2 * len(classes)
    if name in TEST_ONLY:  # as the ImageNet variants: train is the test data, no val
        assert data.val is None and [d.impath for d in data.train] == [d.impath for d in data.test]
    else:
        assert len(data.train) == 3 * len(classes) and len(data.val) == 2 * len(classes)
    for item in data.train + data.test + (data.val or []):
        assert os.path.isfile(item.impath) and item.classname == classes[item.label]
        assert os.path.basename(os.path.dirname(item.impath)) == item.classname.replace(" ", "_")
    assert os.path.dirname(os.path.dirname(data.test[0].impath)) == os.path.join(tiny_tree, FOLDERS[name], "images")


def test_test_only_target_in_the_standard_and_dg_roles(tiny_tree):
    coop = build_dataset(make_cfg(tiny_tree, "DemoNetSketch"))
    assert len(coop.train_x) == len(coop.test) == 48 and coop.val is None
    petr = build_dataset(make_cfg(tiny_tree, "DemoNetA", "PETR", **{"TRAINER.MODAL": "dg",
                                                                     "DATASET.SOURCE_DATASET": "DemoNet"}),
                         "seen_unseen")
    assert len(petr.train_x) == 3 * 24 and {d.classname for d in petr.train_x} == set(WARM)
    assert len(petr.train_u) == 48 and all(d.classname == "" for d in petr.train_u)


def test_written_pixels_match_render_split_and_v2_is_a_fresh_draw(tiny_tree):
    net, labels = shapes.render_split("test", TINY, dataset="DemoNet")
    v2, v2_labels = shapes.render_split("test", TINY, dataset="DemoNetV2")
    assert np.array_equal(labels, v2_labels)
    assert all(not np.array_equal(a, b) for a, b in zip(net, v2))
    with open(os.path.join(tiny_tree, "demonetv2", "split_zhou_DemoNetV2.json")) as f:
        split = json.load(f)
    assert split["train"] == [] and split["val"] == []
    for i, (relpath, label, classname) in enumerate(split["test"]):
        png = np.asarray(Image.open(os.path.join(tiny_tree, "demonetv2", "images", relpath)).convert("RGB"))
        assert np.array_equal(png, v2[i]) and shapes.CLASSNAMES[v2_labels[i]] == classname == WARM[label]


def _plain(style):
    return dataclasses.replace(style, noise_std=(0.0, 0.0))


def test_sketch_draws_outlines_without_fill():
    solid = dataclasses.replace(shapes.SKETCH, fill="solid")
    checked = 0
    for seed in range(24):
        k = shapes.dataset_classes("DemoNet")[seed]
        mask = shapes._shape_mask(np.random.default_rng(seed), shapes.SHAPES[k % 6], 32, solid)
        image = shapes.render(np.random.default_rng(seed), [k], 32, _plain(shapes.SKETCH))[0].astype(float)
        background = np.median(image[mask == 0], axis=0)
        interior = ndimage.binary_erosion(mask > 0.99, iterations=3)
        edge = (mask > 0.5) & ~ndimage.binary_erosion(mask > 0.5, iterations=1)
        assert np.abs(image[edge] - background).max() > 60  # the stroke is there
        if interior.any():
            assert np.abs(image[interior] - background).max() < 12, seed  # the inside is paper
            checked += 1
    assert checked >= 20


def _interior_contrast(style, seeds) -> float:
    """Median over images of the luminance std inside the shape (3 px in from its edge), noise switched off."""
    stds = []
    for seed in seeds:
        k = shapes.dataset_classes("DemoNet")[seed % 24]
        mask = shapes._shape_mask(np.random.default_rng(seed), shapes.SHAPES[k % 6], 32, style)
        image = shapes.render(np.random.default_rng(seed), [k], 32, _plain(style))[0].astype(float)
        interior = ndimage.binary_erosion(mask > 0.99, iterations=2)
        if interior.sum() >= 8:
            stds.append(image[interior].mean(axis=-1).std())
    return float(np.median(stds))


def test_texture_stripes_the_shape_and_relit_is_colder():
    assert _interior_contrast(shapes.TEXTURE, range(48)) > 15 > 5 > _interior_contrast(shapes.DOWNSTREAM, range(48))
    labels = np.repeat(shapes.dataset_classes("DemoNet"), 4)
    ratio = {}
    for name, style in (("relit", shapes.RELIT), ("downstream", shapes.DOWNSTREAM)):
        images = shapes.render(np.random.default_rng(3), labels, 32, style).astype(float)
        ratio[name] = np.mean(images[..., 2].mean(axis=(1, 2)) / images[..., 0].mean(axis=(1, 2)))
    assert ratio["relit"] > 1.5 * ratio["downstream"]


def test_style_fields_stay_those_the_cached_tiny_clips_are_named_by():
    assert [f.name for f in dataclasses.fields(shapes.Style)] == [
        "stripe_prob", "gradient_prob", "noise_std", "radius", "stretch", "brightness", "colour_jitter", "rotation",
        "offset", "lighting", "relight"]
    assert shapes.PRETRAIN == shapes.Style(0.15, 0.6, (2.0, 10.0), (0.3, 0.45), 0.08, (0.85, 1.1), 10.0, 20.0, 0.5)


def _mtimes(root) -> dict[str, int]:
    """Dataset name -> modification time of the first image of its first class."""
    first = {name: shapes.CLASSNAMES[shapes.dataset_classes(name)[0]].replace(" ", "_") for name in DEMO_DATASETS}
    return {name: os.stat(os.path.join(root, spec.folder, "images", first[name], "00000.png")).st_mtime_ns
            for name, spec in DEMO_DATASETS.items()}


def test_generate_rewrites_only_the_folders_whose_parameters_changed(tmp_path, capsys):
    root = str(tmp_path)
    shapes.generate(root, TINY, verbose=False)
    before = _mtimes(root)
    shapes.generate(root, TINY)
    assert "already generated" in capsys.readouterr().out
    os.remove(os.path.join(root, "demonet_a", "manifest.json"))  # as an interrupted write: manifests come last
    shapes.generate(root, TINY, verbose=False)
    after = _mtimes(root)
    assert [n for n in after if after[n] != before[n]] == ["DemoNetA"]
    more = dataclasses.replace(TINY, xd_test_per_class=3)
    shapes.generate(root, more, verbose=False)
    again = _mtimes(root)
    assert {n for n in again if again[n] != after[n]} == set(EXPECTED_CLASSES)  # b2n trees kept
    assert len(DATASET_REGISTRY.get("DemoNetR").read_root(root).test) == 3 * 24
    with open(os.path.join(root, "demo_shapes", "manifest.json")) as f:
        assert json.load(f)["params_hash"] == more.tree_digest("DemoShapes") == TINY.tree_digest("DemoShapes")
