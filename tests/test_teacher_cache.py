"""Teacher feature cache (TEACHER_CACHE fixed / views): the cached KD targets equal the online teacher's on the
same crops (recomputed here with torchvision and PIL), the student sees exactly the stored crop, a changed teacher
or transform rebuilds the cache, a corrupt cache file is one clear error, and a PETR run trains with it."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

import train
from tests.helpers_petr import petr_argv, write_eurosat
from tests.test_trainer_promptkd import promptkd_argv, write_colour_eurosat
from trainers.distillation.teacher import Teacher
from trainers.distillation.teacher_cache import teacher_digest
from trainers.prompting.deep_prompts import VLPromptLearner

MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]  # the PromptKD config's


def cached_trainer(tmp_path, student, teacher, mode: str, *extra: str):
    """A PromptKD trainer (not trained) with the teacher cache of ``mode`` built in ``tmp_path/cache``."""
    if not (tmp_path / "data").exists():
        write_colour_eurosat(tmp_path / "data")
    trainer = train.main(promptkd_argv(tmp_path / "data", tmp_path / "out", student, teacher,
                                       "TRAINER.PROMPTKD.TEACHER_CACHE", mode, "TRAINER.PROMPTKD.TEACHER_CACHE_VIEWS",
                                       "3", "TRAINER.PROMPTKD.TEACHER_CACHE_DIR", str(tmp_path / "cache"), *extra,
                                       flags=("--no-train",)))
    trainer.build_teacher_cache()
    return trainer


def online_targets(trainer, images: torch.Tensor) -> torch.Tensor:
    """The online teacher's logits over all classes (its own forward)."""
    with torch.no_grad():
        return trainer.teacher(images)


def test_views_cache_targets_equal_the_online_teacher_on_the_stored_crops(tmp_path, tiny_clip_file,
                                                                         tiny_teacher_clip_file):
    trainer = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views")
    cache = trainer.teacher_cache["train_x"]
    n = len(trainer.dm.dataset.train_x)
    assert cache.features.shape == (n, 3, 64) and cache.views.shape == (n, 3, 5)
    # stored views are random resized crops of the 8x8 images (area within RRCROP_SCALE, ratio within 3/4..4/3)
    top, left, h, w, flip = cache.views.reshape(-1, 5).T
    assert ((top >= 0) & (left >= 0) & (top + h <= 8) & (left + w <= 8) & (h * w >= 1)).all()
    assert len({tuple(v) for v in cache.views.reshape(-1, 5).tolist()}) > n  # views differ within an image
    assert set(flip.tolist()) == {0, 1}

    batch = next(iter(trainer.train_loader_x))
    expected_images = []
    for impath, index, view in zip(batch["impath"], batch["index"], batch["view"]):
        t, left_, h_, w_, flipped = cache.views[index, view].tolist()
        with Image.open(impath) as img:
            crop = TF.resized_crop(img.convert("RGB"), t, left_, h_, w_, [32, 32], InterpolationMode.BICUBIC)
        crop = TF.hflip(crop) if flipped else crop
        expected_images.append(TF.normalize(TF.to_tensor(crop), MEAN, STD))
    expected_images = torch.stack(expected_images)
    torch.testing.assert_close(batch["img"], expected_images, rtol=0, atol=0)  # the student sees the stored crop

    cached = trainer.teacher_logits(trainer.teacher_cache["train_x"].lookup(batch))
    online = online_targets(trainer, expected_images)
    print(f"views cache vs online teacher: max |logit difference| {float((cached - online).abs().max()):.2e} "
          f"over {tuple(online.shape)}")
    torch.testing.assert_close(cached, online, rtol=1e-5, atol=1e-5)

    # a training step uses the cached targets: its loss is the KD of the student against the online teacher
    trainer.set_model_mode("train")
    with torch.no_grad():
        student = trainer.student_logits(trainer.student(trainer.clip_model, batch["img"]))
        expected = trainer.kd_term(student, online_targets(trainer, expected_images))
    trainer.batch_idx, trainer.num_batches = 0, len(trainer.train_loader_x)
    assert trainer.forward_backward(batch)["loss"] == pytest.approx(expected.item(), rel=1e-5)


def test_fixed_cache_targets_equal_the_online_teacher_on_the_test_view(tmp_path, tiny_clip_file,
                                                                      tiny_teacher_clip_file):
    trainer = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed")
    batch = next(iter(trainer.train_loader_x))
    assert (batch["view"] == 0).all()
    expected_images = []
    for impath in batch["impath"]:
        with Image.open(impath) as img:
            view = TF.center_crop(TF.resize(img.convert("RGB"), 32, InterpolationMode.BICUBIC), [32, 32])
        expected_images.append(TF.normalize(TF.to_tensor(view), MEAN, STD))
    expected_images = torch.stack(expected_images)
    torch.testing.assert_close(batch["img"], expected_images, rtol=0, atol=0)
    cached = trainer.teacher_logits(trainer.teacher_cache["train_x"].lookup(batch))
    online = online_targets(trainer, expected_images)
    print(f"fixed cache vs online teacher: max |logit difference| {float((cached - online).abs().max()):.2e}")
    torch.testing.assert_close(cached, online, rtol=1e-5, atol=1e-5)


def test_changed_teacher_or_transform_rebuilds_the_cache(tmp_path, capsys, tiny_clip_file, tiny_teacher_clip_file):
    first = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views")
    assert "Building the teacher cache" in capsys.readouterr().out
    path = first.teacher_cache["train_x"].path
    stamp = os.stat(path).st_mtime_ns
    again = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views")
    assert "up to date" in capsys.readouterr().out and os.stat(path).st_mtime_ns == stamp
    torch.testing.assert_close(again.teacher_cache["train_x"].features, first.teacher_cache["train_x"].features)

    other = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views", "INPUT.RRCROP_SCALE",
                           "(0.5, 1.0)")
    assert "stale (transform changed)" in capsys.readouterr().out
    assert not torch.equal(other.teacher_cache["train_x"].views, first.teacher_cache["train_x"].views)

    state = torch.load(tiny_teacher_clip_file, weights_only=True)
    state["visual.proj"] = state["visual.proj"] + 0.05 * torch.randn_like(state["visual.proj"])
    changed_teacher = str(tmp_path / "changed-teacher.pt")
    torch.save(state, changed_teacher)
    changed = cached_trainer(tmp_path, tiny_clip_file, changed_teacher, "views", "INPUT.RRCROP_SCALE", "(0.5, 1.0)")
    assert "stale (teacher changed)" in capsys.readouterr().out
    rebuilt = changed.teacher_cache["train_x"]
    assert rebuilt.path == path and torch.equal(rebuilt.views, other.teacher_cache["train_x"].views)
    assert not torch.allclose(rebuilt.features, other.teacher_cache["train_x"].features)


@pytest.mark.parametrize("suffix", [".pt", ".json"])
def test_a_corrupt_cache_file_is_one_clear_error(tmp_path, suffix, tiny_clip_file, tiny_teacher_clip_file):
    trainer = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed")
    broken = trainer.teacher_cache["train_x"].path[: -len(".pt")] + suffix
    with open(broken, "r+b") as f:
        f.truncate(40)
    with pytest.raises(ValueError) as error:
        cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed")
    message = str(error.value)
    assert "\n" not in message and broken in message and "delete it to rebuild" in message


def test_petr_trains_with_cached_views(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    write_eurosat(tmp_path / "data")
    trainer = train.main(petr_argv(tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file,
                                   "DATASET.SUBSAMPLE_CLASSES", "base", "OPTIM.MAX_EPOCH", "1",
                                   "INPUT.TRANSFORMS", "['random_resized_crop', 'random_flip', 'normalize']",
                                   "TRAINER.PETR.TEACHER_CACHE", "views", "TRAINER.PETR.TEACHER_CACHE_VIEWS", "2"))
    assert set(trainer.teacher_cache) == {"train_x", "train_u"}
    assert len(trainer.teacher_cache["train_u"].features) == len(trainer.dm.dataset.train_u)
    assert os.path.isfile(tmp_path / "out" / "results.json")
    with pytest.raises(ValueError, match="TEACHER_CACHE"):
        train.main(petr_argv(tmp_path / "data", tmp_path / "bad", tiny_clip_file, tiny_teacher_clip_file,
                             "TRAINER.PETR.TEACHER_CACHE", "sometimes", flags=("--no-train",)))
    with pytest.raises(ValueError, match=r"TEACHER_CACHE views stores crops and flips only, but INPUT.TRANSFORMS has "
                                         r"\['colorjitter'\]"):
        train.main(petr_argv(tmp_path / "data", tmp_path / "bad", tiny_clip_file, tiny_teacher_clip_file,
                             "TRAINER.PETR.TEACHER_CACHE", "views", "INPUT.TRANSFORMS",
                             "['random_flip', 'colorjitter', 'normalize']", flags=("--no-train",)))


def test_teacher_digest_of_a_prompted_teacher(tiny_teacher_clip):
    """A checkpoint teacher's state dict also holds the prompts' metadata (a dict): the key covers the tensors only."""
    torch.manual_seed(0)
    learner = VLPromptLearner.build(tiny_teacher_clip, 4, 4, 3, 4, meta={"source": "/runs/a/model.pth.tar-20"})
    teacher = Teacher(tiny_teacher_clip, ["red", "blue"], prompts=learner)
    assert any(not torch.is_tensor(v) for v in teacher.state_dict().values())
    key = teacher_digest(teacher)
    learner.meta = {"source": "/moved/elsewhere/model.pth.tar-20"}
    assert teacher_digest(teacher) == key  # moving the checkpoint keeps the cache
    with torch.no_grad():
        learner.parameters().__next__().add_(1e-3)
    assert teacher_digest(teacher) != key  # other prompt values rebuild it


def test_decoded_views_are_the_stored_crops_and_change_no_tensor(tmp_path, capsys, tiny_clip_file,
                                                                 tiny_teacher_clip_file):
    """TEACHER_CACHE_IMAGES: the .pixels file holds each stored view as PIL cuts it (recomputed here from the stored
    parameters), the loader yields exactly the tensors it yields without it (same seed), and the teacher's features
    are the same; a second run reads both back."""
    plain = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views")
    pixels = cached_trainer(tmp_path / "p", tiny_clip_file, tiny_teacher_clip_file, "views",
                            "TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    assert "Storing the decoded views" in capsys.readouterr().out
    cache = pixels.teacher_cache["train_x"]
    stored = cache.pixels.arrays
    assert stored["pixels"].shape == (len(pixels.dm.dataset.train_x), 3, 3, 32, 32)
    assert stored["pixels"].dtype == np.uint8
    assert torch.equal(torch.from_numpy(np.array(stored["views"])), cache.views)
    for index, item in enumerate(pixels.dm.dataset.train_x[:4]):
        for view in range(3):
            t, left, h, w, flipped = cache.views[index, view].tolist()
            with Image.open(item.impath) as img:
                crop = TF.resized_crop(img.convert("RGB"), t, left, h, w, [32, 32], InterpolationMode.BICUBIC)
            crop = TF.hflip(crop) if flipped else crop
            np.testing.assert_array_equal(stored["pixels"][index, view], np.asarray(crop).transpose(2, 0, 1))
    assert torch.equal(cache.features, plain.teacher_cache["train_x"].features)
    for trainer in (plain, pixels):
        torch.manual_seed(0)
        trainer.batches = [next(iter(trainer.train_loader_x)) for _ in range(3)]
    for a, b in zip(plain.batches, pixels.batches):
        assert torch.equal(a["img"], b["img"]) and torch.equal(a["index"], b["index"])

    again = cached_trainer(tmp_path / "p", tiny_clip_file, tiny_teacher_clip_file, "views",
                           "TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    out = capsys.readouterr().out
    assert "Decoded views" in out and "up to date" in out
    assert "Storing the decoded views" not in out and "Building the teacher cache" not in out
    assert np.array_equal(again.teacher_cache["train_x"].pixels.arrays["pixels"], stored["pixels"])


def test_stale_decoded_views_are_stored_again_and_a_new_teacher_reads_them(tmp_path, capsys, tiny_clip_file,
                                                                           tiny_teacher_clip_file):
    """Another transform or decoder stores the views again; another teacher keeps them (pixels do not depend on
    it) and builds its features from them, equal to features built from the image files; other images are another
    file, the first left as it was."""
    images = ("TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    first = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views", *images)
    path = first.teacher_cache["train_x"].pixels.path
    stamp = os.stat(path).st_mtime_ns
    capsys.readouterr()
    other = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views", *images, "INPUT.RRCROP_SCALE",
                           "(0.5, 1.0)")
    assert f"Decoded views {path} is stale (transform changed)" in capsys.readouterr().out
    assert other.teacher_cache["train_x"].pixels.path == path and os.stat(path).st_mtime_ns != stamp
    decoder = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "views", *images, "INPUT.RRCROP_SCALE",
                             "(0.5, 1.0)", "INPUT.DECODER", "tensor")
    assert "is stale (decoder changed)" in capsys.readouterr().out
    stamp = os.stat(path).st_mtime_ns

    state = torch.load(tiny_teacher_clip_file, weights_only=True)
    state["visual.proj"] = state["visual.proj"] + 0.05 * torch.randn_like(state["visual.proj"])
    changed_teacher = str(tmp_path / "changed-teacher.pt")
    torch.save(state, changed_teacher)
    opts = ("INPUT.RRCROP_SCALE", "(0.5, 1.0)", "INPUT.DECODER", "tensor")
    changed = cached_trainer(tmp_path, tiny_clip_file, changed_teacher, "views", *images, *opts)
    out = capsys.readouterr().out
    assert "stale (teacher changed)" in out and "from the decoded views" in out and "up to date" in out
    assert os.stat(path).st_mtime_ns == stamp
    assert not torch.allclose(changed.teacher_cache["train_x"].features, decoder.teacher_cache["train_x"].features)
    from_files = cached_trainer(tmp_path / "files", tiny_clip_file, changed_teacher, "views", *opts)
    torch.testing.assert_close(changed.teacher_cache["train_x"].features,
                               from_files.teacher_cache["train_x"].features, rtol=0, atol=0)

    novel = cached_trainer(tmp_path, tiny_clip_file, changed_teacher, "views", *images, *opts,
                           "DATASET.NUM_SHOTS", "2")
    assert novel.teacher_cache["train_x"].pixels.path != path and os.stat(path).st_mtime_ns == stamp


def test_a_corrupt_decoded_views_file_is_one_clear_error(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    images = ("TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    trainer = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed", *images)
    broken = trainer.teacher_cache["train_x"].pixels.path
    with open(broken, "r+b") as f:
        f.truncate(os.path.getsize(broken) - 100)
    with pytest.raises(ValueError) as error:
        cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed", *images)
    message = str(error.value)
    assert "\n" not in message and broken in message and "truncated" in message and "delete it to rebuild" in message


def test_decoded_fixed_views_are_the_test_views(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    """TEACHER_CACHE fixed with TEACHER_CACHE_IMAGES: one stored view per image, the test transform's (PIL: resize
    the shorter side, centre crop), and the loader's batches equal those made from the image files, bit for bit."""
    plain = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed")
    pixels = cached_trainer(tmp_path / "p", tiny_clip_file, tiny_teacher_clip_file, "fixed",
                            "TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    stored = pixels.teacher_cache["train_x"].pixels.arrays["pixels"]
    assert stored.shape == (len(pixels.dm.dataset.train_x), 1, 3, 32, 32)
    for index, item in enumerate(pixels.dm.dataset.train_x[:4]):
        with Image.open(item.impath) as img:
            view = TF.center_crop(TF.resize(img.convert("RGB"), 32, InterpolationMode.BICUBIC), [32, 32])
        np.testing.assert_array_equal(stored[index, 0], np.asarray(view).transpose(2, 0, 1))
    for trainer in (plain, pixels):
        torch.manual_seed(0)
        trainer.batch = next(iter(trainer.train_loader_x))
    assert torch.equal(plain.batch["img"], pixels.batch["img"]) and torch.equal(plain.batch["index"],
                                                                                 pixels.batch["index"])


def test_a_run_that_builds_the_cache_trains_as_one_that_reads_it(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    """Building the cache iterates loaders, which draw their base seeds from the global RNG: were it not put back, a
    run that builds the cache would draw other passes than one that finds it (the fast profile shares one cache
    between the seeds, so numbers would depend on the jobs' order). Built, read, and built with the decoded views
    (PIL decoder): the same trained weights, bit for bit."""
    write_colour_eurosat(tmp_path / "data")

    def trained(name: str, cache: str, *extra: str) -> dict:
        out = tmp_path / name
        train.main(promptkd_argv(tmp_path / "data", out, tiny_clip_file, tiny_teacher_clip_file, "OPTIM.MAX_EPOCH",
                                 "1", "TRAINER.PROMPTKD.TEACHER_CACHE", "views", "TRAINER.PROMPTKD.TEACHER_CACHE_DIR",
                                 str(tmp_path / cache), *extra))
        folder = next(p for p in out.iterdir() if (p / "checkpoint").is_file())
        return torch.load(folder / (folder / "checkpoint").read_text().strip(), weights_only=True)["state_dict"]

    built = trained("built", "cache")
    assert {p.suffix for p in (tmp_path / "cache").iterdir()} == {".pt", ".json"}
    read = trained("read", "cache")
    decoded = trained("decoded", "cache2", "TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    for name, tensor in built.items():
        assert torch.equal(tensor, read[name]) and torch.equal(tensor, decoded[name]), name


def test_other_images_under_the_same_paths_rebuild_the_cache(tmp_path, capsys, tiny_clip_file,
                                                              tiny_teacher_clip_file):
    """The key holds the images' bytes: other pixels copied over the train images (same paths, same split) make the
    features and the decoded views stale; both are made again from the new pixels, equal to those a cache built
    fresh on the same images holds."""
    images = ("TRAINER.PROMPTKD.TEACHER_CACHE_IMAGES", "True")
    first = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed", *images)
    cache = first.teacher_cache["train_x"]
    paths = [item.impath for item in first.dm.dataset.train_x]
    contents = [open(path, "rb").read() for path in paths]
    for path, content in zip(paths, contents[1:] + contents[:1]):  # each image takes the next one's bytes
        with open(path, "wb") as f:
            f.write(content)
    capsys.readouterr()
    again = cached_trainer(tmp_path, tiny_clip_file, tiny_teacher_clip_file, "fixed", *images)
    out = capsys.readouterr().out
    assert f"Decoded views {cache.pixels.path} is stale (image_bytes changed); writing it again" in out
    assert f"Teacher cache {cache.path} is stale (image_bytes changed); rebuilding it" in out
    shutil.copytree(tmp_path / "data", tmp_path / "fresh" / "data")
    fresh = cached_trainer(tmp_path / "fresh", tiny_clip_file, tiny_teacher_clip_file, "fixed", *images)
    rebuilt, reference = again.teacher_cache["train_x"], fresh.teacher_cache["train_x"]
    assert rebuilt.path == cache.path and not torch.equal(rebuilt.features, cache.features)
    torch.testing.assert_close(rebuilt.features, reference.features, rtol=0, atol=0)
    assert np.array_equal(rebuilt.pixels.arrays["pixels"], reference.pixels.arrays["pixels"])
