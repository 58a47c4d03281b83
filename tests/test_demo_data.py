"""The demo dataset: class orders of the two base/novel splits, the renderer, the CoOp-layout writer and its reader."""
from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest
from PIL import Image

from datasets.catalog import register_datasets
from demo import shapes
from demo.captions import EVAL_ENSEMBLE, PRETRAIN_TEMPLATES, caption, pretraining_captions
from engine.dataset_base import build_dataset
from tests.helpers_datasets import make_cfg

register_datasets()

TINY = shapes.GenParams(train_per_class=2, val_per_class=1, test_per_class=1, size=32, seed=3, xd_train_per_class=1,
                        xd_val_per_class=1, xd_test_per_class=1)


def _attributes(classnames):
    return [tuple(name.split(" ")) for name in classnames]


def test_checkerboard_split_puts_every_colour_and_shape_in_base_and_novel():
    order = shapes.label_order("DemoShapes")
    assert sorted(order) == list(range(48))
    names = [shapes.CLASSNAMES[k] for k in order]
    base, novel = _attributes(names[:24]), _attributes(names[24:])
    for colour in ["red", "orange", "yellow", "green", "blue", "purple", "pink", "brown"]:
        assert sum(c == colour for c, _ in base) == 3 and sum(c == colour for c, _ in novel) == 3
    for shape in ["circle", "square", "triangle", "star", "cross", "heart"]:
        assert sum(s == shape for _, s in base) == 4 and sum(s == shape for _, s in novel) == 4
    # checkerboard: neighbouring shapes of one colour alternate between base and novel
    assert ("red", "circle") in base and ("red", "square") in novel and ("orange", "circle") in novel


def test_hard_split_holds_novel_colours_back():
    names = [shapes.CLASSNAMES[k] for k in shapes.label_order("DemoShapesHard")]
    base, novel = _attributes(names[:24]), _attributes(names[24:])
    assert {c for c, _ in base} == {"red", "orange", "yellow", "green"}
    assert {c for c, _ in novel} == {"blue", "purple", "pink", "brown"}
    assert sorted(base) == sorted((c, s) for c in ("red", "orange", "yellow", "green") for s in shapes.SHAPES)
    with pytest.raises(ValueError, match="unknown demo dataset 'Nope'"):
        shapes.label_order("Nope")


def _shoelace(pts: np.ndarray) -> float:
    x, y = pts[:, 0], pts[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


@pytest.mark.parametrize("shape", shapes.SHAPES)
def test_shape_coverage_matches_polygon_area(shape):
    style = shapes.Style(0, 0, (0, 0), radius=(0.3, 0.3), stretch=0.0, brightness=(1, 1), colour_jitter=0)
    mask = shapes._shape_mask(np.random.default_rng(0), shape, 64, style)
    expected = _shoelace(shapes._OUTLINES[shape]) * (0.3 * 64) ** 2
    assert mask.min() >= 0 and mask.max() <= 1
    assert mask.sum() == pytest.approx(expected, rel=0.03)


def test_render_is_seeded_and_draws_the_class_colour():
    labels = np.arange(48)
    a = shapes.render(np.random.default_rng(5), labels, style=shapes.PRETRAIN)
    b = shapes.render(np.random.default_rng(5), labels, style=shapes.PRETRAIN)
    c = shapes.render(np.random.default_rng(6), labels, style=shapes.PRETRAIN)
    assert a.shape == (48, 32, 32, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    palette = np.array(list(shapes.COLOURS.values()), dtype=float)
    names = list(shapes.COLOURS)
    hits = 0
    for k, img in enumerate(a.astype(float)):
        # the 15% most saturated pixels belong to the shape (backgrounds are near-grey)
        sat = img.max(axis=-1) - img.min(axis=-1)
        top = img.reshape(-1, 3)[np.argsort(sat.ravel())[-150:]]
        nearest = names[np.argmin(((palette - np.median(top, axis=0)) ** 2).sum(axis=1))]
        hits += nearest == shapes.CLASSNAMES[k].split()[0]
    assert hits >= 46


def test_lighting_scales_the_scene():
    plain = dataclasses.replace(shapes.DOWNSTREAM, noise_std=(0.0, 0.0), lighting=(1.0, 1.0, 1.0))
    cast = dataclasses.replace(plain, lighting=(0.5, 0.8, 1.0))
    a = shapes.render(np.random.default_rng(1), [19, 44], style=plain).astype(float)
    b = shapes.render(np.random.default_rng(1), [19, 44], style=cast).astype(float)
    np.testing.assert_allclose(b, np.clip(np.rint(a * [0.5, 0.8, 1.0]), 0, 255), atol=1.01)


def test_pretraining_captions_leave_evaluation_templates_out():
    assert not set(PRETRAIN_TEMPLATES) & set(EVAL_ENSEMBLE)
    assert "a photo of a {}." in EVAL_ENSEMBLE and len(EVAL_ENSEMBLE) == 8
    filled = {c for row in pretraining_captions() for c in row}
    held_out = {t.format(name) for t in EVAL_ENSEMBLE for name in shapes.CLASSNAMES}
    assert not filled & held_out
    assert caption("a {colour} coloured {shape}.", "pink heart") == "a pink coloured heart."
    assert caption("an image of a {}.", "pink heart") == "an image of a pink heart."


def test_generate_writes_coop_layout_identical_to_render_split(tmp_path):
    dirs = shapes.generate(str(tmp_path), TINY, verbose=False)
    assert {name: dirs[name] for name in ("DemoShapes", "DemoShapesHard")} == {
        "DemoShapes": str(tmp_path / "demo_shapes"), "DemoShapesHard": str(tmp_path / "demo_shapes_hard")}
    test_images, test_labels = shapes.render_split("test", TINY)
    canonical = {shapes.CLASSNAMES[k]: k for k in range(48)}
    for name in ("DemoShapes", "DemoShapesHard"):
        folder = dirs[name]
        assert sorted(os.listdir(os.path.join(folder, "images"))) == sorted(
            c.replace(" ", "_") for c in shapes.CLASSNAMES)
        with open(os.path.join(folder, f"split_zhou_{name}.json")) as f:
            split = json.load(f)
        assert {k: len(v) for k, v in split.items()} == {"train": 96, "val": 48, "test": 48}
        order = shapes.label_order(name)
        for relpath, label, classname in split["train"] + split["val"] + split["test"]:
            assert classname == shapes.CLASSNAMES[order[label]]
            assert relpath.split("/")[0] == classname.replace(" ", "_")
            assert os.path.isfile(os.path.join(folder, "images", relpath))
        for relpath, _, classname in split["test"]:
            png = np.asarray(Image.open(os.path.join(folder, "images", relpath)).convert("RGB"))
            assert np.array_equal(png, test_images[list(test_labels).index(canonical[classname])])


def test_generate_is_deterministic_and_skips_when_current(tmp_path, capsys):
    first = shapes.generate(str(tmp_path / "a"), TINY, verbose=False)["DemoShapesHard"]
    second = shapes.generate(str(tmp_path / "b"), TINY, verbose=False)["DemoShapesHard"]
    relpaths = sorted(os.path.relpath(os.path.join(d, f), first) for d, _, fs in os.walk(first) for f in fs)
    assert len(relpaths) == 48 * 4 + 2
    for rel in relpaths:
        with open(os.path.join(first, rel), "rb") as fa, open(os.path.join(second, rel), "rb") as fb:
            assert fa.read() == fb.read(), rel
    marker = os.path.join(first, "images", "red_circle", "00000.png")
    mtime = os.stat(marker).st_mtime_ns
    shapes.generate(str(tmp_path / "a"), TINY)
    assert "already generated" in capsys.readouterr().out
    assert os.stat(marker).st_mtime_ns == mtime
    other = dataclasses.replace(TINY, seed=4)
    shapes.generate(str(tmp_path / "a"), other, verbose=False)
    with open(marker, "rb") as fa, open(os.path.join(second, "images", "red_circle", "00000.png"), "rb") as fb:
        assert fa.read() != fb.read()


def test_generate_writes_only_the_datasets_named(tmp_path):
    """``names`` limits what is drawn (the demo draws only the datasets it runs on); each folder written holds the
    files a full generation writes, byte for byte; an unknown name is refused before anything is written."""
    some = shapes.generate(str(tmp_path / "some"), TINY, verbose=False, names=["DemoShapesHard", "DemoCool"])
    assert sorted(some) == ["DemoCool", "DemoShapesHard"]
    assert sorted(os.listdir(tmp_path / "some")) == ["demo_shapes_hard", "democool"]
    every = shapes.generate(str(tmp_path / "all"), TINY, verbose=False)
    for name, folder in some.items():
        files = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
        assert files == sorted(os.path.relpath(os.path.join(d, f), every[name])
                               for d, _, fs in os.walk(every[name]) for f in fs)
        for rel in files:
            with open(os.path.join(folder, rel), "rb") as fa, open(os.path.join(every[name], rel), "rb") as fb:
                assert fa.read() == fb.read(), rel
    with pytest.raises(ValueError, match="DemoNope"):
        shapes.generate(str(tmp_path / "none"), TINY, verbose=False, names=["DemoShapes", "DemoNope"])
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("name", ["DemoShapes", "DemoShapesHard"])
def test_reader_and_base2novel_roles(tmp_path, name):
    shapes.generate(str(tmp_path), TINY, verbose=False)
    order = shapes.label_order(name)
    coop = {sub: build_dataset(make_cfg(tmp_path, name, **{"DATASET.SUBSAMPLE_CLASSES": sub}))
            for sub in ("all", "base", "new")}
    assert coop["all"].classnames == [shapes.CLASSNAMES[k] for k in order]
    m = math.ceil(48 / 2)
    assert coop["base"].classnames == [shapes.CLASSNAMES[k] for k in order[:m]]
    assert coop["new"].classnames == [shapes.CLASSNAMES[k] for k in order[m:]]
    assert len(coop["all"].train_x) == 96 and len(coop["all"].val) == 48 and len(coop["all"].test) == 48
    petr = build_dataset(make_cfg(tmp_path, name), "seen_unseen")
    assert {item.classname for item in petr.train_x} == {shapes.CLASSNAMES[k] for k in order[:m]}
    assert len(petr.train_u) == 48


def test_both_label_orders_keep_separate_fewshot_caches(tmp_path):
    shapes.generate(str(tmp_path), TINY, verbose=False)
    opts = {"DATASET.SUBSAMPLE_CLASSES": "base", "DATASET.NUM_SHOTS": 1}
    easy = build_dataset(make_cfg(tmp_path, "DemoShapes", **opts))
    hard = build_dataset(make_cfg(tmp_path, "DemoShapesHard", **opts))
    assert easy.dataset_dir != hard.dataset_dir
    assert {d.classname.split()[0] for d in hard.train_x} == {"red", "orange", "yellow", "green"}
    assert len({d.classname.split()[0] for d in easy.train_x}) == 8


def test_tree_of_another_label_order_is_rewritten_with_its_fewshot_cache(tmp_path):
    folder = shapes.generate(str(tmp_path), TINY, verbose=False)["DemoShapesHard"]
    manifest = os.path.join(folder, "manifest.json")
    with open(manifest) as f:
        written = json.load(f)
    assert written["split"] == "novel_colours"
    written["split"] = "novel_shapes"  # as a tree written by an older version with another base/novel order
    with open(manifest, "w") as f:
        json.dump(written, f)
    stale = os.path.join(folder, "split_fewshot", "shot_1-seed_1.json")
    os.makedirs(os.path.dirname(stale))
    open(stale, "w").close()
    shapes.generate(str(tmp_path), TINY, verbose=False)
    with open(manifest) as f:
        assert json.load(f)["split"] == "novel_colours"
    assert not os.path.exists(stale)


def test_missing_data_names_the_generator(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"python -m demo\.shapes --data"):
        build_dataset(make_cfg(tmp_path, "DemoShapes"))
