"""open_clip's CLIPs as the prompt-aware CLIP (clip/openclip.py, clip/weights.py): features and zero-shot logits equal
open_clip's own forward (``open_clip.create_model('local-dir:...')`` on the same folder) for a tiny random-weight model
of every supported architecture, GELU and QuickGELU; deep prompts equal hand-made prompting on open_clip's modules;
the prompt learners' sizes follow the backbone's widths; the names, and what is refused; the registry module against
open_clip's registry; the hub cache lookup against huggingface_hub's; the download through open_clip from a hub
stand-in; the offline line of a real tag; the image normalisation that follows the backbone."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import open_clip
import pytest
import torch
from huggingface_hub import constants as hub_constants
from huggingface_hub import try_to_load_from_cache

import clip
import train
from clip import download as clip_download
from clip import openclip
from clip.model import build_sized
from clip.openclip_registry import ARCHITECTURES, OPENAI_MEAN, OPENAI_STD
from clip.weights import find_weights, open_clip_name
from engine.errors import ConfigError, InputNotFoundError, InvalidInputError
from runner.preflight import Input, check_weights
from tests.helpers_clip import (
    OPENCLIP_CFG,
    make_local_dir,
    reference_encode_image,
    reference_encode_text,
    tiny_config,
)
from tests.helpers_fetch import HubRepo, serve
from tests.helpers_petr import write_eurosat
from tests.helpers_run import HANG_GUARD_S, REPO, train_argv

FAST = ("ViT-B-16", "ViT-B-16-quickgelu", "ViT-g-14", "ViT-bigG-14-quickgelu", "ViT-B-16-plus-240")
"""Architectures whose parity runs in the fast tier: GELU and QuickGELU, heads of 64 and of 88 / 104 with MLP ratios
other than 4 (g, bigG), and an image size other than 224; the rest are marked slow."""
TAG = "open_clip:ViT-B-16/laion2b_s34b_b88k"
HUB = "laion/CLIP-ViT-B-16-laion2B-s34B-b88K"
TEXTS = ["a photo of a cat.", "a diagram", "", "an ÉCLAIR on a plate!!", "x " * 30]


def max_diffs(model, reference, size: int) -> tuple[float, float, float]:
    """Max abs difference of image features, text features and image-text logits between ``model`` (ours) and
    ``reference`` (open_clip's CLIP) on fixed inputs."""
    images = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(0))
    tokens = clip.tokenize(TEXTS, context_length=model.context_length)
    with torch.no_grad():
        image = (model.encode_image(images) - reference.encode_image(images)).abs().max()
        text = (model.encode_text(tokens) - reference.encode_text(tokens)).abs().max()
        logits = (model(images, tokens)[0] - reference.get_logits(images, tokens)[0]).abs().max()
    return float(image), float(text), float(logits)


@pytest.mark.parametrize("architecture", [a if a in FAST else pytest.param(a, marks=pytest.mark.slow)
                                          for a in ARCHITECTURES])
def test_features_and_logits_equal_open_clips_own_forward(tmp_path, architecture):
    cfg = tiny_config(architecture)
    reference = make_local_dir(tmp_path / "tiny", cfg, seed=3)
    model = clip.load_model(f"open_clip:local-dir:{tmp_path / 'tiny'}")
    activation, size = ARCHITECTURES[architecture]
    assert model.activation == activation and model.image_resolution == size
    assert model.visual.transformer.resblocks[0].attn.heads == reference.visual.transformer.resblocks[0].attn.num_heads
    assert max(max_diffs(model, reference, size)) < 1e-5
    other = "gelu" if activation == "quick_gelu" else "quick_gelu"  # the check can fail: the activation matters
    swapped = build_sized({**openclip.model_dims(cfg), "activation": other}, dict(model.state_dict()), "it")
    assert min(max_diffs(swapped, reference, size)) > 1e-4


def test_deep_prompts_on_an_open_clip_model_equal_prompting_its_modules(tmp_path):
    reference = make_local_dir(tmp_path / "tiny", OPENCLIP_CFG, seed=4)
    model = clip.load_model(f"open_clip:local-dir:{tmp_path / 'tiny'}")
    g = torch.Generator().manual_seed(1)
    vision = [torch.randn(3, 96, generator=g) for _ in range(4)]
    text = [torch.randn(2, 64, generator=g) for _ in range(3)]
    images = torch.randn(2, 3, 32, 32, generator=g)
    tokens = clip.tokenize(["X X a red circle.", "X X a dog"])
    with torch.no_grad():
        assert (model.encode_image(images, vision) - reference_encode_image(reference, images, vision)).abs().max() \
            < 1e-5
        assert (model.encode_text(tokens, text) - reference_encode_text(reference, tokens, text)).abs().max() < 1e-5


@pytest.mark.parametrize("trainer, expected", [
    ("CoOp", 16 * 64),  # 16 context tokens of the text width (64)
    ("IVLP", 4 * 4 * 96 + 4 * 3 * 64),  # 4 vision tokens in 4 blocks of width 96, 4 text tokens in 3 blocks of 64
])
def test_prompt_learners_follow_the_backbones_widths(tmp_path, tiny_openclip_name, trainer, expected):
    write_eurosat(tmp_path / "data")
    built = train.main(train_argv(trainer, "demo", tmp_path / "data", tmp_path / "run", "DATASET.NUM_SHOTS", "1",
                                  "DATASET.SUBSAMPLE_CLASSES", "base", flags=("--no-train",),
                                  backbone=tiny_openclip_name))
    trainable = sum(p.numel() for name in built.get_model_names() for p in built.get_model(name).parameters()
                    if p.requires_grad)
    assert trainable == expected


def test_names(tmp_path):
    spec = open_clip_name(TAG)
    assert (spec.model, spec.tag, spec.file, spec.folder) == ("ViT-B-16", "laion2b_s34b_b88k", "", "")
    assert spec.pretrained.hub == HUB and spec.pretrained.files == ("open_clip_model.safetensors",
                                                                      "open_clip_pytorch_model.bin")
    for name in (TAG, "open_clip:ViT-L-14/laion2b_s32b_b82k", "open_clip:ViT-B-16-quickgelu/dfn2b"):
        entry, expected = open_clip_name(name).pretrained, open_clip.pretrained.get_pretrained_cfg(
            *name.removeprefix("open_clip:").split("/"))
        assert (entry.mean, entry.std) == (tuple(expected["mean"]), tuple(expected["std"]))
    assert open_clip_name("open_clip:ViT-L-14/laion2b_s32b_b82k").pretrained.mean == (0.5, 0.5, 0.5)
    assert open_clip_name("open_clip:ViT-B-16=/w/epoch_32.pt").file == "/w/epoch_32.pt"
    assert open_clip_name("open_clip:local-dir:/w/tiny").folder == "/w/tiny"
    assert open_clip_name("ViT-B/16") is None and open_clip_name("/w/ViT-B-16.pt") is None


@pytest.mark.parametrize("name, message", [
    ("open_clip:ViT-B-16", "CLIP name 'open_clip:ViT-B-16' is not an open_clip name; give open_clip:MODEL/TAG (a "
                           "pretrained tag, e.g. open_clip:ViT-B-16/laion2b_s34b_b88k), open_clip:MODEL=FILE (a "
                           "checkpoint of a built-in architecture) or open_clip:local-dir:FOLDER (open_clip's "
                           "local-dir layout: open_clip_config.json and open_clip_model.safetensors)"),
    ("open_clip:ViT-B-16/openai", "open_clip:ViT-B-16/openai: open_clip has no pretrained tag 'openai' of ViT-B-16 "
                                  "that fits; its weights were trained with QuickGELU: name "
                                  "open_clip:ViT-B-16-quickgelu/openai"),
    ("open_clip:ViT-B-16-plus-240/nope", "open_clip:ViT-B-16-plus-240/nope: open_clip has no pretrained tag 'nope' of "
                                         "ViT-B-16-plus-240 that fits; tags of this model: laion400m_e31, "
                                         "laion400m_e32"),
    ("open_clip:ViT-X-99/tag", "open_clip:ViT-X-99/tag: open_clip has no model 'ViT-X-99'; `python -m clip.openclip` "
                               "lists the supported pretrained names"),
    ("open_clip:ViT-B-16-SigLIP/webli", "it is a SigLIP model (sigmoid loss with a logit bias)"),
    ("open_clip:coca_ViT-B-32/laion2b_s13b_b90k", "it is a CoCa model (a captioning decoder on top of CLIP)"),
    ("open_clip:convnext_base/laion400m_s13b_b51k", "its image tower is timm's convnext_base, not OpenAI's ViT"),
    ("open_clip:roberta-ViT-B-32/laion2b_s12b_b32k", "its text tower is Hugging Face's roberta-base, not OpenAI's"),
    ("open_clip:ViT-L-14-CLIPA/datacomp1b", "its tokenizer is not OpenAI's BPE (hf_tokenizer_name=bert-base-uncased)"),
    ("open_clip:RN50/openai", "its image tower is a ResNet, which takes no deep visual prompts"),
    ("open_clip:ViT-M-16-alt=/w/x.pt", "its image tower sets ls_init_value=0.0001 (OpenAI's structure has None)"),
])
def test_bad_names_and_architectures_that_do_not_fit_are_one_line(name, message):
    with pytest.raises(ConfigError) as e:
        open_clip_name(name)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("change, message", [
    ({"init_logit_bias": -10.0}, "it is a SigLIP model"),
    ({"text_cfg": {**OPENCLIP_CFG["text_cfg"], "hf_tokenizer_name": "bert-base-uncased"}},
     "its tokenizer is not OpenAI's BPE (hf_tokenizer_name=bert-base-uncased)"),
    ({"vision_cfg": {**OPENCLIP_CFG["vision_cfg"], "pool_type": "avg"}},
     "its image tower sets pool_type='avg' (OpenAI's structure has 'tok')"),
    ({"text_cfg": {**OPENCLIP_CFG["text_cfg"], "no_causal_mask": True}},
     "its text tower sets no_causal_mask=True (OpenAI's structure has False)"),
])
def test_a_local_dir_config_that_does_not_fit_is_refused_naming_it(tmp_path, change, message):
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": {**OPENCLIP_CFG, **change}}))
    (folder / "open_clip_model.safetensors").write_bytes(b"never read")
    with pytest.raises(InvalidInputError) as e:
        clip.load_model(f"open_clip:local-dir:{folder}")
    assert str(e.value).startswith(f"open_clip:local-dir:{folder}: {folder / 'open_clip_config.json'} does not fit "
                                   f"the prompt-aware CLIP: {message}")


def test_a_checkpoint_of_another_architecture_is_one_line(tmp_path, tiny_openclip_name):
    weights = clip.weights_path(tiny_openclip_name)
    with pytest.raises(InvalidInputError, match=r"^[^\n]*: state dict does not match ViT-B-16's config: "
                       r"positional_embedding has shape \[77, 64\], the model's is \[77, 512\]"):
        clip.load_model(f"open_clip:ViT-B-16={weights}")


@pytest.mark.slow
def test_a_checkpoint_file_of_a_built_in_architecture(tmp_path):
    torch.manual_seed(0)
    reference = open_clip.create_model("ViT-B-16").eval()
    torch.save({"state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, tmp_path / "e.pt")
    model = clip.load_model(f"open_clip:ViT-B-16={tmp_path / 'e.pt'}")
    assert model.activation == "gelu" and (model.image_mean, model.image_std) == (OPENAI_MEAN, OPENAI_STD)
    assert max(max_diffs(model, reference, 224)) < 1e-4


def test_the_registry_module_is_open_clips_registry():
    with open(openclip.REGISTRY_FILE) as f:
        assert f.read() == openclip.render(), "run `python -m clip.openclip --write` after an open_clip upgrade"
    for name in ("ViT-B-16/laion2b_s34b_b88k", "ViT-L-14/datacomp_xl_s13b_b90k", "ViT-B-16-quickgelu/dfn2b",
                 "ViT-H-14-quickgelu/metaclip_fullcc", "ViT-bigG-14/laion2b_s39b_b160k"):
        assert open_clip_name(f"open_clip:{name}").pretrained is not None
    assert {"ViT-B-16-SigLIP", "coca_ViT-L-14", "convnext_base", "RN50", "xlm-roberta-base-ViT-B-32"}.isdisjoint(
        ARCHITECTURES)


def hub_tree(cache, files: dict[str, bytes], commit: str = "c0ffee") -> None:
    """A hub cache entry of HUB as the hub client writes it: refs/main, blobs named by SHA-256, snapshot links."""
    folder = cache / ("models--" + HUB.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "blobs").mkdir()
    (folder / "snapshots" / commit).mkdir(parents=True)
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (folder / "snapshots" / commit / name).symlink_to(os.path.relpath(blob, folder / "snapshots" / commit))


def test_the_hub_cache_is_looked_up_as_the_hub_client_does(tmp_path, monkeypatch):
    monkeypatch.setenv("CLIP_WEIGHTS_DIR", str(tmp_path / "weights"))
    cache = tmp_path / "hub"
    assert find_weights(TAG, str(cache), cwd=str(tmp_path)) is None
    hub_tree(cache, {"open_clip_pytorch_model.bin": b"bin"})
    expected = try_to_load_from_cache(HUB, "open_clip_pytorch_model.bin", cache_dir=str(cache))
    assert isinstance(expected, str) and find_weights(TAG, str(cache), cwd=str(tmp_path)) == expected
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    assert find_weights(TAG, cwd=str(tmp_path)) == expected
    other = tmp_path / "other"
    hub_tree(other, {"open_clip_pytorch_model.bin": b"bin", "open_clip_model.safetensors": b"st"})
    assert find_weights(TAG, str(other), cwd=str(tmp_path)) == try_to_load_from_cache(
        HUB, "open_clip_model.safetensors", cache_dir=str(other))  # open_clip's order: safetensors first
    by_hand = tmp_path / "weights" / "laion" / "CLIP-ViT-B-16-laion2B-s34B-b88K" / "open_clip_model.safetensors"
    by_hand.parent.mkdir(parents=True)
    by_hand.write_bytes(b"placed")
    assert find_weights(TAG, str(tmp_path / "empty"), cwd=str(tmp_path)) == str(by_hand)


def download(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clip.download", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1", **env},
                          timeout=HANG_GUARD_S)


@pytest.mark.slow
def test_download_through_open_clip_from_a_hub_stand_in(tmp_path, monkeypatch, capsys):
    payload = b"tiny stand-in for an open_clip weight file\n" * 50
    repo = HubRepo(HUB, {"open_clip_model.safetensors": payload}, lfs={"open_clip_model.safetensors"})
    with serve(repo.handler()) as url:  # huggingface_hub reads HF_ENDPOINT once, at import: a fresh process
        done = download([TAG, "--dir", str(tmp_path / "hub")], {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "h"),
                                                                "PETR_OFFLINE": ""})
    assert done.returncode == 0, done.stderr
    path = find_weights(TAG, str(tmp_path / "hub"))
    assert open(path, "rb").read() == payload
    assert done.stdout.splitlines() == [f"{TAG}: {path} (downloaded by open_clip from {HUB}, SHA-256 checked)",
                                        f"Compute nodes read these files with HF_HUB_CACHE={tmp_path / 'hub'}"]
    assert clip_download.main([TAG, "--dir", str(tmp_path / "hub")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"{TAG}: {path} (already there, SHA-256 checked)"
    bad = HubRepo(HUB, {"open_clip_model.safetensors": payload}, lfs={"open_clip_model.safetensors"},
                  corrupt={"open_clip_model.safetensors"})
    with serve(bad.handler()) as url:
        done = download([TAG, "--dir", str(tmp_path / "bad")], {"HF_ENDPOINT": url, "HF_HOME": str(tmp_path / "h"),
                                                                "PETR_OFFLINE": ""})
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1
    assert f"but the hub lists {hashlib.sha256(payload).hexdigest()}: the download is corrupt" in errors[0]


def offline_line(weights_dir, hub_dir) -> str:
    """The by-hand part of the offline line of TAG, written out for the test."""
    return (f"on a machine with internet run `python -m clip.download {TAG}` and copy "
            f"{hub_dir}/models--laion--CLIP-ViT-B-16-laion2B-s34B-b88K to the same place here, or download "
            f"https://huggingface.co/{HUB}/resolve/main/open_clip_model.safetensors (or open_clip_pytorch_model.bin, "
            f"where the hub has no open_clip_model.safetensors) into {weights_dir}/{HUB}/ (sha256sum must print the "
            f"SHA256 listed at https://huggingface.co/{HUB}/blob/main/open_clip_model.safetensors)")


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No network for the hub client (HF_HUB_OFFLINE), an empty hub cache and weights folder."""
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    for key, folder in (("HF_HUB_CACHE", "hub"), ("CLIP_WEIGHTS_DIR", "w")):
        monkeypatch.setenv(key, str(tmp_path / folder))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    return tmp_path


def test_offline_a_real_tag_is_one_line_naming_file_place_and_check(offline, capsys):
    assert clip_download.main([TAG, "--dir", str(offline / "hub")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"error: {TAG}: open_clip weights not in the hub cache nor placed by hand, and they cannot be downloaded here "
        f"(PETR_OFFLINE=1 is set: this node does not download); {offline_line(offline / 'w', offline / 'hub')}"]
    assert clip_download.main(["--dry-run", TAG]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"missing: {TAG}: https://huggingface.co/{HUB}/resolve/main/open_clip_model.safetensors -> "
        f"{offline}/hub/models--laion--CLIP-ViT-B-16-laion2B-s34B-b88K; by hand: "
        f"{offline_line(offline / 'w', offline / 'hub')}"]
    with pytest.raises(InputNotFoundError) as e:
        clip.load_model(TAG)
    assert str(e.value) == err.splitlines()[0].removeprefix("error: ")


def test_a_hub_that_does_not_answer_is_one_line_naming_the_folder_given(tmp_path):
    """No offline knob, and the hub does not answer (a closed port stands for a node without a route): the hub is
    asked once, so the fetch prints its one line and no client retries, and the line names the ``--dir`` given."""
    done = download([TAG, "--dir", str(tmp_path / "hub")],
                    {"HF_ENDPOINT": "http://127.0.0.1:9", "PETR_OFFLINE": "", "HF_HUB_OFFLINE": "",
                     "HF_HOME": str(tmp_path / "h"), "HOME": str(tmp_path / "home")})
    url = f"http://127.0.0.1:9/{HUB}/resolve/main/open_clip_model.safetensors"
    assert (done.returncode, done.stdout) == (2, "") and done.stderr.splitlines() == [
        f"error: {TAG}: open_clip weights not in the hub cache nor placed by hand, and they cannot be downloaded here "
        f"({url} does not answer: [Errno 111] Connection refused); on a machine with internet run `python -m "
        f"clip.download {TAG} --dir {tmp_path / 'hub'}` and copy {tmp_path}/hub/models--laion--CLIP-ViT-B-16-laion2B-"
        f"s34B-b88K to the same place here, or download {url} (or open_clip_pytorch_model.bin, where the hub has no "
        f"open_clip_model.safetensors) into {tmp_path}/home/.cache/clip/{HUB}/ (sha256sum must print the SHA256 "
        f"listed at {url.replace('/resolve/', '/blob/')})"]


def test_the_preflight_resolves_open_clip_names_without_torch(offline, tiny_openclip_name):
    tmp_path = offline
    item = Input("weights", TAG)
    check_weights(item)  # PETR_OFFLINE=1 (tests/conftest.py): no probe
    assert item.status == "missing (offline)" and item.problems == [
        f"{TAG}: CLIP weights missing and this node cannot download them; "
        f"{offline_line(tmp_path / 'w', tmp_path / 'hub')}"]
    hub_tree(tmp_path / "hub", {"open_clip_model.safetensors": b"st"})
    item = Input("weights", TAG)
    check_weights(item)
    assert item.status == f"cached ({find_weights(TAG)})" and not item.problems
    item = Input("weights", tiny_openclip_name)
    check_weights(item)
    assert item.status.startswith("cached (") and item.status.endswith("open_clip_model.safetensors)")
    for name, problem in (("open_clip:ViT-B-16-SigLIP/webli", "it is a SigLIP model"),
                          (f"open_clip:local-dir:{tmp_path / 'none'}", "put open_clip_config.json and one of")):
        item = Input("weights", name)
        check_weights(item)
        assert item.status == "missing" and problem in item.problems[0]
    code = "import sys, runner.preflight, clip.weights; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S).stdout == "False\n"


def test_the_image_normalisation_follows_the_backbone(tmp_path, capsys):
    folder = tmp_path / "half"
    make_local_dir(folder, OPENCLIP_CFG, seed=5, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    write_eurosat(tmp_path / "data")
    name = f"open_clip:local-dir:{folder}"
    trainer = train.main(train_argv("ZeroshotCLIP", "demo", tmp_path / "data", tmp_path / "run", backbone=name,
                                    tiny=False))
    assert list(trainer.cfg.INPUT.PIXEL_MEAN) == [0.5] * 3 and list(trainer.cfg.INPUT.PIXEL_STD) == [0.25] * 3
    assert (trainer.clip_model.image_mean, trainer.clip_model.image_std) == ((0.5,) * 3, (0.25,) * 3)
    normalize = clip.load(name)[1].transforms[-1]  # OpenAI's entry point: the preprocessing of the CLIP's own
    assert (normalize.mean, normalize.std) == ((0.5,) * 3, (0.25,) * 3)
    config = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert config["INPUT.PIXEL_MEAN"] == [0.5] * 3 and config["INPUT.PIXEL_STD"] == [0.25] * 3
    assert (f"Note: INPUT.PIXEL_MEAN {list(OPENAI_MEAN)} -> [0.5, 0.5, 0.5], INPUT.PIXEL_STD {list(OPENAI_STD)} -> "
            f"[0.25, 0.25, 0.25], the normalisation of {name}") in capsys.readouterr().out
