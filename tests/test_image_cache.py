"""Decoded training images (DATALOADER.IMAGE_CACHE_SIDE, engine/image_cache.py): each image is stored as PIL (or the
tensor decoder) resizes it, never enlarged; the loader's crops are torchvision's draws on the stored image; a second
run reads the file, a stale one is written again, a truncated one is one error line; passes resume mid-epoch with the
same batches, with or without loader workers; a CoOp run trains on it."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

import train
from engine import DataManager, get_cfg_default
from engine.data_stream import LoaderStream, draw_seed, sample_seed, seeded_rngs
from tests.helpers_engine import write_image_tree
from tests.test_bad_input import coop_argv
from tests.test_decoding import smooth_image
from trainers.config import extend_cfg

SIDE = 16


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    """The engine's tiny tree at 24 x 24, one image replaced by a 40 x 30 one and one by a 12 x 12 one (kept)."""
    root = tmp_path_factory.mktemp("image_cache")
    base = write_image_tree(str(root), size=24)
    smooth_image(40, 30, seed=1).save(os.path.join(base, "red", "0.png"))
    smooth_image(12, 12, seed=2).save(os.path.join(base, "green", "1.png"))
    return str(root)


def cfg_of(root: str, out, workers: int = 0, *opts: str):
    cfg = extend_cfg(get_cfg_default())
    cfg.merge_from_list(["DATASET.ROOT", root, "DATASET.NAME", "EngineTinyDataset", "USE_CUDA", "False",
                         "OUTPUT_DIR", str(out), "INPUT.SIZE", "(8, 8)", "INPUT.INTERPOLATION", "bicubic",
                         "INPUT.TRANSFORMS", "['random_resized_crop', 'random_flip']", "DATALOADER.NUM_WORKERS",
                         str(workers), "DATALOADER.TRAIN_X.BATCH_SIZE", "5", "DATALOADER.IMAGE_CACHE_SIDE", str(SIDE),
                         "VERBOSE", "False", *opts])
    return cfg


def cached_manager(root: str, out, workers: int = 0, *opts: str) -> DataManager:
    dm = DataManager(cfg_of(root, out, workers, *opts))
    assert dm.cache_images() and not dm.cache_images()  # once
    return dm


def stored_reference(path: str) -> Image.Image:
    """The image as the cache should hold it: PIL's bicubic resize of its shorter side to SIDE, or itself."""
    with Image.open(path) as img:
        img = img.convert("RGB")
    w, h = img.size
    if min(w, h) <= SIDE:
        return img
    size = (SIDE, int(SIDE * h / w)) if w <= h else (int(SIDE * w / h), SIDE)
    return img.resize(size, Image.BICUBIC)


def test_stored_images_and_the_crops_taken_from_them(root, tmp_path, capsys):
    dm = cached_manager(root, tmp_path)
    assert "Decoding 12 train_x images once into" in capsys.readouterr().out
    source = dm.dataset.train_x
    cache = dm.train_loader_x.dataset.images
    sizes = set()
    for index, item in enumerate(source):
        reference = stored_reference(item.impath)
        stored = cache.image(index, "pil")
        np.testing.assert_array_equal(np.asarray(stored), np.asarray(reference))
        sizes.add(stored.size)
    assert sizes == {(16, 16), (21, 16), (12, 12)}  # 24 px -> 16, 40 x 30 -> 21 x 16, 12 px kept
    # a training item: torchvision's crop and flip drawn on the stored image, under the sample's seed
    seed = sample_seed(1234, 0, 3)
    item = dm.train_loader_x.dataset[(3, seed)]
    with seeded_rngs(seed):
        img = stored_reference(source[3].impath)
        box = T.RandomResizedCrop.get_params(img, [0.08, 1.0], [3 / 4, 4 / 3])
        flipped = bool(torch.rand(1) < 0.5)
    crop = img.crop((box[1], box[0], box[1] + box[3], box[0] + box[2])).resize((8, 8), Image.BICUBIC)
    crop = crop.transpose(Image.FLIP_LEFT_RIGHT) if flipped else crop
    torch.testing.assert_close(item["img"], T.functional.to_tensor(crop), rtol=0, atol=0)


def test_a_second_run_reads_the_file_and_a_stale_one_is_written_again(root, tmp_path, capsys):
    first = cached_manager(root, tmp_path)
    path = first.train_loader_x.dataset.images.stored.path
    stamp = os.stat(path).st_mtime_ns
    capsys.readouterr()
    cached_manager(root, tmp_path)
    assert "up to date" in capsys.readouterr().out and os.stat(path).st_mtime_ns == stamp
    other = cached_manager(root, tmp_path, 0, "INPUT.INTERPOLATION", "bilinear")
    assert f"Image cache {path} is stale (interpolation changed); writing it again" in capsys.readouterr().out
    assert other.train_loader_x.dataset.images.stored.path == path and os.stat(path).st_mtime_ns != stamp
    tensor = cached_manager(root, tmp_path, 0, "INPUT.INTERPOLATION", "bilinear", "INPUT.DECODER", "tensor")
    assert "is stale (decoder changed)" in capsys.readouterr().out
    stored = tensor.train_loader_x.dataset.images
    for index, item in enumerate(tensor.dataset.train_x):  # the tensor decoder's resize: within 4 grey levels of PIL's
        image = stored.image(index, "pil")
        with Image.open(item.impath) as img:
            reference = img.convert("RGB").resize(image.size, Image.BILINEAR)
        assert np.abs(np.asarray(image, dtype=int) - np.asarray(reference, dtype=int)).max() <= 4
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 10)
    with pytest.raises(ValueError, match=f"Image cache {path} is corrupt or unreadable .*truncated.*; delete it to "
                                         "rebuild it"):
        cached_manager(root, tmp_path, 0, "INPUT.INTERPOLATION", "bilinear", "INPUT.DECODER", "tensor")


@pytest.mark.parametrize("workers,decoder", [(0, "pil"), (2, "pil"), (2, "tensor")])
def test_passes_over_stored_images_resume_with_the_same_batches(root, tmp_path, workers, decoder):
    """12 images, batch 5: 5 batches cross two pass restarts; a stream continued from the state after k batches
    yields the rest of the uninterrupted stream's batches, pixel for pixel, with 0 or 2 workers."""
    loader = cached_manager(root, tmp_path, workers, "INPUT.DECODER", decoder).train_loader_x
    torch.manual_seed(0)
    stream = LoaderStream(loader)
    states, reference = [], []
    for _ in range(5):
        states.append(stream.state())
        reference.append(stream.next()["img"])
    for k in range(1, 5):
        torch.manual_seed(0)
        for _ in range(1 + (k - 1) // 2):
            draw_seed()
        resumed = LoaderStream(cached_manager(root, tmp_path, 0, "INPUT.DECODER", decoder).train_loader_x)
        resumed.start(states[k])
        assert all(torch.equal(resumed.next()["img"], b) for b in reference[k:]), k
    assert len({tuple(b.flatten()[:8].tolist()) for b in reference}) == 5


def test_coop_trains_on_stored_images_as_it_does_after_storing_them(tmp_path, tiny_clip_file, capsys):
    """A CoOp run decodes its few-shot images into the cache and trains; a second run reads them and ends with the
    same weights, bit for bit (storing them leaves the run's RNG as it was)."""
    from tests.helpers_petr import write_eurosat

    write_eurosat(tmp_path / "data")
    cache = tmp_path / "images"
    weights = []
    for name in ("built", "read"):
        argv = coop_argv(tmp_path / "data", tmp_path / name, tiny_clip_file, "DATALOADER.IMAGE_CACHE_SIDE", "6",
                         "DATALOADER.IMAGE_CACHE_DIR", str(cache), "OPTIM.MAX_EPOCH", "2")
        assert train.cli(argv) == 0
        folder = tmp_path / name / "prompt_learner"
        weights.append(torch.load(folder / (folder / "checkpoint").read_text().strip(), weights_only=True))
    out = capsys.readouterr().out
    assert out.count("Decoding") == 1 and "up to date" in out and len(os.listdir(cache)) == 1
    assert os.path.isfile(tmp_path / "read" / "results.json")
    for key, tensor in weights[0]["state_dict"].items():
        assert torch.equal(tensor, weights[1]["state_dict"][key]), key


def test_other_images_under_the_same_paths_write_the_file_again(root, tmp_path, capsys):
    """The key holds the images' bytes: another image saved over a training image (same path) makes the file stale;
    it is written again and holds the new image."""
    shutil.copytree(root, tmp_path / "data")
    first = cached_manager(str(tmp_path / "data"), tmp_path / "out")
    path = first.train_loader_x.dataset.images.stored.path
    replaced = first.dataset.train_x[0].impath
    smooth_image(24, 24, seed=9).save(replaced)
    capsys.readouterr()
    again = cached_manager(str(tmp_path / "data"), tmp_path / "out")
    assert f"Image cache {path} is stale (image_bytes changed); writing it again" in capsys.readouterr().out
    stored = again.train_loader_x.dataset.images
    assert stored.stored.path == path
    assert np.array_equal(np.asarray(stored.image(0, "pil")), np.asarray(stored_reference(replaced)))
