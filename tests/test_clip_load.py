"""clip.load_model / clip.load: file formats, the ./clip -> $CLIP_WEIGHTS_DIR -> ~/.cache/clip order, downloads."""
from __future__ import annotations

import copy
import hashlib
import os
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

import clip
from clip import clip as clip_module
from tests.helpers_clip import IMAGE_SIZE, make_tiny_openclip, rel_err
from tests.helpers_fetch import serve_folder

URL_B16 = clip_module._MODELS["ViT-B/16"]


@pytest.fixture
def isolated_dirs(tmp_path, monkeypatch):
    """Empty working dir, HOME and $CLIP_WEIGHTS_DIR, and no proxies, so only files made by the test are found."""
    for name in ("work", "home", "weights"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CLIP_WEIGHTS_DIR", str(tmp_path / "weights"))
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return tmp_path


def _features(model) -> tuple[torch.Tensor, torch.Tensor]:
    """Image and text features of a clip.CLIP or an open_clip CLIP on fixed inputs."""
    images = torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model.encode_image(images), model.encode_text(clip.tokenize(["a photo of a dog.", "a cat"]))


def test_both_import_styles_and_available_models():
    from clip import clip as submodule

    assert submodule.load is clip.load and submodule.tokenize is clip.tokenize
    assert submodule.build_model is clip.build_model
    assert {"ViT-B/32", "ViT-B/16", "ViT-L/14", "ViT-L/14@336px"} <= set(clip.available_models())
    assert {"RN50", "RN101", "RN50x4", "RN50x16", "RN50x64"} <= set(clip.available_models())
    assert clip_module._MODELS["RN50"].endswith(
        "/afeb0e10f9e5a86da6080e35cf09123aca3b358a0c3e3b6c78a7b63bc04b6762/RN50.pt")
    assert clip_module._MODELS["RN50x64"].endswith(
        "/be1cfb55d75a9666199fb2206c106743da0f6468c9d327f3e0d0a543a9919d9c/RN50x64.pt")
    for name in clip.available_models():
        url = clip_module._MODELS[name]
        assert url.startswith("https://openaipublic.azureedge.net/clip/models/") and len(url.split("/")[-2]) == 64


def test_plain_and_wrapped_state_dicts_load(tmp_path, tiny_clip_file, tiny_openclip_model):
    model = clip.load_model(tiny_clip_file, device=torch.device("cpu"))
    image, text = _features(model)
    expected_image, expected_text = _features(tiny_openclip_model)
    assert rel_err(image, expected_image) < 1e-5 and rel_err(text, expected_text) < 1e-5
    wrapped = tmp_path / "wrapped.pth"
    torch.save({"state_dict": torch.load(tiny_clip_file, weights_only=True), "epoch": 3}, wrapped)
    assert torch.equal(_features(clip.load_model(str(wrapped)))[0], image)


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::torch.jit.TracerWarning")
def test_torchscript_archive_loads_like_the_plain_state_dict(tmp_path):
    # An OpenAI-style archive: a traced CLIP whose state dict has OpenAI's key names, stored in fp16.
    reference = make_tiny_openclip(32, 64, 1, 16, 64, 1, seed=3)  # one block per tower keeps tracing fast
    model = copy.deepcopy(reference)
    del model.attn_mask  # a non-persistent buffer of open_clip, absent from OpenAI's archives
    images = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    traced = torch.jit.trace_module(model, {"encode_image": (images,)}).half()
    jit_path, plain_path = tmp_path / "ViT-tiny-jit.pt", tmp_path / "ViT-tiny-plain.pt"
    torch.jit.save(traced, jit_path)
    jit_state_dict = torch.jit.load(jit_path).state_dict()
    assert set(jit_state_dict) == set(reference.state_dict())
    torch.save({k: v.half() for k, v in reference.state_dict().items()}, plain_path)

    from_jit, from_plain = clip.load_model(str(jit_path)), clip.load_model(str(plain_path))
    assert from_jit.dtype == torch.float32
    for a, b, c in zip(_features(from_jit), _features(from_plain), _features(reference)):
        assert torch.equal(a, b)
        assert rel_err(a, c) < 1e-2  # fp16-rounded weights


def test_named_model_is_found_in_order(isolated_dirs, tiny_clip_file, tiny_teacher_clip_file):
    basename = os.path.basename(URL_B16)
    cache = isolated_dirs / "home" / ".cache" / "clip"
    cache.mkdir(parents=True)
    shutil.copy(tiny_teacher_clip_file, cache / basename)
    assert clip.load_model("ViT-B/16").embed_dim == 64  # ~/.cache/clip
    shutil.copy(tiny_clip_file, isolated_dirs / "weights" / basename)
    assert clip.load_model("ViT-B/16").embed_dim == 32  # $CLIP_WEIGHTS_DIR before the cache
    (isolated_dirs / "work" / "clip").mkdir()
    shutil.copy(tiny_teacher_clip_file, isolated_dirs / "work" / "clip" / basename)
    assert clip.load_model("ViT-B/16").embed_dim == 64  # ./clip/ first (PromptKD's place)


def test_missing_weights_offline_name_every_path_tried(isolated_dirs, monkeypatch):
    url = "http://127.0.0.1:9/" + URL_B16.split("/")[-2] + "/ViT-B-16.pt"
    monkeypatch.setitem(clip_module._MODELS, "ViT-B/16", url)
    with pytest.raises(FileNotFoundError) as info:  # a user error: train.py prints it as one line
        clip.load_model("ViT-B/16")
    message = str(info.value)
    for place in ("work/clip", "weights", "home/.cache/clip"):
        assert str(isolated_dirs / place / "ViT-B-16.pt") in message
    assert url in message and "CLIP_WEIGHTS_DIR" in message and "./clip/" in message
    assert not any((isolated_dirs / "home" / ".cache" / "clip").iterdir())  # no partial file left


def test_unknown_name_bad_file_and_jit_flag(tmp_path):
    with pytest.raises(ValueError, match="available models: RN50, RN101, RN50x4, RN50x16, RN50x64, ViT-B/32"):
        clip.load_model("ViT-H/99")
    corrupt = tmp_path / "ViT-B-16.pt"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(OSError, match=f"cannot read CLIP weights from {corrupt}"):
        clip.load_model(str(corrupt))
    not_clip = tmp_path / "other.pt"
    torch.save({"weight": torch.zeros(2)}, not_clip)
    with pytest.raises(ValueError, match=f"{not_clip}: not an OpenAI-format CLIP state dict"):
        clip.load_model(str(not_clip))
    with pytest.raises(ValueError, match="jit=True is not supported"):
        clip.load(str(not_clip), jit=True)


@pytest.fixture
def local_server(tmp_path):
    """A local HTTP server on a free port serving tmp_path/served; yields it and its base URL."""
    root = tmp_path / "served"
    root.mkdir()
    with serve_folder(root) as base_url:
        yield root, base_url


def test_download_checks_sha256_then_loads(isolated_dirs, local_server, monkeypatch, tiny_clip_file):
    root, base_url = local_server
    data = open(tiny_clip_file, "rb").read()
    good_sha, bad_sha = hashlib.sha256(data).hexdigest(), "0" * 64
    for sha in (good_sha, bad_sha):
        (root / sha).mkdir()
        (root / sha / "ViT-B-16.pt").write_bytes(data)
    cache = isolated_dirs / "home" / ".cache" / "clip"

    monkeypatch.setitem(clip_module._MODELS, "ViT-B/16", f"{base_url}/{bad_sha}/ViT-B-16.pt")
    with pytest.raises(FileNotFoundError, match=f"SHA-256 mismatch.*got {good_sha}, expected {bad_sha}"):
        clip.load_model("ViT-B/16")
    assert list(cache.iterdir()) == []

    monkeypatch.setitem(clip_module._MODELS, "ViT-B/16", f"{base_url}/{good_sha}/ViT-B-16.pt")
    model = clip.load_model("ViT-B/16")
    assert model.embed_dim == 32 and [p.name for p in cache.iterdir()] == ["ViT-B-16.pt"]
    assert hashlib.sha256((cache / "ViT-B-16.pt").read_bytes()).hexdigest() == good_sha


def test_load_returns_model_and_openai_preprocess(tmp_path, tiny_clip_file):
    """``model, preprocess = clip.load(...)`` as OpenAI's package: trainable eval-mode model, its preprocessing."""
    model, preprocess = clip.load(tiny_clip_file, device="cpu", jit=False)
    assert isinstance(model, clip.CLIP) and not model.training and model.dtype == torch.float32
    assert all(p.requires_grad for p in model.parameters())
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (45, 70), dtype=np.uint8), mode="L")  # grayscale: needs RGB
    # Independent reference with PIL: bicubic resize of the short side to 32, centre crop, RGB, by hand.
    resized = image.resize((int(70 * 32 / 45), 32), Image.BICUBIC)
    left = int(round((resized.width - 32) / 2.0))
    crop = np.asarray(resized.crop((left, 0, left + 32, 32)).convert("RGB"), dtype=np.float32) / 255.0
    mean = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
    std = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
    expected = torch.from_numpy(((crop - mean) / std).transpose(2, 0, 1))
    x = preprocess(image)
    assert x.shape == (3, 32, 32)
    torch.testing.assert_close(x, expected, atol=1e-6, rtol=0)
    frozen = clip.load_model(tiny_clip_file)
    with torch.no_grad():
        torch.testing.assert_close(model.encode_image(x[None]), frozen.encode_image(x[None]), rtol=0, atol=0)
