"""ZeroshotCLIP and the shared zero-shot helpers, checked against per-template loops and open_clip's image tower."""
from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F
import torchvision.transforms as T
from PIL import Image

import clip
import train
from clip.classifier import zeroshot_text_features
from tests.helpers_datasets import write_tree
from tests.helpers_run import train_argv
from trainers.prompting.templates import (
    CUSTOM_TEMPLATES,
    ENSEMBLE_TEMPLATES,
    IMAGENET_TEMPLATES,
    IMAGENET_TEMPLATES_SELECT,
    ensemble_templates,
    single_template,
)
from trainers.zeroshot import templates_for

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
COOP_DATASETS = ["Caltech101", "DescribableTextures", "EuroSAT", "FGVCAircraft", "Food101", "ImageNet", "OxfordPets",
                 "OxfordFlowers", "StanfordCars", "SUN397", "UCF101"]
IMAGENET_VARIANTS = ["ImageNetV2", "ImageNetSketch", "ImageNetA", "ImageNetR"]


@torch.no_grad()
def reference_ensemble(clip_model, classnames: list[str], templates: list[str]) -> torch.Tensor:
    """One template at a time (full 77-token texts): normalise, average over templates, renormalise."""
    per_template = []
    for template in templates:
        tokens = clip.tokenize([template.format(name.replace("_", " ")) for name in classnames])
        per_template.append(F.normalize(clip_model.encode_text(tokens), dim=-1))
    return F.normalize(torch.stack(per_template).mean(dim=0), dim=-1)


def test_template_tables_cover_the_datasets():
    for name in COOP_DATASETS + IMAGENET_VARIANTS:
        assert CUSTOM_TEMPLATES[name].count("{}") == 1
        assert ENSEMBLE_TEMPLATES[name] and all(t.count("{}") == 1 for t in ENSEMBLE_TEMPLATES[name])
    assert len(IMAGENET_TEMPLATES) == len(set(IMAGENET_TEMPLATES)) == 80
    assert set(IMAGENET_TEMPLATES_SELECT) <= set(IMAGENET_TEMPLATES) and len(IMAGENET_TEMPLATES_SELECT) == 7
    assert all(ENSEMBLE_TEMPLATES[v] == IMAGENET_TEMPLATES for v in IMAGENET_VARIANTS)
    sizes = {name: len(ENSEMBLE_TEMPLATES[name]) for name in COOP_DATASETS}
    assert sizes == {"Caltech101": 34, "DescribableTextures": 8, "EuroSAT": 3, "FGVCAircraft": 2, "Food101": 1,
                     "ImageNet": 80, "OxfordPets": 1, "OxfordFlowers": 1, "StanfordCars": 8, "SUN397": 2, "UCF101": 48}
    assert single_template("EuroSAT") == "a centered satellite photo of {}."
    assert ENSEMBLE_TEMPLATES["OxfordFlowers"] == ["a photo of a {}, a type of flower."]


def test_template_modes_and_fallbacks(capsys):
    assert templates_for("DescribableTextures", "single") == ["{} texture."]
    assert templates_for("ImageNet", "select") == IMAGENET_TEMPLATES_SELECT
    assert templates_for("EuroSAT", "select") == [*IMAGENET_TEMPLATES_SELECT, "a centered satellite photo of {}."]
    assert ensemble_templates("NoSuchDataset") == [*IMAGENET_TEMPLATES_SELECT, "a photo of a {}."]
    assert "NoSuchDataset" in capsys.readouterr().out
    with pytest.raises(ValueError, match="TRAINER.ZSCLIP.TEMPLATES"):
        templates_for("EuroSAT", "all")


def test_ensemble_equals_per_template_average(tiny_clip):
    classnames = ["Annual_Crop Land", "Forest", "Sea or Lake", "Highway or Road"]
    templates = ENSEMBLE_TEMPLATES["EuroSAT"] + ENSEMBLE_TEMPLATES["FGVCAircraft"][:1]
    expected = reference_ensemble(tiny_clip, classnames, templates)
    for batch_size in (3, 256):  # batches that cut through a class's templates, and one batch
        actual = zeroshot_text_features(tiny_clip, classnames, templates, "cpu", batch_size=batch_size)
        torch.testing.assert_close(actual, expected, atol=2e-5, rtol=0)
    single = zeroshot_text_features(tiny_clip, classnames, templates[:1], "cpu")
    torch.testing.assert_close(single, reference_ensemble(tiny_clip, classnames, templates[:1]),
                               atol=2e-5, rtol=0)
    assert not torch.allclose(single, expected, atol=1e-3)  # the ensemble really differs from one template


@pytest.mark.parametrize("mode", ["single", "ensemble"])
def test_zeroshot_clip_eval_only_matches_direct_computation(tmp_path, tiny_clip_file, tiny_clip, tiny_openclip_model,
                                                           mode):
    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    out = tmp_path / "out"
    config = "vit_b16" if mode == "single" else "vit_b16_ensemble"
    trainer = train.main(train_argv("ZeroshotCLIP", config, tmp_path / "data", out, "DATALOADER.TEST.BATCH_SIZE", "8",
                                    flags=("--eval-only",), backbone=tiny_clip_file))
    assert trainer.get_model_names() == []
    result = json.loads((out / "results.json").read_text())
    assert result["templates"] == mode and result["subsample_classes"] == "all"

    # Independent: torchvision preprocessing, open_clip's image tower, the templates of the published tables.
    templates = [CUSTOM_TEMPLATES["EuroSAT"]] if mode == "single" else ENSEMBLE_TEMPLATES["EuroSAT"]
    text = reference_ensemble(tiny_clip, tree.classnames, templates)
    preprocess = T.Compose([T.Resize(32, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(32),
                            T.ToTensor(), T.Normalize(CLIP_MEAN, CLIP_STD)])
    test_items = sorted((path, label) for path, (label, tag) in tree.truth.items() if tag == "test")
    images = torch.stack([preprocess(Image.open(path).convert("RGB")) for path, _ in test_items])
    labels = torch.tensor([label for _, label in test_items])
    with torch.no_grad():
        image_features = F.normalize(tiny_openclip_model.encode_image(images), dim=-1)
        expected_logits = tiny_openclip_model.logit_scale.exp() * image_features @ text.t()
        actual_logits = trainer.model_inference(images)
    torch.testing.assert_close(actual_logits, expected_logits, atol=1e-3, rtol=1e-4)
    expected_acc = 100.0 * (expected_logits.argmax(dim=1) == labels).float().mean().item()
    assert result["accuracy"] == pytest.approx(expected_acc)
    assert os.path.isfile(out / "log.txt")
