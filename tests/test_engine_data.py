"""Transforms (order, printing, test-time numerics vs PIL), DatasetWrapper, loaders and DataManager."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import engine.utils
from engine import DataManager, DatasetWrapper, build_data_loader, build_transform, get_cfg_default, read_image
from tests.helpers_engine import EngineTinyDataset, write_image_tree
from trainers.config import extend_cfg

MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("engine_data")
    write_image_tree(str(root))
    return str(root)


def _cfg(root: str = "", **input_kw):
    cfg = extend_cfg(get_cfg_default())
    cfg.DATASET.ROOT = root
    cfg.DATASET.NAME = "EngineTinyDataset"
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.INPUT.SIZE = (8, 8)
    cfg.INPUT.PIXEL_MEAN, cfg.INPUT.PIXEL_STD = MEAN, STD
    cfg.INPUT.TRANSFORMS = ("random_resized_crop", "random_flip", "normalize")
    for k, v in input_kw.items():
        cfg.INPUT[k] = v
    return cfg


def test_train_transform_order_and_lines(capsys):
    cfg = _cfg(TRANSFORMS=("normalize", "random_flip", "random_resized_crop", "colorjitter"))
    tfm = build_transform(cfg, is_train=True)
    names = [type(t).__name__ for t in tfm.transforms]
    assert names == ["RandomResizedCrop", "RandomHorizontalFlip", "ColorJitter", "ToTensor", "Normalize"]
    out = capsys.readouterr().out
    assert "+ random resized crop (size=(8, 8), scale=(0.08, 1.0))" in out
    assert out.index("+ random flip") < out.index("+ color jitter") < out.index("+ normalization")
    no_crop = build_transform(_cfg(TRANSFORMS=("random_flip",)), is_train=True)
    assert [type(t).__name__ for t in no_crop.transforms] == ["Resize", "RandomHorizontalFlip", "ToTensor"]


def test_test_transform_matches_pil_reference(capsys):
    cfg = _cfg(INTERPOLATION="bicubic")
    tfm = build_transform(cfg, is_train=False)
    out = capsys.readouterr().out
    assert "+ resize the smaller edge to 8" in out and "+ 8x8 center crop" in out
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, size=(10, 14, 3), dtype=np.uint8))  # h=10, w=14
    ref = np.asarray(img.resize((11, 8), Image.BICUBIC).crop((2, 0, 10, 8)), dtype=np.float32) / 255.0
    ref = (ref - np.array(MEAN, dtype=np.float32)) / np.array(STD, dtype=np.float32)
    np.testing.assert_allclose(tfm(img).numpy(), ref.transpose(2, 0, 1), atol=1e-5)


def test_unknown_transform_lists_allowed_ones():
    with pytest.raises(ValueError, match=r"Unknown transform\(s\) \['random_flipp'\].*allowed: .*random_flip"):
        build_transform(_cfg(TRANSFORMS=("random_flipp",)))
    assert build_transform(_cfg(NO_TRANSFORM=True)) is None


def test_dataset_wrapper_views_and_img0(tiny_root):
    cfg = _cfg(tiny_root)
    cfg.DATALOADER.K_TRANSFORMS = 2
    cfg.DATALOADER.RETURN_IMG0 = True
    ds = EngineTinyDataset(cfg)
    item = DatasetWrapper(cfg, ds.train_x, transform=build_transform(cfg), is_train=True)[5]
    assert item["label"] == ds.train_x[5].label and item["impath"] == ds.train_x[5].impath and item["index"] == 5
    assert isinstance(item["img"], list) and len(item["img"]) == 2 and item["img"][0].shape == (3, 8, 8)
    pixels = np.asarray(Image.open(ds.train_x[5].impath).convert("RGB"), dtype=np.float32) / 255.0
    ref0 = ((pixels - np.array(MEAN, dtype=np.float32)) / np.array(STD, dtype=np.float32)).transpose(2, 0, 1)
    np.testing.assert_allclose(item["img0"].numpy(), ref0, atol=1e-5)
    test_item = DatasetWrapper(cfg, ds.test, transform=build_transform(cfg, is_train=False), is_train=False)[0]
    assert isinstance(test_item["img"], torch.Tensor)  # K_TRANSFORMS applies to training only


def test_build_data_loader_semantics(tiny_root):
    cfg = _cfg(tiny_root)
    ds = EngineTinyDataset(cfg)
    tfm = build_transform(cfg, is_train=False)
    train = build_data_loader(cfg, "RandomSampler", ds.train_x, batch_size=5, tfm=tfm, is_train=True)
    assert len(train) == 2 and train.drop_last  # 12 items, batch 5, last partial batch dropped
    small = build_data_loader(cfg, "RandomSampler", ds.val, batch_size=5, tfm=tfm, is_train=True)
    assert len(small) == 1 and not small.drop_last  # fewer items than a batch: keep them
    test = build_data_loader(cfg, "SequentialSampler", ds.train_x, batch_size=5, tfm=tfm, is_train=False)
    assert len(test) == 3 and [b["index"].tolist() for b in test][0] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="Unknown sampler 'RandomDomainSamplerX'"):
        build_data_loader(cfg, "RandomDomainSamplerX", ds.train_x, batch_size=5, tfm=tfm)


def test_data_manager_loaders_summary_and_extra_loader(tiny_root, capsys):
    cfg = _cfg(tiny_root)
    cfg.DATALOADER.TRAIN_X.BATCH_SIZE = 4
    cfg.DATALOADER.TEST.BATCH_SIZE = 2
    dm = DataManager(cfg)
    out = capsys.readouterr().out
    for row in ("Dataset    EngineTinyDataset", "# classes  3", "# train_x  12", "# val      3", "# test     9"):
        assert row in out
    assert dm.num_classes == 3 and dm.lab2cname == {0: "red", 1: "green", 2: "blue"} and dm.train_loader_u is None
    assert (len(dm.train_loader_x), len(dm.val_loader), len(dm.test_loader)) == (3, 2, 5)
    stats = dm.build_loader(dm.dataset.train_x, is_train=False)  # e.g. router statistics: test transform
    a = torch.cat([b["img"] for b in stats])
    b = torch.cat([b["img"] for b in stats])
    assert a.shape == (12, 3, 8, 8) and torch.equal(a, b)
    assert len(dm.build_loader(dm.dataset.train_x, is_train=True, batch_size=6)) == 2


def test_sixteen_bit_grayscale_is_scaled_not_clipped(tmp_path, capsys, monkeypatch):
    """A 16-bit PNG holding v * 257 (v = 0..255) reads as the 8-bit image of v, not as near-white, with a note."""
    monkeypatch.setattr(engine.utils, "_noted", set())  # the note is printed once per process
    values = np.arange(256, dtype=np.uint16).reshape(16, 16)
    Image.fromarray(values * 257).save(tmp_path / "gray16.png")
    Image.fromarray(values.astype(np.uint8)).save(tmp_path / "gray8.png")
    assert Image.open(tmp_path / "gray16.png").mode == "I;16"
    image = read_image(str(tmp_path / "gray16.png"))
    assert image.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(image), np.repeat(values.astype(np.uint8)[..., None], 3, axis=2))
    np.testing.assert_array_equal(np.asarray(image), np.asarray(read_image(str(tmp_path / "gray8.png"))))
    assert capsys.readouterr().out == (f"Note: {tmp_path / 'gray16.png'} is a 16-bit grayscale image: its values are "
                                       "scaled to 8 bits (v / 257); so are those of any other (noted once)\n")
