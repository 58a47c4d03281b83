"""The DataManager builds train_x / train_u / val / test loaders from the PETR roles, with the train and test
transforms, and a corrupt image in a split is named when it is loaded."""
from __future__ import annotations

import re

import pytest
import torch
from PIL import Image
from torchvision import transforms as T
from torchvision.transforms import functional as TF

from datasets.catalog import register_datasets
from engine.data_manager import DataManager
from engine.dataset_base import UNLABELED
from tests.helpers_datasets import make_cfg, write_image, write_tree

register_datasets()

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def loader_cfg(root):
    return make_cfg(root, "EuroSAT", **{
        "INPUT.SIZE": (16, 16), "INPUT.INTERPOLATION": "bicubic", "INPUT.PIXEL_MEAN": CLIP_MEAN,
        "INPUT.PIXEL_STD": CLIP_STD, "INPUT.TRANSFORMS": ("random_resized_crop", "random_flip", "normalize"),
        "DATALOADER.NUM_WORKERS": 0, "DATALOADER.TRAIN_X.BATCH_SIZE": 4, "DATALOADER.TEST.BATCH_SIZE": 3,
        "USE_CUDA": False, "DATASET.SUBSAMPLE_CLASSES": "base"})


def reference_test_tensor(path: str) -> torch.Tensor:
    """CLIP-style test preprocessing written out with torchvision's functional API."""
    img = Image.open(path).convert("RGB")
    img = TF.center_crop(TF.resize(img, 16, interpolation=T.InterpolationMode.BICUBIC), [16, 16])
    return TF.normalize(TF.to_tensor(img), CLIP_MEAN, CLIP_STD)


def test_petr_loaders_and_transforms(tmp_path):
    tree = write_tree("EuroSAT", tmp_path, "json")  # 5 classes: base 0..2, novel 3..4
    dm = DataManager(loader_cfg(tmp_path), role="seen_unseen")
    ds = dm.dataset
    assert dm.num_classes == 5 and dm.lab2cname == dict(enumerate(tree.classnames))

    batch = next(iter(dm.train_loader_x))
    assert batch["img"].shape == (4, 3, 16, 16)
    assert all(0 <= int(y) < 3 and int(y) == tree.truth[p][0] for y, p in zip(batch["label"], batch["impath"]))
    u_labels = torch.cat([b["label"] for b in dm.train_loader_u])
    u_paths = [p for b in dm.train_loader_u for p in b["impath"]]
    assert (u_labels == UNLABELED).all() and all(tree.truth[p][0] >= 3 for p in u_paths)
    assert len(u_paths) == len(ds.train_u) - len(ds.train_u) % 4  # drop_last on training loaders

    train_tfms = [type(t) for t in dm.train_loader_x.dataset.transform.transforms]
    assert train_tfms == [T.RandomResizedCrop, T.RandomHorizontalFlip, T.ToTensor, T.Normalize]
    assert dm.train_loader_u.dataset.transform is dm.train_loader_x.dataset.transform
    for loader, items in ((dm.test_loader, ds.test), (dm.val_loader, ds.val)):
        seen = []
        for b in loader:
            for img, path in zip(b["img"], b["impath"]):
                torch.testing.assert_close(img, reference_test_tensor(path), atol=1e-5, rtol=1e-5)
                seen.append(path)
        assert seen == [d.impath for d in items]  # sequential, nothing dropped
    assert {int(y) for b in dm.test_loader for y in b["label"]} == {0, 1, 2}


def test_standard_role_has_no_train_u_loader(tmp_path):
    write_tree("EuroSAT", tmp_path, "json")
    dm = DataManager(loader_cfg(tmp_path))
    assert dm.train_loader_u is None and dm.val_loader is not None and dm.num_classes == 3


def test_corrupt_image_is_named_when_loaded(tmp_path):
    tree = write_tree("EuroSAT", tmp_path, "json")
    bad = next(p for p, (label, tag) in tree.truth.items() if tag == "test" and label == 0)
    write_image(bad, corrupt=True)
    dm = DataManager(loader_cfg(tmp_path))
    with pytest.raises(OSError, match=re.escape(bad)):
        for _ in dm.test_loader:
            pass
