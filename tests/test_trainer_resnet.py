"""ResNet CLIP backbones (CoOp's rn50 configs): ZeroshotCLIP and CoOp run on them and match open_clip references;
the trainers that need deep visual prompts stop with one clear error."""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image

import clip
import train
from tests.helpers_baselines import SMALL_RUN
from tests.helpers_clip import make_resnet_openclip, reference_encode_text
from tests.helpers_datasets import write_tree
from tests.helpers_petr import petr_argv, write_eurosat
from tests.helpers_run import train_argv
from trainers.prompting.templates import single_template


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    """A tiny RN CLIP (open_clip, random weights) saved with OpenAI's key names, and the reference model."""
    reference = make_resnet_openclip((1, 1, 1, 1), 8, 32, embed_dim=32, seed=3)
    path = tmp_path_factory.mktemp("rn") / "RN50.pt"
    torch.save(reference.state_dict(), path)
    return str(path), reference


def _test_images(tree) -> tuple[torch.Tensor, torch.Tensor]:
    preprocess = T.Compose([T.Resize(32, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(32), T.ToTensor(),
                            T.Normalize((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))])
    items = sorted((path, label) for path, (label, tag) in tree.truth.items() if tag == "test")
    return (torch.stack([preprocess(Image.open(p).convert("RGB")) for p, _ in items]),
            torch.tensor([label for _, label in items]))


def _accuracy(image_features: torch.Tensor, text_features: torch.Tensor, labels: torch.Tensor) -> float:
    logits = F.normalize(image_features, dim=-1) @ F.normalize(text_features, dim=-1).t()
    return 100.0 * (logits.argmax(1) == labels).double().mean().item()


def test_zeroshot_and_coop_run_on_a_resnet_clip(tmp_path, resnet):
    rn_file, reference = resnet
    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    images, labels = _test_images(tree)
    names = tree.classnames

    out = tmp_path / "zs"
    train.main(train_argv("ZeroshotCLIP", "rn50", tree.root, out, *SMALL_RUN, flags=("--eval-only",), backbone=rn_file))
    with torch.no_grad():
        text = reference.encode_text(clip.tokenize([single_template("EuroSAT").format(n) for n in names]))
        expected = _accuracy(reference.encode_image(images), text, labels)
    assert json.loads((out / "results.json").read_text())["accuracy"] == pytest.approx(expected, abs=1e-6)

    out = tmp_path / "coop"
    train.main(train_argv("CoOp", "rn50_ctxv1", tree.root, out, *SMALL_RUN, backbone=rn_file))
    ctx = torch.load(out / "prompt_learner" / "model.pth.tar-1", weights_only=True)["state_dict"]["ctx"]
    with torch.no_grad():
        tokens = clip.tokenize([f"X X X X {n}." for n in names])
        expected = _accuracy(reference.encode_image(images), reference_encode_text(reference, tokens, [ctx]), labels)
    result = json.loads((out / "results.json").read_text())
    assert result["accuracy"] == pytest.approx(expected, abs=1e-6) and result["config"] == "rn50_ctxv1"


def test_prompt_trainers_need_a_vit(tmp_path, resnet, tiny_teacher_clip_file):
    rn_file, _ = resnet
    write_eurosat(tmp_path / "data")
    with pytest.raises(ValueError, match=r"^PETR needs a ViT CLIP \(deep visual prompts\), but MODEL\.BACKBONE\.NAME "
                                         r".*RN50\.pt is a ResNet CLIP; set MODEL\.BACKBONE\.NAME to a ViT") as e:
        train.main(petr_argv(tmp_path / "data", tmp_path / "petr", rn_file, tiny_teacher_clip_file))
    assert "\n" not in str(e.value)
